"""How the trainer and workers pace each other (swarm/roles/trainer.py `_verify_more`,
swarm/roles/worker.py `_share`), driven in memory with test_roles' fake jobs: the trainer checks only
what its next step needs, one verify job at a time, newest version first; a failed train job loses
no accepted rollout; workers split one step's worth of each version and a stalled one makes more."""

from collections import Counter

from swarm import jobs
from swarm.roles import worker as worker_role
from tests.swarm.test_roles import swarm

PARAMS = {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8}  # a step = 2 commitments


def test_the_trainer_checks_only_what_its_next_step_needs_one_at_a_time():
    net, trainer, workers, task_id = swarm(n_workers=3, params=PARAMS)
    in_flight, worst = {}, 0
    real = net.jobs

    def watching(peer, job):  # count the trainer's verify jobs that are running at once
        nonlocal worst
        if peer == trainer.peer_id and job.kind == jobs.VERIFY:
            in_flight[job.job_id] = net.now
        for jid, started in list(in_flight.items()):
            if net.now >= started + net.job_seconds:
                del in_flight[jid]
        worst = max(worst, len(in_flight))
        return real(peer, job)
    net.jobs = watching
    net.run_for(30)
    work = trainer.snapshot(net.now)["work"]["trainer"][task_id]
    assert work["version"] >= 5
    verified = sum(1 for p, j in net.jobs_run if p == trainer.peer_id and j.kind == jobs.VERIFY)
    committed = len(net.events_named("rollouts-committed"))
    trained = len(net.events_named("rollout-trained"))
    # every check fed a step (a few may be waiting for the next one), and far fewer batches were
    # checked than committed: part of the first version's backlog went stale unchecked
    assert trained <= verified <= trained + 2 < committed
    assert worst == 1
    # within the async window (2), and newest first: once the first version's backlog is used up,
    # steps mix one- and two-version-old rollouts rather than train on the oldest
    lags = [f["trained_into"] - 1 - f["policy_version"] for _, f in net.events_named("rollout-trained")]
    assert max(lags) <= 2 and sum(lags[6:]) / len(lags[6:]) < 2


def test_rollouts_of_a_failed_train_job_are_trained_later():
    net, trainer, workers, task_id = swarm(n_workers=2, params=PARAMS)
    real, failed = net.jobs, []

    def flaky(peer, job):
        if job.kind == jobs.TRAIN and not failed:
            failed.append(job.payload.rollouts)
            return False, None, "out of memory", {}
        return real(peer, job)
    net.jobs = flaky
    net.run_for(30)
    assert failed and [f for _, f in net.events_named("job-failed") if f["kind"] == "train"]
    trained_blobs = set()
    for p, j in net.jobs_run:
        if j.kind == jobs.TRAIN and j.payload.rollouts != failed[0]:
            trained_blobs.update(j.payload.rollouts)
    assert set(failed[0]) <= trained_blobs  # accepted, checked, and after the failure trained on
    assert trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"] >= 3


def test_workers_split_each_version_and_a_stalled_worker_makes_more():
    net, trainer, workers, task_id = swarm(n_workers=3, params=PARAMS)
    net.run_for(25)
    per_version = Counter((p, f["version"]) for p, f in net.events_named("rollouts-committed"))
    newest = trainer.snapshot(net.now)["work"]["trainer"][task_id]["version"]
    # the first version primes the async window: async_level + 1 = 3 shares (at least one batch) each,
    # never the uncapped backlog that went stale unread
    assert [per_version[(w.peer_id, 0)] for w in workers] == [3, 3, 3]
    settled = range(2, newest - 1)  # versions after the first one
    for version in settled:
        counts = [per_version[(w.peer_id, version)] for w in workers]
        assert sum(counts) == 2 and max(counts) == 1, (version, counts)  # 2 commitments, one each, ranked
    # the rank rotates with the version: each worker sits out one version in three, none every one
    idle = Counter(w.peer_id for version in settled for w in workers if not per_version[(w.peer_id, version)])
    assert len(settled) >= 3 and len(idle) == 3 and max(idle.values()) - min(idle.values()) <= 1

    # the trainer stops publishing (its train jobs fail): workers at their share wait STALL_AFTER, then
    # make one more minimum step's worth of the same version between them (2 batches, not one each),
    # the first from the worker that sat the version out; each further stall 2 more
    real = net.jobs
    net.jobs = lambda peer, job: (False, None, "disk full", {}) if job.kind == jobs.TRAIN else real(peer, job)
    net.run_for(5)
    committed = lambda: [(p, f["version"]) for p, f in net.events_named("rollouts-committed")]
    start = len(committed())
    net.run_for(worker_role.STALL_AFTER + 2)
    first = committed()[start:]
    assert len(first) == 2 and len({v for _, v in first}) == 1, first
    version = first[0][1]
    earlier = Counter(committed()[:start])
    sat_out = [w.peer_id for w in workers if not earlier[(w.peer_id, version)]]
    assert sat_out and sat_out[0] in {p for p, _ in first} and len({p for p, _ in first}) == 2
    net.run_for(worker_role.STALL_AFTER)
    second = committed()[start + 2:]
    assert len(second) == 2 and {v for _, v in second} == {version}, second
