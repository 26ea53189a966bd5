"""Bad trainer-chain input, each refused with its own reason, counted against the sender, never a crash,
never a version installed backwards (swarm/forkchoice.py)."""

import hashlib

import pytest

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import RolloutCommitment, TensorEntry, WeightManifest
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand, MessageVerdict
from swarm.forkchoice import ForkChoice
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_takeover import PARAMS, swarm

KEYS = [Identity(bytes([0x40 + i]) * 32) for i in range(3)]
OUTSIDER = Identity(b"\x66" * 32)


def h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def manifest(task_id, version, term, rank, weights=b"", parent_root=b"", now=T0 + 10):
    weights = weights or f"w{version}-{term}-{rank}".encode()
    delta = bool(parent_root)
    return WeightManifest(task_id=task_id, version=version, parent_version=version - 1 if delta else -1,
                          parent_root=parent_root, encoding="delta" if delta else "full", dtype="bf16",
                          root=h(b"root" + weights), shard_size=256, raw_size=4, compressed_size=4,
                          shard_hashes=(h(weights),), tensors=(TensorEntry("w", "bf16", (2,), h(weights)),),
                          created_at=now, delta_op="sub" if delta else "", depth=1 if delta else 0,
                          term=term, rank=rank)


@pytest.fixture
def peer():
    """One worker that follows a task naming three trainer keys (they never run: we sign for them)."""
    worker = PeerCore(Identity(b"\x30" * 32), CoreConfig(roles=("worker",)), seed=3)
    net = MemoryNet([worker], T0)
    net.start()
    t = task(trainer_keys=tuple(k.public_key for k in KEYS), params=PARAMS)
    out = net.deliver(worker.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    return net, worker, t.task_id


def send(net, worker, task_id, identity, m):
    wire = seal(identity, m).wire
    out = net.inject(worker.peer_id, topics.task_topic(task_id, "weights"), wire, "12D3KooWforwarder")
    return out[0]


def score(worker, identity):
    return worker.ledger.score(identity.peer_id)


def test_the_head_is_the_best_term_then_rank_then_version(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, KEYS[0], manifest(task_id, 3, 0, 0)).accepted
    assert send(net, worker, task_id, KEYS[2], manifest(task_id, 5, 1, 2)).accepted  # a takeover: switch
    assert send(net, worker, task_id, KEYS[1], manifest(task_id, 4, 1, 1)).accepted  # same term, better rank
    assert worker.chains.tasks[task_id].head == (1, 1)
    assert [f["term"] for _, f in net.events_named("chain-switched")] == [0, 1, 1]


def test_a_manifest_signed_by_an_unlisted_key_or_for_another_rank_is_unauthorized(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, OUTSIDER, manifest(task_id, 1, 0, 0)) == MessageVerdict(False, "unauthorized")
    assert send(net, worker, task_id, KEYS[1], manifest(task_id, 1, 0, 0)) == MessageVerdict(False, "unauthorized")
    assert score(worker, KEYS[1]) < 0


def test_a_term_going_backwards_is_refused(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, KEYS[1], manifest(task_id, 7, 2, 1)).accepted
    verdict = send(net, worker, task_id, KEYS[1], manifest(task_id, 8, 1, 1))
    assert verdict == MessageVerdict(False, "term-backwards") and score(worker, KEYS[1]) < 0


def test_a_delta_whose_parent_is_not_on_its_chain_is_refused(peer):
    net, worker, task_id = peer
    first = manifest(task_id, 4, 0, 0)
    assert send(net, worker, task_id, KEYS[0], first).accepted
    assert send(net, worker, task_id, KEYS[0], manifest(task_id, 5, 0, 0, parent_root=first.root)).accepted
    stray = manifest(task_id, 6, 0, 0, parent_root=h(b"elsewhere"))
    assert send(net, worker, task_id, KEYS[0], stray) == MessageVerdict(False, "not-on-chain")


def test_a_standby_publishing_while_the_better_rank_is_alive_is_refused(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, KEYS[0], manifest(task_id, 3, 0, 0)).accepted
    net.run_for(5)
    verdict = send(net, worker, task_id, KEYS[1], manifest(task_id, 4, 0, 1, now=net.now))
    assert verdict == MessageVerdict(False, "standby-published") and score(worker, KEYS[1]) < 0


def test_an_old_chain_is_superseded_at_no_cost_and_never_installed(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, KEYS[1], manifest(task_id, 6, 1, 1)).accepted
    before = score(worker, KEYS[0])
    assert send(net, worker, task_id, KEYS[0], manifest(task_id, 9, 0, 0)) == MessageVerdict(False, "superseded")
    assert score(worker, KEYS[0]) == before
    assert worker.snapshot(net.now)["work"]["worker"][task_id]["latest_version"] == 6


def test_two_manifests_for_one_term_and_version_are_equivocation_and_a_ban(peer):
    net, worker, task_id = peer
    assert send(net, worker, task_id, KEYS[0], manifest(task_id, 2, 0, 0, weights=b"honest")).accepted
    again = manifest(task_id, 2, 0, 0, weights=b"honest", now=T0 + 20)  # a re-announcement is not one
    assert send(net, worker, task_id, KEYS[0], again).accepted
    verdict = send(net, worker, task_id, KEYS[0], manifest(task_id, 2, 0, 0, weights=b"forked"))
    assert verdict == MessageVerdict(False, "equivocated")
    assert worker.is_banned(KEYS[0].peer_id)


def test_the_trainer_refuses_rollouts_from_another_chain():
    net, trainers, workers, task_id = swarm(n_workers=1)
    net.run_for(20)
    version = trainers[0].snapshot(net.now)["work"]["trainer"][task_id]["version"]
    c = RolloutCommitment(task_id=task_id, policy_version=version, created_at=net.now, blob_hash=h(b"x"),
                          blob_size=1, prompt_indices=(1, 2, 3, 4), samples_per_prompt=4, num_tokens=1,
                          mean_reward=0.0, policy_term=3)
    wire = seal(workers[0].identity, c).wire
    out = net.inject(trainers[0].peer_id, topics.task_topic(task_id, "rollouts"), wire, workers[0].peer_id)
    assert out[0] == MessageVerdict(False, "other-chain")
    assert not trainers[0].is_banned(workers[0].peer_id)


def test_fork_choice_before_any_manifest_has_no_head():
    fc = ForkChoice(takeover_after=30.0)
    assert fc.head is None and fc.silent_for(T0) == float("inf")
