"""Several trainers per task: standbys follow, one takes over after silence, forks resolve to one chain."""

import hashlib

from gossip.identity import Identity
from swarm import jobs
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet, fake_packed_version

TAKEOVER = 15.0
PARAMS = {"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8, "republish_interval": 5.0,
          "takeover_after": TAKEOVER}
PRODUCED: dict[bytes, bytes] = {}


def h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def chain_jobs(peer, job):
    """Like tests/swarm/test_roles.py's fake jobs, but a version's weights name the trainer that made
    them: two chains never share a version's weights."""
    p = job.payload
    if job.kind == jobs.VERIFY:
        return True, jobs.VerifyResult(True, "ok", b""), "", {}
    if job.kind == jobs.INIT:
        return fake_packed_version(0, b"w0")
    if job.kind == jobs.GENERATE:
        blob = f"rollouts v{p.version} {p.weights.hex()[:8]} {p.prompt_indices} by {peer}".encode()
        PRODUCED[h(blob)] = blob
        return True, jobs.GenerateResult(h(blob), len(blob), 10 * len(p.prompt_indices), 0.5), "", {h(blob): blob}
    if job.kind == jobs.TRAIN:
        return fake_packed_version(p.version + 1, f"w{p.version + 1}-{peer[-6:]}".encode(), {"loss": 0.1})
    raise AssertionError(job.kind)


def swarm(n_trainers=3, n_workers=3, others=(), params=PARAMS):
    trainers = [PeerCore(Identity(bytes([0x10 + i]) * 32), CoreConfig(roles=("trainer",)), seed=10 + i)
                for i in range(n_trainers)]
    workers = [PeerCore(Identity(bytes([0x20 + i]) * 32), CoreConfig(roles=("worker",)), seed=20 + i)
               for i in range(n_workers)]
    workers += [PeerCore(Identity(bytes([0x30 + i]) * 32), CoreConfig(roles=(role,)), seed=30 + i)
                for i, role in enumerate(others)]  # validators, mirrors: last in `workers`
    net = MemoryNet([*trainers, *workers], T0)
    net.jobs = chain_jobs
    net.start()
    everyone = [c.peer_id for c in trainers + workers]
    for i, a in enumerate(everyone):
        for b in everyone[i + 1:]:
            net.connect(a, b)
    net.events = Timed(net)
    net.run_for(3)
    t = task(trainer_keys=tuple(c.identity.public_key for c in trainers), params=params)
    out = net.deliver(trainers[0].peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    return net, trainers, workers, t.task_id


class Timed(list):
    """net.events that also notes when each event came."""

    def __init__(self, net):
        super().__init__()
        self.net, self.times = net, []

    def append(self, item):
        super().append(item)
        self.times.append(self.net.now)


def published_at(net, peer):
    return [t for t, (p, e) in zip(net.events.times, net.events) if e.event == "version-published" and p == peer]


def published(net, peer=None):
    return [(p, f) for p, f in net.events_named("version-published") if peer is None or p == peer]


def work(core, role, task_id, now):
    return core.snapshot(now)["work"][role][task_id]


def test_standbys_follow_every_version_and_publish_nothing():
    net, trainers, workers, task_id = swarm()
    net.run_for(40)
    assert len(published(net, trainers[0].peer_id)) >= 4
    for standby in trainers[1:]:
        assert not published(net, standby.peer_id)
        state = work(standby, "trainer", task_id, net.now)
        assert not state["active"] and state["rank"] == trainers.index(standby)
        installed = [f["version"] for p, f in net.events_named("version-installed") if p == standby.peer_id]
        assert installed and max(installed) >= max(f["version"] for _, f in published(net)) - 1
    assert not net.events_named("trainer-takeover")


def test_the_next_rank_takes_over_after_silence_and_workers_follow():
    net, trainers, workers, task_id = swarm()
    net.run_for(30)
    before = max(f["version"] for _, f in published(net))
    crashed_at = net.now
    net.stop(trainers[0].peer_id)
    net.run_for(60)
    takeovers = net.events_named("trainer-takeover")
    assert [p for p, _ in takeovers] == [trainers[1].peer_id]  # rank 2 waits for the alive rank 1
    fields = takeovers[0][1]
    assert fields["term"] == 1 and fields["silent"] >= TAKEOVER and fields["version"] >= before
    counted = {c.peer_id: c.snapshot(net.now)["work"]["trainer"][fields["task_id"]]["takeovers"] for c in trainers[1:]}
    assert counted == {trainers[1].peer_id: 1, trainers[2].peer_id: 0}  # swarm_trainer_takeovers_total
    after = published(net, trainers[1].peer_id)
    assert len(after) >= 3 and after[0][1]["version"] == fields["version"] + 1
    assert min(f["version"] for _, f in after) > before  # numbered above every version heard
    gap = published_at(net, trainers[1].peer_id)[0] - published_at(net, trainers[0].peer_id)[-1]
    assert gap <= TAKEOVER + PARAMS["republish_interval"] + 10.0, gap  # + the first step's rollouts and job
    for w in workers:
        state = work(w, "worker", task_id, net.now)
        assert state["latest_version"] >= after[-1][1]["version"] - 1
    assert all(f["term"] == 1 for p, f in net.events_named("version-installed")
               if p == workers[0].peer_id and f["version"] > before)
    assert crashed_at < published_at(net, trainers[1].peer_id)[0]


def test_a_second_crash_hands_over_to_the_third_rank():
    net, trainers, workers, task_id = swarm()
    net.run_for(25)
    net.stop(trainers[0].peer_id)
    net.run_for(40)
    net.stop(trainers[1].peer_id)
    net.run_for(60)
    takeovers = [(p, f["term"]) for p, f in net.events_named("trainer-takeover")]
    assert takeovers == [(trainers[1].peer_id, 1), (trainers[2].peer_id, 2)]
    assert len(published(net, trainers[2].peer_id)) >= 2


def test_a_healed_partition_ends_on_one_chain_and_the_loser_steps_down():
    net, trainers, workers, task_id = swarm(others=("validator", "mirror"))
    validator, mirror = workers[-2:]
    net.run_for(25)
    links = net.partition({trainers[0].peer_id, workers[0].peer_id, validator.peer_id, mirror.peer_id})
    net.run_for(60)
    assert published(net, trainers[0].peer_id)[-1][1]["term"] == 0  # the cut-off side keeps going
    assert [p for p, _ in net.events_named("trainer-takeover")] == [trainers[1].peer_id]
    net.heal(links)
    net.run_for(30)
    assert [p for p, _ in net.events_named("trainer-stepped-down")] == [trainers[0].peer_id]
    assert not work(trainers[0], "trainer", task_id, net.now)["active"]
    for core in trainers + workers:
        assert core.chains.tasks[task_id].head == (1, 1), core.peer_id
    newest = max(f["version"] for p, f in published(net, trainers[1].peer_id))
    for w in workers[:-2]:
        assert work(w, "worker", task_id, net.now)["latest_version"] >= newest - 1
    assert work(validator, "validator", task_id, net.now)["latest_version"] >= newest - 1
    mirrored = work(mirror, "mirror", task_id, net.now)["held_versions"]
    assert mirrored and max(mirrored) >= newest - 1 and mirror.versions[task_id] == max(mirrored)
    assert mirror.roles[0].tasks[task_id].chain == (1, 1)
    assert published_at(net, trainers[0].peer_id)[-1] < net.now - 30 + 5.0  # no version after the heal's news


def test_a_returning_trainer_that_finds_a_higher_term_becomes_a_standby():
    net, trainers, workers, task_id = swarm()
    net.run_for(25)
    net.stop(trainers[0].peer_id)
    net.run_for(45)
    assert work(trainers[1], "trainer", task_id, net.now)["active"]
    back = PeerCore(trainers[0].identity, CoreConfig(roles=("trainer",)), seed=99)
    net.cores[back.peer_id] = back
    net.down.discard(back.peer_id)
    net.start(back.peer_id)
    for other in trainers[1:] + workers:
        net.connect(back.peer_id, other.peer_id)
    net.run_for(30)
    state = work(back, "trainer", task_id, net.now)
    assert not state["active"]
    assert back.chains.tasks[task_id].head == (1, 1)
    assert work(trainers[1], "trainer", task_id, net.now)["active"]


def test_a_trainer_back_from_a_short_crash_listens_before_it_publishes():
    """Back before anyone took over, with its last version resumed: it stands by (another trainer may
    have taken over meanwhile); the next rank takes over and it follows."""
    net, trainers, workers, task_id = swarm()
    net.run_for(25)
    net.stop(trainers[0].peer_id)
    crashed_at = net.now
    net.run_for(5)
    back = PeerCore(trainers[0].identity, CoreConfig(roles=("trainer",)), seed=98)

    def resuming(peer, job):
        if peer == back.peer_id and job.kind == jobs.INIT:
            return fake_packed_version(4, b"w4-resumed")
        return chain_jobs(peer, job)
    net.jobs = resuming
    net.cores[back.peer_id] = back
    net.start(back.peer_id)
    for other in trainers[1:] + workers:
        net.connect(back.peer_id, other.peer_id)
    net.run_for(60)
    assert [f.get("returning") for p, f in net.events_named("trainer-standby") if p == back.peer_id] == [True]
    assert [p for p, _ in net.events_named("trainer-takeover")] == [trainers[1].peer_id]
    assert published_at(net, back.peer_id)[-1] < crashed_at  # nothing since it came back
    assert back.chains.tasks[task_id].head == (1, 1) and not work(back, "trainer", task_id, net.now)["active"]
