"""Benchmark (and calibration) of cheat detection: proofs/checks.py against proofs/adversaries.py.

    python bench/detection.py --model builtin              # detection JSON on stdout
    python bench/detection.py --model smollm2 --calibrate  # re-measure, rewrite proofs/calibration/
    python bench/detection.py --model builtin --rederive   # new threshold rule, stored measurements
    python bench/detection.py --model smollm2 --env reasoning-gym:chain_sum --param env.chain_sum.max_terms=2

Models: "builtin" is the built-in tiny Llama warmed up on digit sorting (seed 0; the other-model
cheat is the same recipe from seed 1); "smollm2" is SmolLM2-135M-Instruct on chat arithmetic
(the other-model cheat is SmolLM2 with its upper half of layers dropped: a cheaper model with
the same tokenizer). `--env` (with `--param env.<task>.<option>=VALUE`, as tasks announce them) puts
SmolLM2 on another environment, e.g. a reasoning-gym task: the validator then rebuilds its prompts and
recomputes its rewards with that generator; the calibration stays the model's own.

Calibration (--calibrate) runs honest workers in three settings and the low-precision cheats:
  honest-exact  the validator's own weights and numerics (what this CPU gives: errors are 0)
  honest-noise  weights times (1 + 2**-20 N(0,1)): about 8 fp32 ulps of relative error, standing
                in for an honest worker on other hardware (other BLAS, batch shapes, fp32 GPU
                kernels without TF32), which changes results by float noise only
  honest-sharp  honest-noise on a sharper policy (final norm times SHARPEN, so logits 4x, as
                training makes them), checked by a validator holding that policy: logprob bounds
                are relative to the logit scale, and this shows they hold as the policy sharpens
  honest-trained  (built-in model only) honest-noise on the policy after TRAINED_STEPS steps of
                GRPO (trainer/single.py): training grows the activations inside the model too, and
                its honest noise over the logit scale was twice the sharpened model's
  bf16, int8    the low-precision cheats, the closest dishonest distributions
and derives each threshold from the largest honest value H and the smallest low-precision value D
(see `derive`). Detection then uses the thresholds stored in proofs/calibration/<model>.json on
fresh batches (other versions and batch numbers than calibration used), so the honest
false-rejection rate is measured out of sample.

Times are wall seconds on one thread: generation is the batched sampling call; proof build is
TOPLOC over every completion's hidden states; verify is all of `check_batch` (the validator's
batched prefill, TOPLOC, sampling replay, rewards) and toploc_verify is TOPLOC's comparison alone.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from gossip.assignment import sample_seed  # noqa: E402
from proofs import adversaries as adv  # noqa: E402
from proofs import sampling, toploc  # noqa: E402
from proofs.checks import Rules, Validator, check_batch, content_digest, forward_many  # noqa: E402

NOISE = 2.0 ** -20
SHARPEN = 4.0
TRAINED_STEPS = 300
WORKER = bytes(range(32))


class Timed:
    """A backend proxy that adds up the seconds spent in generate()."""

    def __init__(self, backend):
        self.backend, self.seconds = backend, 0.0

    def generate(self, *args):
        t = time.perf_counter()
        try:
            return self.backend.generate(*args)
        finally:
            self.seconds += time.perf_counter() - t


class Setup:
    def __init__(self, name: str, env: str | None = None, params: dict | None = None, max_new_tokens: int = 16):
        from swarm.taskparams import env_options
        from trainer.envs import ChatArithmetic, DigitSort, get_env
        from trainer.inference import TorchBackend
        from trainer.rollout import completion_text, score

        self.name = name
        if name == "builtin":
            self.model_name, self.env = "builtin:digit-sort-tiny", DigitSort()
            self.model, self.tok = _warm_builtin(0)
            self.other = _warm_builtin(1)[0]
            self.k, self.spp, max_new = 4, 16, 10
        else:
            from trainer.model import load_smollm2

            self.model_name = "SmolLM2-135M-Instruct"
            self.env = get_env(env, env_options(params or {})) if env else ChatArithmetic()
            self.model, self.tok = load_smollm2()
            self.other = copy.deepcopy(self.model)
            n = self.other.config.num_hidden_layers
            self.other.model.layers = self.other.model.layers[: n // 2]
            self.other.config.num_hidden_layers = n // 2
            self.k, self.spp, max_new = 2, 4, max_new_tokens
        eos = self.tok.eos_token_id
        self.rules = Rules(f"bench-{name}", 1 << 30, self.k, 64, max_new, 1.0, eos,
                           self.model.config.vocab_size)
        self.backend = lambda m: Timed(TorchBackend(m, eos, self.tok.pad_token_id))
        self.prompt_ids = lambda i: self.env.prompt_ids(self.tok, self.env.prompt(i))

        class _C:  # completion_text reads only these two fields
            def __init__(self, ids, finished):
                self.token_ids, self.finished = list(ids), finished

        self.reward = lambda i, ids, fin: score(self.env, self.env.prompt(i), completion_text(self.tok, _C(ids, fin)), fin)
        self.answer = lambda i: self.tok(self.env.prompt(i).answer, add_special_tokens=False)["input_ids"] + [eos]

    def validator(self, thresholds: dict | None = None) -> Validator:
        if thresholds is None:
            return Validator.calibrated(self.model, self.model_name, self.prompt_ids, self.reward)
        return Validator(self.model, self.prompt_ids, self.reward, toploc.ToplocThresholds(**thresholds["toploc"]),
                         sampling.SamplingThresholds(**thresholds["sampling"]))

    def honest(self, model, version: int, batch: int, timer: dict | None = None):
        backend = self.backend(model)
        t = time.perf_counter()
        samples, claim = adv.honest(backend, self.rules, self.prompt_ids, self.reward, WORKER, version, batch, self.spp)
        if timer is not None:
            timer["generate"] += backend.seconds
            timer["proof_build"] += time.perf_counter() - t - backend.seconds
        return samples, claim


def _warm_builtin(seed: int):
    from trainer.envs import DigitSort
    from trainer.model import create_builtin_model
    from trainer.warmup import warmup

    model, tok = create_builtin_model(seed)
    warmup(model, tok, DigitSort())
    return model, tok


def noisy(model, rel: float, seed: int = 0):
    q, g = copy.deepcopy(model), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in q.parameters():
            p.mul_(1 + rel * torch.randn(p.shape, generator=g))
    return q


def sharpened(model, factor: float):
    """The policy with every logit times `factor` (its final norm scaled): what training does to a
    policy's confidence, without training it."""
    q = copy.deepcopy(model)
    with torch.no_grad():
        q.model.norm.weight.mul_(factor)
    return q


def trained(setup: Setup):
    """The built-in policy after TRAINED_STEPS seeded GRPO steps (None for other models)."""
    if setup.name != "builtin":
        return None
    from trainer.grpo import GRPOConfig
    from trainer.single import SingleConfig, run_single

    print(f"calibrating {setup.name}: training a policy for {TRAINED_STEPS} GRPO steps", file=sys.stderr)
    model = copy.deepcopy(setup.model)
    run_single(model, setup.tok, setup.env, SingleConfig(grpo=GRPOConfig(), seconds=math.inf,
                                                         max_steps=TRAINED_STEPS, eval_every=0))
    return model.eval()


def measure(setup: Setup, samples, claim, validator_model=None) -> dict:
    """Every statistic a threshold applies to, without stopping at the first failure."""
    stats = {"exp": [], "mean": [], "median": [], "logprob": [], "ties": [], "gap": [], "evidence": []}
    prefills = forward_many(validator_model or setup.model, [(s.prompt_ids, s.token_ids) for s in samples])
    for s, (logits, hidden) in zip(samples, prefills):
        for c in toploc.verify_chunks(s.proof, hidden):
            stats["exp"].append(c.exp_mismatches)
            stats["mean"].append(c.mant_err_mean)
            stats["median"].append(c.mant_err_median)
        seed = sample_seed(setup.rules.task_id, claim.worker_key, claim.version, s.prompt_index, s.sample_index)
        ev = sampling.sample_evidence(logits, s.token_ids, s.logprobs, seed, setup.rules.temperature)
        stats["logprob"].append(ev.max_logprob_err)
        stats["ties"].append(len(ev.mismatches))
        stats["gap"].append(max((m[3] for m in ev.mismatches), default=0.0))
        stats["evidence"].append(ev)
    stats["z"] = [sampling.batch_z(stats.pop("evidence"))]
    return stats


def merge(all_stats: list[dict]) -> dict:
    return {k: [v for s in all_stats for v in s[k]] for k in all_stats[0]}


def summary(values: list[float]) -> dict:
    v = sorted(float(x) for x in values)
    q = lambda f: v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]  # noqa: E731
    return {"n": len(v), "min": v[0], "p50": q(0.5), "p99": q(0.99), "max": v[-1]}


BOUNDARY_SWAP = 1.0  # mantissa-mean error of one top-k index read off the proof as garbage (see derive)


def derive(honest: dict, lowprec: dict, temperature: float) -> tuple[dict, list[str]]:
    """Thresholds from honest maxima H and low-precision minima D (per chunk or per sample).

    A continuous statistic gets sqrt(H * D), the geometric middle of the gap, but never less than
    4 H (margin for honest hardware noier than emulated) and H is floored at one quantum (1e-6
    logprob), so an all-zero honest run still leaves room.
    The mantissa mean's H is floored at one top-k boundary swap (1.0): when the 128th and 129th
    largest magnitudes of a chunk are within float noise, an honest validator's top-k can hold an
    index the worker did not commit to, and toploc reads the proof polynomial there as garbage (up
    to 127 mantissa ulps over 127 values). Calibration's 2,048 honest rollouts never hit one; a
    4-peer swarm did within its first 2,600 (mean 0.197, logprobs within 7e-7), and the honest
    worker was banned. So the mean bound stops separating low precision; the logprob bound does.
    Exponent mismatches and the median are coarse: they get max(4 H, 8) and max(4 H, 2); they
    catch other models.
    """
    notes = []

    def middle(h, d, floor):
        h = max(h, floor)
        t = max(4 * h, math.sqrt(h * d))
        if t >= d:
            notes.append(f"not separable per unit: honest max {h:.3g}, low-precision min {d:.3g}")
        return t

    lp = middle(max(honest["logprob"]), min(lowprec["logprob"]), 1e-6)
    th = {"toploc": {"max_exp_mismatches": int(max(4 * max(honest["exp"]), 8)),
                     "max_mant_err_mean": middle(max(honest["mean"]), min(lowprec["mean"]), BOUNDARY_SWAP),
                     "max_mant_err_median": float(max(4 * max(honest["median"]), 2))},
          "sampling": {"max_logprob_err": lp, "max_tie_gap": 2 * lp / max(temperature, 1e-6),
                       "max_tie_mismatches": int(max(1, 2 * max(honest["ties"]))),
                       "max_abs_z": max(6.0, 1.5 * max(abs(z) for z in honest["z"]))}}
    return th, notes


def rederive(record: dict) -> dict:
    """Thresholds from a calibration record's stored distributions under the current `derive` rule:
    derive needs only the honest maxima, the low-precision minima and the honest z extremes."""
    dist = record["distributions"]
    groups = [g for g in dist if g.startswith("honest")]
    honest = {k: [max(dist[g][k]["max"] for g in groups)] for k in dist["honest-exact"]}
    honest["z"] = [dist[g]["z"][e] for g in groups for e in ("min", "max")]
    lowprec = {k: [min(dist[g][k]["min"] for g in ("bf16", "int8"))] for k in dist["bf16"]}
    th, notes = derive(honest, lowprec, record["setup"]["temperature"])
    return {**record, "thresholds": th, "notes": notes, "rule": derive.__doc__.strip()}


def calibrate(setup: Setup, batches: int) -> dict:
    sharp = sharpened(setup.model, SHARPEN)
    groups = {"honest-exact": (setup.model, None), "honest-noise": (noisy(setup.model, NOISE), None),
              "honest-sharp": (noisy(sharp, NOISE), sharp), "bf16": (adv.bf16_copy(setup.model), None),
              "int8": (adv.int8_copy(setup.model), None), "other-model": (setup.other, None)}
    policy = trained(setup)
    if policy is not None:
        groups["honest-trained"] = (noisy(policy, NOISE), policy)
    measured = {}
    for name, (model, validator_model) in groups.items():
        n = batches if name.startswith("honest") else max(2, batches // 4)
        print(f"calibrating {setup.name}: {name}, {n} batches", file=sys.stderr)
        measured[name] = merge([measure(setup, *setup.honest(model, 1000 + b // 4, b % 4), validator_model)
                                for b in range(n)])
    honest = merge([m for g, m in measured.items() if g.startswith("honest")])
    lowprec = merge([measured["bf16"], measured["int8"]])
    th, notes = derive(honest, lowprec, setup.rules.temperature)
    return {"model": setup.model_name, "thresholds": th, "notes": notes,
            "rule": derive.__doc__.strip(), "honest_noise_relative": NOISE,
            "setup": {"prompts_per_batch": setup.k, "samples_per_prompt": setup.spp,
                      "max_new_tokens": setup.rules.max_new_tokens, "temperature": setup.rules.temperature,
                      "rollouts_per_group": {g: len(m["logprob"]) for g, m in measured.items()}},
            "distributions": {g: {k: summary(v) for k, v in m.items()} for g, m in measured.items()}}


def detect(setup: Setup, honest_batches: int, cheat_batches: int) -> dict:
    validator = setup.validator()
    timer = {"generate": 0.0, "proof_build": 0.0, "verify": 0.0, "toploc_verify": 0.0}
    rejected, reasons, tokens, proof_bytes, seen = 0, {}, 0, 0, set()
    honest_runs = []
    for b in range(honest_batches):
        samples, claim = setup.honest(setup.model, b // 4, b % 4, timer)
        t = time.perf_counter()
        verdict = check_batch(samples, claim, setup.rules, validator)
        timer["verify"] += time.perf_counter() - t
        hidden = [h for _, h in forward_many(setup.model, [(s.prompt_ids, s.token_ids) for s in samples])]
        t = time.perf_counter()
        for s, h in zip(samples, hidden):
            toploc.verify_chunks(s.proof, h)
        timer["toploc_verify"] += time.perf_counter() - t
        rejected += not verdict.passed
        print(f"{setup.name} honest batch {b}: {verdict.reason}", file=sys.stderr)
        if not verdict.passed:
            reasons[verdict.reason] = reasons.get(verdict.reason, 0) + 1
        tokens += claim.num_tokens
        proof_bytes += sum(len(s.proof) for s in samples)
        seen.add(content_digest(samples))
        honest_runs.append((samples, claim))
    n_rollouts = honest_batches * setup.k * setup.spp
    record = toploc.load_calibration(setup.model_name)
    out = {"model": setup.model_name, "rollouts_per_batch": setup.k * setup.spp,
           "thresholds": record["thresholds"],
           "calibration_rollouts": record["setup"]["rollouts_per_group"],
           "honest": {"batches": honest_batches, "rollouts": n_rollouts, "rejected_batches": rejected,
                      "false_rejection_rate": rejected / honest_batches, "reasons": reasons},
           "proof_bytes_per_token": proof_bytes / tokens,
           "mean_tokens_per_rollout": tokens / n_rollouts,
           "proof_build_over_generation": timer["proof_build"] / timer["generate"],
           "verify_over_generation": timer["verify"] / timer["generate"],
           "toploc_verify_over_generation": timer["toploc_verify"] / timer["generate"],
           "seconds": {k: round(v, 3) for k, v in timer.items()}, "cheats": {}}
    bf16 = adv.bf16_copy(setup.model)
    cheap = {"other-model": setup.other, "low-precision": bf16, "int8-quant": adv.int8_copy(setup.model),
             "laundered": bf16}
    for kind in adv.KINDS + ("replay-unseen",):
        caught, why, identical, caught_different = 0, {}, 0, 0
        for b in range(cheat_batches):
            version, batch = 500 + b // 4, b % 4
            seen_here = seen
            if kind in cheap:
                samples, claim = setup.honest(cheap[kind], version, batch)
            else:
                samples, claim = setup.honest(setup.model, version, batch)
            if kind == "laundered":
                samples = adv.launder(setup.model, samples)
                honest_ids = [s.token_ids for s in setup.honest(setup.model, version, batch)[0]]
                same = honest_ids == [s.token_ids for s in samples]  # bf16 drew exactly the honest tokens
                identical += same
            elif kind == "fabricated-tokens":
                samples = adv.fabricate(setup.model, samples, setup.answer, setup.reward, setup.rules.eos_id)
            elif kind == "inflated-reward":
                samples = adv.inflate(samples)
            elif kind == "cherry-pick":
                easy = sorted(range(5000), key=lambda i: (len(setup.prompt_ids(i)), i))[: setup.k]
                samples = adv.generate(setup.backend(setup.model), setup.rules, setup.prompt_ids, setup.reward,
                                       WORKER, version, easy, setup.spp)
                claim = adv.claim_for(samples, WORKER, version, easy, setup.spp)
            elif kind.startswith("replay"):
                samples, old = honest_runs[b % len(honest_runs)]
                claim = adv.claim_for(samples, WORKER, old.version + 1 + b, old.prompt_indices, setup.spp)
                seen_here = seen if kind == "replay" else set()
            claim = adv.claim_for(samples, WORKER, claim.version, claim.prompt_indices, setup.spp)
            verdict = check_batch(samples, claim, setup.rules, validator, seen=seen_here)
            caught += not verdict.passed
            caught_different += not verdict.passed and not (kind == "laundered" and same)
            why[verdict.reason] = why.get(verdict.reason, 0) + 1
        print(f"{setup.name} {kind}: {caught}/{cheat_batches} caught {why}", file=sys.stderr)
        out["cheats"][kind] = {"batches": cheat_batches, "detection_rate": caught / cheat_batches, "reasons": why}
        if kind == "laundered":  # a batch whose tokens all equal the honest ones *is* the honest batch
            different = cheat_batches - identical
            out["cheats"][kind].update(identical_to_honest=identical, detection_rate_when_different=(
                caught_different / different if different else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["builtin", "smollm2"], default="builtin")
    ap.add_argument("--calibrate", action="store_true", help="measure and rewrite proofs/calibration/<model>.json first")
    ap.add_argument("--rederive", action="store_true",
                    help="rewrite the thresholds of proofs/calibration/<model>.json from its stored distributions "
                         "with the current rule (no new measurements)")
    ap.add_argument("--calibration-batches", type=int, default=16)
    ap.add_argument("--honest-batches", type=int, default=None, help="default: 500+ rollouts for builtin, 96 for smollm2")
    ap.add_argument("--cheat-batches", type=int, default=None)
    ap.add_argument("--env", default=None, help="smollm2 only: another environment, e.g. reasoning-gym:chain_sum")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="the environment's options as a task announces them (env.<task>.<option>=VALUE)")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="smollm2's reply length (default 16)")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    if (args.env or args.param) and (args.model != "smollm2" or args.calibrate or args.rederive):
        ap.error("--env and --param go with --model smollm2 and no --calibrate/--rederive (calibration is the model's)")
    if args.rederive:
        name = {"builtin": "builtin:digit-sort-tiny", "smollm2": "SmolLM2-135M-Instruct"}[args.model]
        path = toploc.CALIBRATION_DIR / f"{toploc.model_key(name)}.json"
        record = rederive(json.loads(path.read_text()))
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}: {json.dumps(record['thresholds'])} {record['notes']}", file=sys.stderr)
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from bench.learning import task_table
    from node.taskfile import EXAMPLE
    params = task_table(EXAMPLE, "smollm2-135m", args.env, args.param)["params"] if args.env else {}
    setup = Setup(args.model, args.env, params, args.max_new_tokens)
    if args.calibrate:
        record = calibrate(setup, args.calibration_batches)
        path = toploc.CALIBRATION_DIR / f"{toploc.model_key(setup.model_name)}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}: {json.dumps(record['thresholds'])} {record['notes']}", file=sys.stderr)
    per_batch = setup.k * setup.spp
    honest = args.honest_batches or (math.ceil(512 / per_batch) if args.model == "builtin" else 12)
    cheats = args.cheat_batches or (8 if args.model == "builtin" else 3)
    result = detect(setup, honest, cheats)
    if args.model == "smollm2":
        result.update({"env": args.env or "chat-add", "params": params, "max_new_tokens": setup.rules.max_new_tokens})
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
