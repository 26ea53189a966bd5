"""`swarm-node local`'s version lines: version 0's build shown while it runs, completions counted on
across a takeover (not restarting at the new trainer's first step)."""

from node.local_progress import VersionLines


def _snap(peer: str, history: list[tuple[int, int]], current: dict | None = None) -> dict:
    records = [{"task_id": "t", "version": v, "completions": c, "reward": 0.5} for v, c in history]
    return {"peer_id": peer, "work": {"trainer": {"t": {"history": records}}} if history else {},
            "jobs": {"seconds": {}, "current": current}}


def test_completions_go_on_across_a_takeover():
    lines: list[str] = []
    show = VersionLines(lines.append)
    show.update(_snap("p0", [(0, 0), (1, 256), (2, 512)]), "t")
    show.update(_snap("p0", [(0, 0), (1, 256), (2, 512), (3, 768)]), "t")
    show.update(None, "t")  # the trainer died: nothing new
    # the standby took over: its own count starts with its first step; versions before are not repeated
    show.update(_snap("p1", [(4, 256)]), "t")
    show.update(_snap("p1", [(4, 256), (5, 512)]), "t")
    # the old trainer is back and later active again: its count goes on from its own last one
    show.update(_snap("p0", [(3, 768), (6, 1024)]), "t")
    counts = [int(line.split("completions")[1].split()[0]) for line in lines]
    assert [int(line.split()[1]) for line in lines] == [0, 1, 2, 3, 4, 5, 6]
    assert counts == [0, 256, 512, 768, 1024, 1280, 1536]


def test_version_0_build_is_shown_while_it_runs():
    lines: list[str] = []
    show = VersionLines(lines.append)
    init = {"kind": "init", "job_id": 1, "seconds": 3.0, "progress": {}}
    show.update(_snap("p0", [], init), "t")
    show.update(_snap("p0", [], init), "t")  # the same stage is not repeated every 5 s
    show.update(_snap("p0", [], {**init, "seconds": 6.0, "progress": {"stage": "model", "model": "builtin:x"}}), "t")
    show.update(_snap("p0", [], {**init, "seconds": 9.0, "progress": {"stage": "warmup", "step": 3, "steps": 40,
                                                                        "loss": 2.1}}), "t")
    show.update(_snap("p0", [], {**init, "seconds": 14.0, "progress": {"stage": "warmup", "step": 9, "steps": 40,
                                                                         "loss": 1.5}}), "t")  # within 15 s: quiet
    show.update(_snap("p0", [], {**init, "seconds": 30.0, "progress": {"stage": "heldout", "prompts": 256}}), "t")
    show.update(_snap("p0", [], {**init, "seconds": 31.0, "progress": {"stage": "pack"}}), "t")
    show.update(_snap("p0", [], {"kind": "generate", "seconds": 1.0, "progress": {}}), "t")  # not version 0's
    show.update(_snap("p0", [(0, 0)]), "t")
    show.update(_snap("p0", [(0, 0)], {**init, "progress": {"stage": "warmup"}}), "t")  # version 0 is out: silent
    assert lines[:5] == [
        "building version 0 (3 s): starting the job process (loading torch)",
        "building version 0 (6 s): creating the base model builtin:x",
        "building version 0 (9 s): warm-up step 3/40 (loss 2.1)",
        "building version 0 (30 s): scoring 256 held-out prompts with the base model",
        "building version 0 (31 s): packing and storing the version's shards",
    ]
    assert lines[5].startswith("version    0  completions       0") and len(lines) == 6
