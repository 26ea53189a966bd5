"""Honest TOPLOC chunks against cheating ones, for the GPU tests (vLLM and torch in bf16): the
CPU fp32 calibration in proofs/calibration/ does not apply there, so they check separation instead."""

from __future__ import annotations


def chunk_results(worker_hidden, validator_hidden):
    """The worker's TOPLOC proof built from its activations, checked against the validator's
    (proofs/toploc.py): toploc's per-chunk statistics."""
    from proofs import toploc

    return toploc.verify_chunks(toploc.build_proof(worker_hidden), validator_hidden)


def assert_separated(honest, cheating) -> None:
    """Every honest chunk is closer than every chunk checked against the wrong model, in exponent
    mismatches and in mean mantissa error."""
    honest = [r for rs in honest for r in rs]
    cheating = [r for rs in cheating for r in rs]
    assert honest and cheating
    assert max(r.exp_mismatches for r in honest) < min(r.exp_mismatches for r in cheating)
    assert max(r.mant_err_mean for r in honest) < min(r.mant_err_mean for r in cheating)
