"""The rollout batch blob: exact round trips, and every kind of garbage refused with BatchError."""

import msgpack
import numpy as np
import pytest

from trainer.batch_codec import (MAX_BLOB_BYTES, BatchError, RolloutBatch, RolloutSample, decode,
                                 encode)


def make(prompts=(3, 9), spp=2, **over) -> RolloutBatch:
    samples = tuple(RolloutSample(
        prompt_index=p, sample_index=s, prompt_ids=(1, 4 + s, 5, 13), token_ids=(3, 4, 2)[: 1 + s + k % 2],
        logprobs=np.array([-0.5, -1.25, -0.0][: 1 + s + k % 2], dtype=np.float32), reward=float(s),
        finished=bool(s), seed=(1 << 62) + k, proof=b"\x01" * k)
        for k, (p, s) in enumerate((p, s) for p in prompts for s in range(spp)))
    fields = dict(task_id="task", version=5, worker_key=b"k" * 32, prompt_indices=tuple(prompts),
                  samples_per_prompt=spp, samples=samples)
    fields.update(over)
    return RolloutBatch(**fields)


def same(a: RolloutBatch, b: RolloutBatch) -> bool:
    head = lambda x: (x.task_id, x.version, x.worker_key, x.prompt_indices, x.samples_per_prompt)  # noqa: E731
    rows = lambda x: [(s.prompt_index, s.sample_index, s.prompt_ids, s.token_ids, s.logprobs.tobytes(),  # noqa: E731
                       s.reward, s.finished, s.seed, s.proof) for s in x.samples]
    return head(a) == head(b) and rows(a) == rows(b)


def test_round_trip_is_exact():
    b = make()
    data = encode(b)
    back = decode(data)
    assert same(b, back)
    assert back.samples[1].logprobs.dtype == np.float32
    assert encode(back) == data  # canonical: re-encoding gives the same bytes, so the same hash
    assert back.num_tokens == sum(len(s.token_ids) for s in b.samples)
    assert back.mean_reward == 0.5 and [len(g) for g in back.groups()] == [2, 2]


def test_empty_completion_and_zero_logprob_are_fine():
    b = make(prompts=(0,), spp=1)
    s = b.samples[0]
    b = make(prompts=(0,), spp=1, samples=(RolloutSample(0, 0, s.prompt_ids, (), np.zeros(0, np.float32),
                                                         0.0, False, 0),))
    assert same(decode(encode(b)), b)


def _raw(batch=None) -> dict:
    return msgpack.unpackb(encode(batch or make()), raw=False)


def _bad(obj) -> str:
    with pytest.raises(BatchError) as e:
        decode(msgpack.packb(obj, use_bin_type=True))
    return str(e.value)


@pytest.mark.parametrize("junk", [b"", b"\xc1", b"\x93\x01\x02", b"\xff" * 100, b"\xdb\xff\xff\xff\xff"])
def test_garbage_bytes(junk):
    with pytest.raises(BatchError):
        decode(junk)


def test_not_bytes_and_oversized():
    with pytest.raises(BatchError):
        decode("text")  # type: ignore[arg-type]
    with pytest.raises(BatchError, match="limit"):
        decode(b"\x00" * (MAX_BLOB_BYTES + 1))


def test_wrong_version_kind_and_keys():
    raw = _raw()
    assert "version" in _bad({**raw, "v": 2})
    assert "kind" in _bad({**raw, "kind": "weights"})
    assert "unknown keys ['extra']" in _bad({**raw, "extra": 1})
    del raw["worker_key"]
    assert "missing keys ['worker_key']" in _bad(raw)


def test_field_types_refused():
    raw = _raw()
    assert "version" in _bad({**raw, "version": True})
    assert "version" in _bad({**raw, "version": -1})
    assert "task_id" in _bad({**raw, "task_id": b"task"})
    s0 = raw["samples"][0]
    for key, value in [("reward", "1"), ("reward", True), ("finished", 1), ("seed", -5), ("seed", 1 << 63),
                       ("prompt", b"\x01\x00\x00"), ("logprobs", b"\x00" * 5), ("proof", "x")]:
        bad = dict(raw, samples=[{**s0, key: value}] + raw["samples"][1:])
        assert key in _bad(bad), key


def test_shape_rules():
    raw = _raw()
    assert "samples" in _bad({**raw, "samples": raw["samples"][:-1]})  # a group short
    swapped = [raw["samples"][1], raw["samples"][0]] + raw["samples"][2:]
    assert "prompt-major" in _bad({**raw, "samples": swapped})  # reordered
    assert "duplicates" in _bad({**raw, "prompt_indices": [3, 3]})
    s0 = raw["samples"][0]
    mismatched = {**s0, "logprobs": np.zeros(5, "<f4").tobytes()}
    assert "logprobs for" in _bad({**raw, "samples": [mismatched] + raw["samples"][1:]})
    for v in (np.nan, 0.5, np.inf):
        lp = np.full(len(s0["tokens"]) // 4, v, "<f4").tobytes()
        assert "finite and <= 0" in _bad({**raw, "samples": [{**s0, "logprobs": lp}] + raw["samples"][1:]})
    assert "empty prompt" in _bad({**raw, "samples": [{**s0, "prompt": b""}] + raw["samples"][1:]})
    assert "no prompts" in _bad({**raw, "prompt_indices": [], "samples": []})


def test_encode_refuses_what_decode_would():
    with pytest.raises(BatchError):
        encode(make(samples=make().samples[:3]))
