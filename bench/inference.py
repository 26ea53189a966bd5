"""Benchmark: SmolLM2-135M generation, torch against vLLM, same prompts, same machine. Prints JSON.

Both backends sample the same completions (the swarm's seeded Gumbel sampler, temperature 1: the
vLLM backend draws the same noise, trainer/inference_vllm.py) of `--prompts` chat-add prompts x
`--samples` x up to `--tokens` new tokens, in fp32 with `--threads` threads (OMP_NUM_THREADS, which
vLLM's CPU worker respects). Rounds alternate torch and vLLM after one untimed warm-up round each,
so load drift hits both; reported per backend: median tokens/s over the rounds, and the ratio
vLLM / torch. Generation only (tokens and logprobs); `proof_s` is, apart, the torch prefill a vLLM
worker adds to prove a batch (TOPLOC's activations), against torch's own generation with the
activations captured.

Then the per-version weight reload: `--versions` times, new weights (the policy with seeded 1%
noise, standing in for a GRPO step) loaded into the running engine in place; median seconds,
against the engine's start time (what restarting it per version would cost).

Run: `.venv-vllm/bin/python bench/inference.py [--prompts 64] [--samples 1] [--tokens 32]
[--rounds 3] [--threads 2] [--versions 5] [--out FILE]` (a few minutes; needs the vLLM venv:
`bash scripts/test_vllm.sh` makes it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def calibration_s() -> float:
    """A 20M-iteration Python loop's time: the machine's speed at the moment (docs/benchmarks.md)."""
    t = time.perf_counter()
    x = 0
    for i in range(20_000_000):
        x += i
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--versions", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    for key, value in {"OMP_NUM_THREADS": str(args.threads), "OMP_WAIT_POLICY": "PASSIVE",
                       "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
        os.environ[key] = value

    import torch

    torch.set_num_threads(args.threads)  # before vLLM starts: its CPU worker makes later calls no-ops
    from gossip.assignment import sample_seed
    from proofs.checks import forward_many
    from trainer.envs import ChatArithmetic
    from trainer.inference import TorchBackend
    from trainer.inference_vllm import VllmBackend, engine_for, require_vllm
    from trainer.model import load_smollm2

    say = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    model, tok = load_smollm2()
    env = ChatArithmetic()
    prompts = [env.prompt_ids(tok, env.prompt(i)) for i in range(args.prompts)]
    seeds = [sample_seed("bench", b"w" * 32, 0, p, s) for p in range(args.prompts) for s in range(args.samples)]
    rows = len(seeds)
    say(f"vllm {require_vllm()}: starting the engine ...")
    engine = engine_for("smollm2-135m", model, tok, Path(tempfile.mkdtemp(prefix="bench-inference-")) / "m",
                        max_num_seqs=max(rows, 1),
                        max_model_len=max(len(p) for p in prompts) + args.tokens + 16)
    engine.load_weights(model.state_dict(), key="base")
    torch_backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False, max_batch=rows)
    vllm_backend = VllmBackend(engine, model, capture_hidden=False)

    def timed(backend):
        t = time.perf_counter()
        out = backend.generate(prompts, args.samples, args.tokens, 1.0, seeds)
        return time.perf_counter() - t, out

    runs: dict[str, list[dict]] = {"torch": [], "vllm": []}
    outputs = {}
    for r in range(args.rounds + 1):
        for name, backend in (("torch", torch_backend), ("vllm", vllm_backend)):
            seconds, out = timed(backend)
            outputs[name] = out
            tokens = sum(len(c.token_ids) for c in out)
            say(f"round {r} {name}: {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.1f} tokens/s)"
                + (" (warm-up, not counted)" if r == 0 else ""))
            if r:
                runs[name].append({"seconds": round(seconds, 3), "tokens": tokens,
                                   "tokens_per_s": round(tokens / seconds, 2)})
    same = sum(a.token_ids == b.token_ids for a, b in zip(outputs["torch"], outputs["vllm"]))

    # what proving costs: torch generation capturing activations vs vLLM's + one torch prefill
    t = time.perf_counter()
    TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=True, max_batch=rows).generate(
        prompts, args.samples, args.tokens, 1.0, seeds)
    torch_with_hidden = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        forward_many(model, [(c.prompt_ids, c.token_ids) for c in outputs["vllm"]])
    prefill_s = time.perf_counter() - t

    reloads = []
    for v in range(args.versions):
        g = torch.Generator().manual_seed(v)
        with torch.no_grad():
            state = {k: w * (1 + 0.01 * torch.randn(w.shape, generator=g)) for k, w in model.state_dict().items()}
        reloads.append(engine.load_weights(state, key=("v", v)))
        say(f"version {v + 1}: weights reloaded in place in {reloads[-1]:.3f} s")
    engine.load_weights(model.state_dict(), key="base")

    med = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in runs.items()}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    report = {
        "date": time.strftime("%Y-%m-%d"), "commit": commit,
        "command": "bench/inference.py " + " ".join(sys.argv[1:]),
        "setup": {"model": "SmolLM2-135M-Instruct", "dtype": "float32", "threads": args.threads,
                  "prompts": args.prompts, "samples_per_prompt": args.samples, "max_new_tokens": args.tokens,
                  "rounds": args.rounds, "temperature": 1.0, "vllm": require_vllm(), "torch": torch.__version__},
        "figures": {
            "torch_tokens_per_s": med["torch"], "vllm_tokens_per_s": med["vllm"],
            "vllm_over_torch": round(med["vllm"] / med["torch"], 3),
            "completions_identical": f"{same}/{rows}",
            "vllm_engine_start_s": round(engine.start_seconds, 2),
            "reload_in_place_s_median": round(statistics.median(reloads), 3),
            "reload_in_place_s": [round(x, 3) for x in reloads],
            "reload_over_engine_start": round(statistics.median(reloads) / engine.start_seconds, 3),
            "torch_generate_with_activations_s": round(torch_with_hidden, 2),
            "vllm_proof_prefill_s": round(prefill_s, 2),
        },
        "runs": runs,
        "load_average": list(os.getloadavg()),
        "calibration_loop_20M_s": round(calibration_s(), 2),
        "machine": f"{os.cpu_count()} CPUs",
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":  # vLLM may spawn helpers that re-import this module
    main()
