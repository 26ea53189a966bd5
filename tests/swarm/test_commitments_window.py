"""Memory a task's bookkeeping holds stays flat however many versions it trains: commitments and
fork-choice records far behind the newest version are forgotten (bench/soak.py saw a node grow for
hours while the count caps filled)."""

import pytest

from gossip.messages import RolloutCommitment
from swarm.commitments import KEPT_VERSIONS as COMMITTED_VERSIONS, CommitmentBook
from swarm.forkchoice import KEPT_VERSIONS, ForkChoice

from .test_forkchoice import manifest


def _commitment(version: int, n: int) -> RolloutCommitment:
    return RolloutCommitment(task_id="0123456789abcdef", policy_version=version, created_at=1.0e9,
                             blob_hash=bytes([n % 256, n // 256]) * 16, blob_size=1, prompt_indices=(n,),
                             samples_per_prompt=4, num_tokens=1, mean_reward=0.0)


def test_commitments_behind_the_window_are_forgotten_and_replays_within_it_still_found():
    book = CommitmentBook()
    for n in range(400):
        book.add(n.to_bytes(4, "big"), _commitment(n // 2, n), "w", b"k" * 32)
    book.forget_below(200 - 64)
    assert len(book) == 2 * 64 and book.get((0).to_bytes(4, "big")) is None
    recent = _commitment(199, 399)
    assert book.replay_of(b"new", recent, b"k" * 32) == (399).to_bytes(4, "big")  # within the window: a replay
    old = _commitment(10, 20)
    assert book.replay_of(b"new", old, b"k" * 32) is None  # forgotten: refused as too old elsewhere


def test_fork_choice_keeps_records_of_recent_versions_only():
    fc = ForkChoice(takeover_after=30.0)
    for v in range(3 * KEPT_VERSIONS):
        fc._record(b"k" * 32, 0, manifest("0123456789abcdef", v, 0, 0), (bytes([v % 256]) * 32,))
    newest = 3 * KEPT_VERSIONS - 1
    assert min(k[2] for k in fc.roots) >= newest - KEPT_VERSIONS and len(fc.roots) <= KEPT_VERSIONS + 1
    assert min(k[2] for k in fc.weights) >= newest - KEPT_VERSIONS


def test_verdict_opinions_are_kept_only_for_commitments_the_book_still_knows():
    """Trusted verdicts per commitment follow the commitment book's window: a long-running validator's
    opinions stay at a window's worth instead of filling to OPINIONS_KEPT over hours."""
    from gossip.envelope import seal
    from gossip.messages import Verdict
    from gossip.reputation import ReputationLedger
    from swarm.trust import Trust
    from tests.samples import BOB, task

    trust = Trust("me", b"m" * 32, trains=False, ledger=ReputationLedger())
    t = task()  # BOB is its trusted validator
    book = trust.book(t.task_id)
    for n in range(400):
        cid = n.to_bytes(32, "big")
        book.add(cid, _commitment(n // 2, n), "w", b"k" * 32)
        book.forget_below(n // 2 - 64)
        verdict = Verdict(task_id=t.task_id, commitment_id=cid, subject=b"k" * 32, passed=True, reason="ok",
                          evidence_hash=b"", created_at=1.0e9, detail="")
        assert trust.on_verdict(1.0e9, t, seal(BOB, verdict)) == []
    opinions = trust._opinions[t.task_id]
    assert len(opinions) <= len(book) <= 2 * 65
    assert all(book.get(cid) is not None for cid in opinions)


def test_forgetting_commitments_names_their_batch_blobs():
    book = CommitmentBook()
    for n in range(10):
        book.add(n.to_bytes(4, "big"), _commitment(n, n), "w", b"k" * 32)
    assert book.forget_below(4) == [_commitment(n, n).blob_hash for n in range(4)]
    assert book.forget_below(4) == [] and len(book) == 6


@pytest.mark.slow  # 600 simulated seconds of a small swarm: about 30 s
def test_a_peer_keeps_the_batch_blobs_of_recent_versions_only():
    """Every rollout batch a worker generates, or a trainer fetches, is a blob in its data dir. They
    went only when the blob store's byte cap (4 GB) was full, about 100 MB an hour on a soak's trainer:
    now a batch's blob goes with its commitment, 64 versions behind the task's newest."""
    from simulator import compose
    from simulator.run import prepare
    from simulator.trace import Trace

    s = compose.scenario("blobs", duration=600, seed=1, settle=40, checks=[],
                         peers=[compose.trainer(), compose.workers(3)], tasks=[compose.task(at=10)],
                         jobs={"generate": {"seconds": 1}, "train": {"seconds": 1}, "verify": {"seconds": 0.2}})
    sim, _ = prepare(s, Trace(None))
    sim.loop.run(s.duration, None)
    for node in sim.nodes:
        core = node.core
        (task_id, chain), = core.chains.tasks.items()
        assert chain.max_version > 3 * COMMITTED_VERSIONS  # long enough for the window to matter
        book = core.book(task_id)
        batches = {bytes(seen.commitment.blob_hash) for seen in book._by_id.values()}
        stale = set(node.store.blobs) - batches - core.blobs.held()
        assert len(stale) <= 4, f"{len(stale)} blobs neither recent batches nor weights in use"


def test_a_trainers_opinions_follow_the_commitment_window():
    """A trainer's record of checkers' verdicts and its own checks (swarm/roles/quorum.py) is kept only
    for commitments the book still knows, not up to OPINIONS_KEPT over a soak's first hour."""
    from swarm.roles.quorum import Opinions

    book = CommitmentBook()
    opinions = Opinions(known=lambda cid: book.get(cid) is not None)
    for n in range(400):
        cid = n.to_bytes(32, "big")
        book.add(cid, _commitment(n // 2, n), "w", b"k" * 32)
        book.forget_below(n // 2 - 64)
        opinions.checked(cid, True, "")
        assert opinions.heard(cid, "checker", False, "wrong") == [("checker", f"wrong verdict on {cid.hex()[:16]}: "
                                                                              "wrong, the trainer's check says ok")]
    assert len(opinions.own) <= len(book) <= 2 * 65 and len(opinions.said) <= len(book)
    assert all(book.get(cid) is not None for cid in [*opinions.own, *opinions.said])


def test_the_book_says_who_works_on_the_task_and_forgets_them_with_their_commitments():
    """What a task's split of the work counts as evidence (swarm/context.py workers_of)."""
    book = CommitmentBook()
    assert not book.worked_before(5, besides="me")
    book.add(b"own", _commitment(4, 1), "me", b"m" * 32)
    assert not book.worked_before(5, besides="me")  # our own commitments are no evidence of others
    book.add(b"a", _commitment(4, 2), "a", b"a" * 32)
    book.add(b"b", _commitment(9, 3), "b", b"b" * 32)
    assert set(book.workers()) == {"me", "a", "b"}
    assert book.worked_before(5, besides="me") and not book.worked_before(4, besides="me")
    book.forget_below(5)
    assert set(book.workers()) == {"b"} and not book.worked_before(9, besides="me")
