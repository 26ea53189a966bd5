"""bench/soak.py's arithmetic: growth per hour of each sampled quantity, as a least-squares slope.

A quantity counts as growing without bound when its slope, after a warm-up, is a large fraction of
its level per hour; RSS and open fds must stay under `GROWTH_TARGET_PCT` (issue 28). The slope is
taken per process lifetime (one pid) and phase: a peer killed and restarted starts a new series, and the
restart's drop is not a "shrink" to average against the growth before it; a standby that takes over
(phase `standby` -> `active`: its job process starts training) starts one too, with a warm-up of its own,
so that step is not read as a leak (the step itself shows in each phase's level).

    python bench/soak_report.py runs/soak/<time>/samples.jsonl [--warmup 600]
"""

from __future__ import annotations

from collections import defaultdict

GROWTH_TARGET_PCT = 5.0  # per hour, of the level after warm-up, for RSS and open fds
MIN_SEGMENT_S = 900.0  # a lifetime shorter than this after warm-up gives no slope worth reporting
TARGET_KEYS = ("node_rss_mb", "job_rss_mb", "node_fds", "job_fds")


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, in value per hour; None with < 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600.0


def segments(samples: list[dict]) -> dict[tuple[str, int, str], list[dict]]:
    """Samples grouped by (peer, pid, phase): one series per process lifetime and phase, in time order
    (a sample without a phase is in its role's)."""
    out: dict[tuple[str, int, str], list[dict]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s["t"]):
        out[(s["peer"], s["pid"], s.get("phase", s.get("role", "")))].append(s)
    return dict(out)


def growth(samples: list[dict], warmup: float) -> dict:
    """Per peer: for each series (lifetime and phase) after `warmup` seconds of it (`judged`), each
    quantity's level (mean), slope per hour and slope as % of the level per hour, the longest series'
    figures at the top; plus the largest value any lifetime reached (tables must stay under their caps,
    warm-up included)."""
    report: dict[str, dict] = {}
    for (peer, pid, phase), series in segments(samples).items():
        start = series[0]["t"]
        settled = [s for s in series if s["t"] - start >= warmup]
        span = settled[-1]["t"] - settled[0]["t"] if settled else 0.0
        entry = report.setdefault(peer, {"lifetimes": 0, "series": 0, "max": {}})
        entry["series"] += 1
        if pid != entry.get("_last_pid"):  # segments come in time order, a peer's lifetimes one after another
            entry["lifetimes"] += 1
            entry["_last_pid"] = pid
        for s in series:
            for key, value in s["values"].items():
                entry["max"][key] = max(entry["max"].get(key, value), value)
        judged = {"pid": pid, "phase": phase, "span_s": round(span, 1), "growth": _series_growth(settled)}
        entry.setdefault("judged", []).append(judged)
        if span >= entry.get("span_s", -1.0):  # the longest series is the peer's headline figures
            entry.update(judged)
    for entry in report.values():
        entry.pop("_last_pid", None)
    return report


def _series_growth(settled: list[dict]) -> dict:
    out = {}
    for key in sorted({k for s in settled for k in s["values"]}):
        points = [(s["t"], s["values"][key]) for s in settled if key in s["values"]]
        slope = slope_per_hour(points)
        level = sum(v for _, v in points) / len(points) if points else 0.0
        pct = None if slope is None or level == 0 else 100.0 * slope / abs(level)
        out[key] = {"level": round(level, 2), "per_hour": None if slope is None else round(slope, 3),
                    "pct_per_hour": None if pct is None else round(pct, 2)}
    return out


def verdict(report: dict) -> dict:
    """Target check: every series (process lifetime and phase) long enough to judge keeps RSS and fds
    under the target."""
    judged, over = [], []
    for peer, entry in sorted(report.items()):
        for series in entry.get("judged", []):
            if series["span_s"] < MIN_SEGMENT_S:
                continue
            for key in TARGET_KEYS:
                g = series["growth"].get(key)
                if g is None or g["pct_per_hour"] is None:
                    continue
                what = f"{peer}.{key}" + (f" ({series['phase']}, pid {series['pid']})" if len(entry["judged"]) > 1 else "")
                judged.append(what)
                if g["pct_per_hour"] > GROWTH_TARGET_PCT:
                    over.append({"what": what, "pct_per_hour": g["pct_per_hour"], "level": g["level"]})
    return {"target_pct_per_hour": GROWTH_TARGET_PCT, "judged": len(judged), "over": over,
            "met": bool(judged) and not over}


def main(argv: list[str] | None = None) -> int:
    """Growth and verdict of a soak's samples.jsonl (also of one still running)."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("samples", help="a soak's samples.jsonl")
    ap.add_argument("--warmup", type=float, default=600.0, help="seconds of each series left out (default 600)")
    args = ap.parse_args(argv)
    with open(args.samples) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    report = growth(samples, args.warmup)
    print(json.dumps({"per_peer": report, "verdict": verdict(report)}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
