"""The check quorum's sans-IO parts: who may ask a peer to check (the core), and which verdicts a
trainer's own check contradicts (swarm/roles/quorum.py Opinions)."""

import pytest

from gossip import errors, topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import RolloutCommitment
from swarm import protocols
from swarm.core import CoreConfig, PeerCore
from swarm.io import Emit, MessageReceived, PeerConnected, PeerDisconnected, RequestReceived, Respond, SendRequest
from swarm.roles.quorum import Opinions
from tests.samples import ALICE, BOB, T0, task

CAROL = Identity(b"\x07" * 32)


def checker(roles=("validator",), **params):
    core = PeerCore(BOB, CoreConfig(roles=roles), seed=3)
    t = task(params={"group_size": 16, "check_quorum": 1, **params})
    signed = seal(ALICE, t)
    core.handle(T0, MessageReceived(topics.TASKS, signed.wire, ALICE.peer_id))
    commitment = seal(CAROL, RolloutCommitment(task_id=t.task_id, policy_version=0, created_at=T0, blob_hash=bytes(32),
                                               blob_size=100, prompt_indices=(1, 2), samples_per_prompt=16,
                                               num_tokens=40, mean_reward=0.5))
    return core, commitment


def ask(core, peer, data):
    return core.handle(T0 + 1, RequestReceived(peer, protocols.CHECK, 7, data))


def test_only_a_trainer_of_the_task_may_ask_for_a_check():
    core, commitment = checker()
    out = ask(core, CAROL.peer_id, commitment.wire)
    assert Respond(7, error=errors.UNAUTHORIZED) in out
    assert any(isinstance(e, Emit) and e.event == "message-rejected" for e in out)  # it costs the asker
    out = ask(core, ALICE.peer_id, commitment.wire)
    assert Respond(7, b"") in out
    assert any(isinstance(e, SendRequest) and e.protocol == protocols.BLOB and e.peer == CAROL.peer_id for e in out)
    assert ask(core, ALICE.peer_id, commitment.wire) == [Respond(7, b"")]  # asked twice: one check


def test_garbage_and_other_kinds_are_refused_with_a_reason():
    core, _ = checker()
    assert Respond(7, error=errors.MALFORMED) in ask(core, ALICE.peer_id, b"\x00junk")
    assert Respond(7, error=errors.SCHEMA) in ask(core, ALICE.peer_id, seal(ALICE, task()).wire)


def test_a_worker_checks_only_when_the_task_says_peer_checks():
    core, commitment = checker(roles=("worker",))
    assert ask(core, ALICE.peer_id, commitment.wire) == [Respond(7, error="not-a-checker")]
    core, commitment = checker(roles=("worker",), peer_checks=True)
    assert Respond(7, b"") in ask(core, ALICE.peer_id, commitment.wire)


def test_a_verdict_contradicting_the_trainers_check_is_found_in_either_order():
    o = Opinions()
    assert o.heard(b"a", "liar", True, "ok") == []  # nothing to compare with yet
    assert [who for who, _ in o.checked(b"a", False, "toploc")] == ["liar"]
    assert [who for who, _ in o.heard(b"a", "late-liar", True, "ok")] == ["late-liar"]
    assert o.heard(b"a", "honest", False, "toploc") == []
    o.checked(b"b", True, "ok")
    assert [who for who, _ in o.heard(b"b", "failer", False, "reward")] == ["failer"]
    assert o.heard(b"b", "saw-it-first", False, errors.DUPLICATE) == []  # not a contradiction



def test_a_checker_that_refused_the_task_answers_refused():
    """A checker whose job process refused the task (trainer/pins.py) judges none of its batches: the
    checks it holds are dropped and new check requests are answered 'refused' (the trainer then asks
    another checker: quorum.refused), for a validator and for a worker asked under peer_checks alike."""
    from swarm.io import JobFinished

    for roles, params in ((("validator",), {}), (("worker",), {"peer_checks": True})):
        core, commitment = checker(roles=roles, **params)
        assert Respond(7, b"") in ask(core, ALICE.peer_id, commitment.wire)
        state = next(iter(core.roles[0].tasks.values()))
        queue = getattr(state, "queue", None) or state.checks
        assert list(queue.checks) == [commitment.msg_id]
        reason = "refused: the task's environment needs reasoning-gym==0.1.25, this peer has reasoning-gym==0.1.24"
        out = core.roles[0].on_job_finished(T0 + 2, (state_id(core), "verify", commitment.msg_id),
                                            JobFinished(1, False, None, reason))
        assert [e.fields for e in out if isinstance(e, Emit)] == [
            {"task_id": state_id(core), "role": roles[0], "reason": reason}]
        assert not queue.checks and queue.snapshot()["refused"] == reason
        other = seal(CAROL, RolloutCommitment(task_id=state_id(core), policy_version=0, created_at=T0,
                                              blob_hash=bytes(32), blob_size=100, prompt_indices=(3, 4),
                                              samples_per_prompt=16, num_tokens=40, mean_reward=0.5))
        assert ask(core, ALICE.peer_id, other.wire) == [Respond(7, error="refused")]


def state_id(core) -> str:
    return next(iter(core.roles[0].tasks))


def test_a_worker_flooding_past_its_share_is_refused_without_penalty():
    from types import SimpleNamespace

    import pytest

    from gossip.errors import Rejected
    from swarm.roles.quorum import within_share
    from swarm.taskparams import TaskParams

    params = TaskParams.from_params({"check_quorum": 1, "prompts_per_step": 16, "prompts_per_commit": 8,
                                     "max_prompts_per_step": 64})
    ctx = SimpleNamespace(workers_of=lambda task_id, version: ["w1", "w2", "w3", "w4"])
    state = SimpleNamespace(params=params, async_level=2, pending={}, spec=SimpleNamespace(task_id="t"), version=0)
    cap = 3 * (2 + 1)  # 64 prompts in 8-prompt batches over 4 workers: 2 a step, one to spare, 3 steps
    for i in range(cap):
        within_share(ctx, state, "w1")
        state.pending[i] = SimpleNamespace(worker="w1")
    with pytest.raises(Rejected) as refused:
        within_share(ctx, state, "w1")
    assert refused.value.reason == errors.CAPACITY  # costs nothing (gossip/reputation.py)
    within_share(ctx, state, "w2")  # the others are not crowded out
    state.params = TaskParams.from_params({"prompts_per_step": 16})
    within_share(ctx, state, "w1")  # without a quorum the trainer's total bound alone applies


@pytest.mark.parametrize("roles,params", [(("validator",), {}), (("worker",), {"peer_checks": True})])
def test_a_checker_with_no_link_to_the_worker_fetches_the_blob_once_a_link_to_it_opens(roles, params):
    """The batch's worker is known but not linked: the checker waits for a link (dialling it when it may)
    and asks for the blob when the link opens, not at its retry BLOB_RETRY later (swarm/roles/checking.py
    `connected`); another peer's link opening fetches nothing."""
    core, commitment = checker(roles=roles, **params)
    core.handle(T0, PeerConnected(CAROL.peer_id, ("/ip4/10.0.0.7/tcp/4001",)))
    core.handle(T0, PeerDisconnected(CAROL.peer_id))
    out = ask(core, ALICE.peer_id, commitment.wire)
    fetches = lambda effects: [e for e in effects if isinstance(e, SendRequest) and e.protocol == protocols.BLOB]
    assert Respond(7, b"") in out and not fetches(out)
    assert not fetches(core.handle(T0 + 1.1, PeerConnected(ALICE.peer_id, ("/ip4/10.0.0.1/tcp/4001",))))
    out = core.handle(T0 + 1.2, PeerConnected(CAROL.peer_id, ("/ip4/10.0.0.7/tcp/4001",)))
    assert [e.peer for e in fetches(out)] == [CAROL.peer_id]
