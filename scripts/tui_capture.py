"""Screenshot-equivalent of `swarm-node tui`: a real 4-peer local swarm watched in a real terminal.

Why tmux: the point is to show what an operator sees over SSH, so the TUI runs in a real terminal
(a tmux pane of fixed size) against real peer processes, and the pane's text is saved, panel after
panel, to docs/tui.txt. Nothing is drawn by hand.

    .venv/bin/python scripts/tui_capture.py                 # trainer + workers if the job runner works
    .venv/bin/python scripts/tui_capture.py --roles relay   # 4 relays: peers and gossip only

Peer 0 is the bootstrap (and the trainer, which announces the task); peers 1-3 join it. With
`--roles jobs` it waits up to --wait seconds for the trainer to publish versions with a reward,
then captures whatever is there. Every process it starts is stopped by PID, the tmux session by name.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.control import ControlError, call, call_when_up  # noqa: E402
from node.procs import start_peer, stop_processes  # noqa: E402
from node.taskfile import EXAMPLE  # noqa: E402

# (keys to send, what the screen then shows): every panel of peer0, then a worker's view (n: next node).
STEPS = (("1", "panel 1: Overview"), ("2", "panel 2: Peers"), ("3", "panel 3: Gossip"), ("4", "panel 4: Tasks"),
         ("5", "panel 5: Work"), ("6", "panel 6: Rewards"), ("7", "panel 7: Events"),
         ("n4", "key n (next node: peer1), panel 4: Tasks"), ("5", "panel 5: Work of peer1"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roles", choices=("auto", "jobs", "relay"), default="auto",
                    help="jobs: peer0 trainer, others workers; relay: all relays; auto: jobs if node/jobrunner.py exists")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "tui.txt")
    ap.add_argument("--wait", type=float, default=180.0, help="seconds to wait for versions with a reward (jobs)")
    ap.add_argument("--versions", type=int, default=3, help="rewarded versions to wait for (jobs; default 3)")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds for peers to meet before capturing")
    ap.add_argument("--size", default="150x48", help="terminal COLSxROWS")
    ap.add_argument("--base-dir", type=Path, default=None, help="peers' data dirs (default: a fresh temp dir)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("tui_capture: tmux is needed (apt-get install -y tmux)", file=sys.stderr)
        return 2
    jobs = args.roles == "jobs" or (args.roles == "auto" and importlib.util.find_spec("node.jobrunner") is not None)
    base = args.base_dir or Path(tempfile.mkdtemp(prefix="swarm-tui-"))
    dirs = [base / f"peer{i}" for i in range(4)]
    procs: list = []
    session = f"swarm-tui-{int(time.time())}"
    try:
        proc, boot = start_peer(["--bootstrap", "--data-dir", str(dirs[0]), "--heartbeat-interval", "1",
                                 "--roles", "trainer" if jobs else "relay"], dirs[0] / "node.log")
        procs.append(proc)
        for d in dirs[1:]:
            proc, _ = start_peer(["--join", boot, "--data-dir", str(d), "--heartbeat-interval", "1",
                                  "--roles", "worker" if jobs else "relay"], d / "node.log")
            procs.append(proc)
        say(f"4 peers up ({'trainer + 3 workers' if jobs else '4 relays'}), data dirs under {base}")
        task = call_when_up(dirs[0], "announce-task", {"task": tomllib.loads(EXAMPLE.read_text())})
        say(f"announced task {task['task_id']}")
        _wait_for_swarm(dirs, args.settle, jobs, args.wait, args.versions)
        cols, rows = args.size.split("x")
        # The short sleep lets tmux drop its status bar before the app measures the terminal.
        cmd = f"sleep 0.5; exec {sys.executable} -m node.cli tui --base-dir {base}"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", cols, "-y", rows, "-c", str(ROOT), cmd,
                        ";", "set-option", "-t", session, "status", "off"], check=True)
        time.sleep(5)  # textual start-up and the first polls (rates need two)
        screens = []
        for keys, name in STEPS:
            for key in keys:
                subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
                time.sleep(2.5)
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], check=True, capture_output=True,
                                  text=True).stdout
            screens.append(f"===== {name} =====\n{pane.rstrip()}\n")
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        time.sleep(1)
        header = (f"swarm-node tui, captured by scripts/tui_capture.py on {time.strftime('%Y-%m-%d %H:%M')} from a "
                  f"real 4-peer local swarm ({'trainer + 3 workers' if jobs else '4 relays'}) in a {args.size} "
                  f"tmux pane; one screen per step.\n\n")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + "\n".join(screens))
        say(f"wrote {args.out}")
        return 0
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
        stop_processes(procs)


def say(text: str) -> None:
    print(f"[tui_capture] {text}", flush=True)


def _wait_for_swarm(dirs: list[Path], settle: float, jobs: bool, wait: float, versions: int) -> None:
    """Until every peer sees the other three (at least `settle` s); with jobs, until rewards appear."""
    started = time.monotonic()
    while time.monotonic() - started < max(settle, 60):
        views = [_status(d) for d in dirs]
        if all(v and len(v.get("alive", [])) == 3 for v in views) and time.monotonic() - started >= settle:
            break
        time.sleep(1)
    if not jobs:
        return
    while time.monotonic() - started < wait:
        snap = _status(dirs[0]) or {}
        history = [h for t in snap.get("work", {}).get("trainer", {}).values() for h in t.get("history", [])]
        rewards = [h for h in history if "reward" in h]
        if len(rewards) >= versions:
            say(f"trainer has published {len(history)} versions")
            return
        time.sleep(2)
    say(f"no {versions} rewarded versions within {wait:.0f} s; capturing what there is")


def _status(d: Path) -> dict | None:
    try:
        return call(d, "status", timeout=5)
    except ControlError:
        return None


if __name__ == "__main__":
    sys.exit(main())
