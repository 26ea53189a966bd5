"""Benchmark: what a trainer checkpoint costs against the versions it travels beside. Prints JSON.

Runs the built-in task's trainer job process (node/examples/digit-sort.toml's params: the seeded
warm-up, then real GRPO steps on rollouts it generates) and asks every step to pack its state
(trainer/checkpoint.py). Reported per step: the checkpoint's packed and raw bytes, the new version's
bytes (a delta) and the full version's, and the packing time against the step's own train time
measured in the same process (the baseline: machines differ, ratios travel). Then the wire cost per
version for one standby at the task's `state_every`: checkpoint bytes / state_every, as a fraction of
one follower's weights bytes per version.

Run: `python bench/checkpoint.py [--steps 4] [--state-every 20] [--out FILE]` (about a minute: most
of it is the warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

for key, value in {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}.items():
    os.environ.setdefault(key, value)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.taskfile import EXAMPLE  # noqa: E402
from swarm.jobs import GenerateJob, InitJob, TaskSpec, TrainJob  # noqa: E402
from trainer.jobs import JobWorker  # noqa: E402

WORKER = b"w" * 32


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--state-every", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    params = {**tomllib.loads(Path(EXAMPLE).read_text())["task"]["params"], "eval_prompts": 0}
    task = TaskSpec("bench-checkpoint", "builtin:digit-sort-tiny", "digit-sort", params)
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    jobs = JobWorker(work / "blobs", work / "state")
    print("building version 0 (warm-up) ...", file=sys.stderr)
    v = jobs.run("init", InitJob(task, seed=7))
    full = v.manifest["compressed_size"]
    steps = []
    for _ in range(args.steps):
        per_commit = params["prompts_per_commit"]
        rollouts = tuple(jobs.run("generate", GenerateJob(task, v.version, v.weights,
                                                          tuple(range(k * per_commit, (k + 1) * per_commit)),
                                                          params["group_size"], WORKER)).blob
                         for k in range(params["prompts_per_step"] // per_commit))
        t0 = time.monotonic()
        nv = jobs.run("train", TrainJob(task, v.version, v.weights, rollouts, v.manifest["root"],
                                        v.manifest["depth"], pack_state=True))
        wall = time.monotonic() - t0
        steps.append({"version": nv.version, "version_bytes": nv.manifest["compressed_size"],
                      "encoding": nv.manifest["encoding"], "state_bytes": nv.state["compressed_size"],
                      "state_raw_bytes": nv.state["raw_size"], "pack_s": round(nv.stats["state_pack_s"], 3),
                      "step_s": round(wall - nv.stats["state_pack_s"], 3)})
        print(f"version {nv.version}: checkpoint {nv.state['compressed_size']:,} B", file=sys.stderr)
        v = nv
    state = statistics.median(s["state_bytes"] for s in steps)
    delta = statistics.median(s["version_bytes"] for s in steps)
    result = {"date": time.strftime("%Y-%m-%d"), "model": task.model, "full_version_bytes": full,
              "delta_bytes_median": delta, "state_bytes_median": state,
              "state_ratio": round(state / steps[0]["state_raw_bytes"], 4),
              "state_over_full_version": round(state / full, 2),
              "pack_over_step_time": round(statistics.median(s["pack_s"] / s["step_s"] for s in steps), 3),
              "state_every": args.state_every,
              "state_bytes_per_version": round(state / args.state_every),
              "standby_wire_over_one_followers_weights": round(state / args.state_every / delta, 3),
              "load_avg": [round(x, 2) for x in os.getloadavg()], "steps": steps}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
