"""The verify job on real batches of the tiny model: honest ones pass, each cheating job process
(`--malicious KIND`, trainer/cheats.py) is caught with its reason, a lying validator inverts."""

import dataclasses
import itertools

import pytest

from gossip.assignment import assign_prompts
from swarm.jobs import MALICIOUS, GenerateJob, VerifyJob, VerifyResult
from tests.trainer_jobs.conftest import TASK
from trainer.batch_codec import decode
from trainer.cheats import Cheater
from trainer.jobs import JobWorker

WORKER = b"v" * 32
FRESH = itertools.count()
ASSIGNED = tuple(assign_prompts(TASK.task_id, WORKER, 0, 8, 1 << 30))  # batches 0 and 1 (4 prompts each)


def generate(worker, v0, batch=0):
    return worker.run("generate", GenerateJob(TASK, 0, v0.weights, ASSIGNED[batch * 4:batch * 4 + 4], 4, WORKER))


def verify(worker, v0, res, **changes):
    job = VerifyJob(TASK, WORKER, 0, v0.weights, res.blob, res.prompt_indices or ASSIGNED[:4], 4, res.mean_reward,
                    res.num_tokens)
    return worker.run("verify", dataclasses.replace(job, **changes))


def fresh(initialised, malicious=""):
    """A new job process with its own state dir: it may generate a slice another one generated
    (one job process answers `repeated` for a slice it made before: trainer/generated.py)."""
    _, blobs, state, _ = initialised
    return JobWorker(blobs, state.parent / f"state-{next(FRESH)}", cheat=Cheater(malicious) if malicious else None)


def test_honest_batches_pass_and_a_resubmitted_one_is_a_duplicate(initialised):
    worker, _, _, v0 = initialised
    checker = fresh(initialised)
    for batch in (0, 1):
        res = generate(fresh(initialised), v0, batch)
        got = verify(checker, v0, res, prompt_indices=ASSIGNED[batch * 4:batch * 4 + 4])
        assert isinstance(got, VerifyResult) and (got.passed, got.reason) == (True, "ok"), got
        assert len(got.evidence_hash) == 32
    again = verify(checker, v0, generate(fresh(initialised), v0, 0))
    assert (again.passed, again.reason) == (False, "duplicate")


def test_a_blob_that_lies_about_its_commitment_fails(initialised):
    worker, _, _, v0 = initialised
    res = generate(fresh(initialised), v0)
    assert verify(fresh(initialised), v0, res, num_tokens=res.num_tokens + 1).reason == "claim"
    assert verify(fresh(initialised), v0, res, worker_key=b"z" * 32).reason == "claim"  # header names another worker
    assert verify(fresh(initialised), v0, res, mean_reward=res.mean_reward + 0.5).reason == "claim"


@pytest.mark.parametrize("kind, reason", [
    ("other-model", "toploc"), ("low-precision", "logprob"), ("int8-quant", "logprob"),
    ("fabricated-tokens", "sampling"), ("inflated-reward", "reward"), ("cherry-pick", "assignment")])
def test_each_cheating_job_process_is_caught(initialised, kind, reason):
    _, blobs, _, v0 = initialised
    res = generate(fresh(initialised, kind), v0)
    got = verify(fresh(initialised), v0, res)
    assert (got.passed, got.reason) == (False, reason), got
    if kind == "cherry-pick":  # it commits to the prompts it really used, which were not its own
        assert res.prompt_indices is not None and set(res.prompt_indices).isdisjoint(ASSIGNED[:4])
    if kind == "fabricated-tokens":  # the failed samples now hold the right answers
        batch = decode((blobs / res.blob.hex()).read_bytes())
        assert batch.mean_reward > decode((blobs / generate(fresh(initialised), v0).blob.hex()).read_bytes()).mean_reward


def test_laundered_batch_is_caught_unless_it_equals_the_honest_one(initialised):
    """bf16 sampling with fp32 logprobs and proofs: only tokens that bf16 drew differently betray
    it; where it drew exactly the honest tokens the batch holds the honest rollouts."""
    worker, blobs, _, v0 = initialised
    for batch in (0, 1):
        res = generate(fresh(initialised, "laundered"), v0, batch)
        got = verify(fresh(initialised), v0, res, prompt_indices=ASSIGNED[batch * 4:batch * 4 + 4])
        tokens = [s.token_ids for s in decode((blobs / res.blob.hex()).read_bytes()).samples]
        honest = [s.token_ids for s in decode((blobs / generate(fresh(initialised), v0, batch).blob.hex()).read_bytes()).samples]
        assert (got.passed, got.reason) == (False, "sampling") or tokens == honest, got


def test_replay_sends_its_first_batch_again(initialised):
    _, _, _, v0 = initialised
    cheat = fresh(initialised, "replay")
    first = generate(cheat, v0, 0)
    second = generate(cheat, v0, 1)
    assert second.blob == first.blob and second.prompt_indices == ASSIGNED[:4]


def test_lying_validator_inverts_every_verdict(initialised):
    worker, _, _, v0 = initialised
    liar = fresh(initialised, "lying-validator")
    good = verify(liar, v0, generate(fresh(initialised), v0))
    assert not good.passed and good.reason != "ok" and len(good.evidence_hash) == 32
    bad = verify(liar, v0, generate(fresh(initialised, "inflated-reward"), v0))
    assert (bad.passed, bad.reason) == (True, "ok")


def test_every_kind_is_known_and_unknown_kinds_are_refused(initialised):
    assert {"other-model", "low-precision", "fabricated-tokens", "inflated-reward", "cherry-pick", "replay",
            "lying-validator"} <= set(MALICIOUS)
    from proofs.adversaries import KINDS
    assert set(KINDS) <= set(MALICIOUS)
    with pytest.raises(ValueError, match="unknown malicious kind"):
        fresh(initialised, "polite")
