"""Benchmark: how small a policy version is on the wire, and how fast it reaches many peers. JSON out.

Three parts (each can be skipped):

  compression  bytes on the wire / raw bf16 bytes for one real GRPO step, packed as the trainer's
               job does (trainer/versions.py: bf16, zigzag delta vs the parent when smaller, zstd,
               1 MiB shards of 256 KiB pieces). Wire bytes = compressed shards + the signed manifest
               envelope (with every shard and piece hash) + per-piece request/answer framing. Models: the built-in one (warmed up, then one GRPO batch) and
               SmolLM2-135M-Instruct (trainer/model.py load_smollm2; one GRPO step on chat-arithmetic
               rollouts). Pack and unpack throughput in raw bf16 MB/s (one thread).
  localhost    real `swarm-node` processes on 127.0.0.1 (node/shardbench.py): a seed publishes a
               `--size-mb` version (incompressible bytes); 1, 4 and 8 `mirror` peers fetch it through
               the shard exchange. Time until every peer holds it, and the ratio to the 1-peer time;
               next to a star (the peers are `leech`es: only the seed serves). Twice: with every peer
               on an emulated uplink (`--upload-mbps`, default 10 Mbit/s, node/uplink.py; the sum of
               all uplinks stays below what 2 cores encrypt, so the protocol is measured, as the
               simulator's links do) and unthrottled (then all peers share this machine's CPU: the
               time is total bytes moved / aggregate Noise+yamux throughput). Load averages recorded.
  simulator    simulator/swarming.py: the same exchange state machine over a bandwidth model, 100 and
               1,000 peers on 50 Mbit/s links: time until 95% hold the version, as a ratio to
               size / bandwidth, next to the star (simulated at 100 peers; at 1,000 the star's origin
               uplink is saturated throughout, so its time is N * size / bandwidth, which the
               simulated 100-peer star confirms; simulating it would take ~10^8 flow events).

  netlab       (`--netlab`, instead of the parts above; root) the localhost run in a network lab of
               real namespaces (netlab/shardbench.py): a seed and `--netlab-peers` mirrors, each on a
               `tc tbf` uplink of `--upload-mbps` shaped by the kernel, the last `--netlab-natted` of
               them each behind a NAT router of its own (outbound only). Time until every peer
               holds a `--size-mb` version, as a multiple of the single-transfer bound
               size / uplink (target under 2x). No emulated latency: netem is not in this kernel.

Run: `python bench/weights.py [--skip-compression] [--skip-smollm2] [--skip-localhost] [--skip-sim]`
(about 15-30 min on 2 shared cores; every part prints progress on stderr);
`python bench/weights.py --netlab [--size-mb 50] [--netlab-peers 8] [--netlab-natted 2]` (about 2 min).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MB = 1e6
FRAME = 4 + 36 + 4 + 1 + 200  # request frame + body, answer frame + status byte, stream setup


def _say(msg: str) -> None:
    print(f"[weights] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- compression


def wire_ratio(v0: dict, v1: dict, shard_size: int = 1 << 20) -> dict:
    import torch

    from gossip.envelope import seal
    from gossip.identity import Identity
    from gossip.messages import TensorEntry, WeightManifest
    from trainer.versions import message_fields
    from trainer.weights import pack_version, unpack_version

    raw = sum(t.numel() * (2 if t.is_floating_point() else t.element_size()) for t in v1.values())
    p0 = pack_version(v0, None, shard_size=shard_size)
    r0 = unpack_version(p0.manifest_fields(), list(p0.shards))
    pack_s = unpack_s = math.inf
    for _ in range(2):
        t0 = time.perf_counter()
        p1 = pack_version(v1, r0, shard_size=shard_size, parent_root=p0.root, full_every=8)
        t1 = time.perf_counter()
        r1 = unpack_version(p1.manifest_fields(), list(p1.shards), r0 if p1.encoding == "delta" else None)
        t2 = time.perf_counter()
        pack_s, unpack_s = min(pack_s, t1 - t0), min(unpack_s, t2 - t1)
    fields = message_fields(p1)
    fields["tensors"] = tuple(TensorEntry(*t) for t in fields["tensors"])
    manifest = WeightManifest(task_id="0" * 16, version=1, parent_version=0 if p1.encoding == "delta" else -1,
                              created_at=1.8e9, **fields)
    envelope = len(seal(Identity(b"\x01" * 32), manifest).wire)
    wire = p1.compressed_size + envelope + FRAME * len(p1.piece_hashes)
    changed = sum(int((r1[k] != r0[k]).sum()) for k in r1 if r1[k].is_floating_point())
    floats = sum(t.numel() for t in r1.values() if t.is_floating_point())
    full = pack_version(v1, None, shard_size=shard_size)
    del torch
    return {"raw_bf16_mb": round(raw / MB, 3), "encoding": p1.encoding, "shards": len(p1.shards),
            "pieces": len(p1.piece_hashes),
            "wire_ratio": round(wire / raw, 4), "payload_ratio": round(p1.compressed_size / raw, 4),
            "manifest_bytes": envelope, "full_version_wire_ratio": round(
                (full.compressed_size + envelope + FRAME * len(full.piece_hashes)) / raw, 4),
            "bf16_values_changed_frac": round(changed / floats, 4),
            "pack_mb_s": round(raw / MB / pack_s, 1), "unpack_mb_s": round(raw / MB / unpack_s, 1)}


def builtin_step() -> tuple[dict, dict, dict]:
    from bench.weights_pack import builtin_versions

    v0, after, info = builtin_versions(65)
    return v0, after[0], info


def smollm2_step() -> tuple[dict, dict, dict]:
    import torch

    from trainer.envs import ChatArithmetic
    from trainer.grpo import GRPOConfig, group_advantages, grpo_step, make_batch, make_optimizer
    from trainer.inference import TorchBackend
    from trainer.model import load_smollm2
    from trainer.rollout import generate_rollouts

    from trainer.policy import weights_bytes
    from trainer.versions import state_of_blob

    model, tok = load_smollm2()
    snapshot = lambda: state_of_blob(weights_bytes(model))  # noqa: E731  (tied embeddings once, as trainers pack)
    v0 = snapshot()
    env = ChatArithmetic()
    backend = TorchBackend(model, tok.eos_token_id, tok.pad_token_id, capture_hidden=False)
    prompts, samples = 4, 4
    rollouts = generate_rollouts(env, tok, backend, list(range(prompts)), samples=samples, max_new_tokens=16,
                                 format_weight=0.2)
    rewards = torch.tensor([r.reward for r in rollouts])
    forced = bool((rewards.view(prompts, samples).std(dim=1) == 0).all())
    if forced:  # no group has a signal: fixed mixed rewards, so the step still moves the weights
        rewards = torch.tensor([float(i % 2) for i in range(prompts * samples)])
    cfg = GRPOConfig(lr=3e-5, minibatches=1)
    batch = make_batch([r.completion.prompt_ids for r in rollouts], [r.completion.token_ids for r in rollouts],
                       [r.completion.logprobs for r in rollouts], group_advantages(rewards, samples),
                       tok.pad_token_id)
    grpo_step(model, make_optimizer(model, cfg), batch, cfg)
    return v0, snapshot(), {"update": f"one GRPO step (AdamW lr 3e-5, {prompts}x{samples} chat-arithmetic rollouts)",
                            "rewards_forced": forced}


# ---------------------------------------------------------------- localhost


def localhost(size_mb: float, counts: list[int], upload_mbps: float | None = None,
              modes: tuple[str, ...] = ("swarm", "star")) -> dict:
    from node.shardbench import run_localhost

    out: dict = {"size_mb": size_mb, "upload_mbps": upload_mbps, "loadavg_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory(prefix="swarm-weights-") as tmp:
        for mode in modes:
            rows = {}
            for n in counts:
                _say(f"localhost {mode} {n} peers, {size_mb} MB, uplink {upload_mbps or 'unthrottled'}")
                rows[n] = run_localhost(n, size_mb, mode, Path(tmp) / f"{mode}{n}", timeout=900, upload_mbps=upload_mbps)
                rows[n]["loadavg"] = [round(x, 2) for x in os.getloadavg()]
            base = rows[counts[0]]["reach_all_s"]
            out[mode] = {str(n): {"reach_all_s": r["reach_all_s"], "ratio_to_single": round(r["reach_all_s"] / base, 3),
                                  "pieces_served_by_peers": r["pieces_served_by_peers"], "loadavg_after": r["loadavg"],
                                  "cpu_s_per_mb_moved": r["cpu_s_per_mb_moved"], "cpu_per_peer": r["cpu_per_peer"]}
                         for n, r in rows.items()}
    if upload_mbps:
        out["single_transfer_bound_s"] = round(size_mb * 8 / upload_mbps, 2)
    return out


# ---------------------------------------------------------------- simulator


def simulator(peer_counts: list[int], size_mb: float, mbps: float, star_max: int, shard_mb: float = 1.0,
              piece_kib: float = 256.0) -> dict:
    from simulator.swarming import SwarmingConfig, run_swarming

    out: dict = {}
    star100 = None
    for n in peer_counts:
        _say(f"simulator swarm {n} peers")
        t0 = time.monotonic()
        swarm = run_swarming(SwarmingConfig(peers=n, size_mb=size_mb, mbps=mbps, mode="swarm", shard_mb=shard_mb,
                                            piece_kib=piece_kib))
        swarm["wall_s"] = round(time.monotonic() - t0, 1)
        bound = swarm["lower_bound_s"]
        if n <= star_max:
            _say(f"simulator star {n} peers")
            star = run_swarming(SwarmingConfig(peers=n, size_mb=size_mb, mbps=mbps, mode="star", shard_mb=shard_mb,
                                               piece_kib=piece_kib))
            star["model"] = "simulated"
            star100 = star
        else:
            reach = n * bound
            star = {"mode": "star", "peers": n, "model": "analytic: origin uplink saturated, N * size / bandwidth",
                    "reach_95_s": round(reach, 1), "ratio_95": round(reach / bound, 1)}
            if star100 is not None:
                star["simulated_check"] = {"peers": star100["peers"], "simulated_ratio_95": star100["ratio_95"],
                                           "analytic_ratio_95": star100["peers"]}
        out[str(n)] = {"swarm": swarm, "star": star}
    return out


# ---------------------------------------------------------------- netlab


def netlab(peers: int, natted: int, size_mb: float, up_mbps: float) -> dict:
    from netlab import unavailable_reason
    from netlab.shardbench import run_netlab

    reason = unavailable_reason()
    if reason:
        return {"skipped": reason}
    _say(f"netlab: {peers} mirrors ({natted} behind NAT), {size_mb} MB, tbf uplinks {up_mbps} Mbit/s")
    before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="swarm-weights-netlab-") as tmp:
        result = run_netlab(peers, natted, size_mb, up_mbps, Path(tmp) / "run")
    return {**result, "target_ratio": 2.0, "loadavg_before": before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--skip-compression", action="store_true")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--skip-localhost", action="store_true")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--size-mb", type=float, default=50.0)
    ap.add_argument("--local-peers", default="1,4,8")
    ap.add_argument("--sim-peers", default="100,1000")
    ap.add_argument("--mbps", type=float, default=50.0)
    ap.add_argument("--sim-shard-mb", type=float, default=1.0, help="simulator: shard size in MiB (task default 1)")
    ap.add_argument("--sim-piece-kib", type=float, default=256.0,
                    help="simulator: piece size in KiB, a divisor of the shard size (task default 256)")
    ap.add_argument("--upload-mbps", type=float, default=10.0,
                    help="localhost: every peer's emulated uplink, Mbit/s (0: only the unthrottled runs)")
    ap.add_argument("--local-size-mb", type=float, default=None,
                    help="localhost emulated-link runs: version size (default --size-mb)")
    ap.add_argument("--skip-unthrottled", action="store_true", help="localhost: only the emulated-link runs")
    ap.add_argument("--netlab", action="store_true", help="run only the network-lab part (root; namespaces, tc tbf, NAT)")
    ap.add_argument("--netlab-peers", type=int, default=8, help="netlab: mirrors besides the seed")
    ap.add_argument("--netlab-natted", type=int, default=2, help="netlab: how many of them sit behind NAT")
    args = ap.parse_args(argv)
    out: dict = {}
    if args.netlab:
        out["netlab"] = netlab(args.netlab_peers, args.netlab_natted, args.size_mb, args.upload_mbps or 10.0)
        print(json.dumps(out, indent=2))
        return
    if not args.skip_compression:
        import torch

        torch.set_num_threads(1)
        _say("compression: built-in model (warm-up + one GRPO batch)")
        v0, v1, info = builtin_step()
        out["compression"] = {"builtin": {**info, **wire_ratio(v0, v1)}}
        if not args.skip_smollm2:
            _say("compression: SmolLM2-135M (one GRPO step)")
            v0, v1, info = smollm2_step()
            out["compression"]["smollm2_135m"] = {**info, **wire_ratio(v0, v1)}
        out["compression"]["target_delta_wire_ratio"] = 0.25
    if not args.skip_localhost:
        counts = [int(x) for x in args.local_peers.split(",")]
        out["localhost"] = {"target_ratio_at_8": 2.0}
        if args.upload_mbps:
            out["localhost"]["emulated_link"] = localhost(args.local_size_mb or args.size_mb, counts, args.upload_mbps)
        if not args.skip_unthrottled:
            out["localhost"]["unthrottled"] = localhost(args.size_mb, counts)
    if not args.skip_sim:
        out["simulator"] = simulator([int(x) for x in args.sim_peers.split(",")], args.size_mb, args.mbps, star_max=100,
                                     shard_mb=args.sim_shard_mb, piece_kib=args.sim_piece_kib)
        out["simulator"]["target_ratio_95"] = 1.5
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
