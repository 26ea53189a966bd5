"""`swarm-node local`: N real peer processes on 127.0.0.1, one of them the bootstrap.

It announces the task, shows progress, and at the end asks every peer for its view (who it saw,
what it delivered, how fast) and writes that as a JSON summary. Ctrl-C stops every peer by PID.
With `--tui` the terminal UI watches every peer (n/p switches) while the supervision runs on a
thread and logs to `<base-dir>/local.log`; quitting the UI stops the swarm.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import tomllib
from pathlib import Path

from node.control import ControlError, call, call_when_up
from node.keeper import Keeper
from node.local_progress import VersionLines
from node.procs import start_peer, stop_processes
from node.records import read_records
from node.taskfile import EXAMPLE, TaskFileError, fill_pins
from swarm.forkchoice import chain_key
from swarm.stats import percentile
from trainer.fsutil import write_atomic


# Seconds between 1 KB latency probes. With 1 s heartbeats and 0.5 s probes, 45% of what each node
# received in a 4-peer training run was heartbeats and probes (py-spy: the nodes' CPU is mostly
# gossip writes, on the cores the trainer and workers need); a probe every 2 s still gives hundreds
# of latency samples in a 10-minute run.
PROBE_INTERVAL = 2.0


def run_local(peers: int, duration: float | None, summary: Path | None, base_dir: Path, task_file: Path | None,
              heartbeat: float = 2.0, probe_interval: float = PROBE_INTERVAL, malicious: list[str] | None = None,
              tui: bool = False, job_device: str = "cpu", restart_dead: bool = False, trainers: int = 1,
              metrics_port: int | None = None) -> int:
    # SIGINT is how this launcher is stopped (Ctrl-C, or `kill -INT`). A shell that starts a job in
    # the background hands it SIGINT ignored, and then the signal did nothing: a CI run started
    # that way failed test_local_resume (the run went on past its Ctrl-C until killed).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    base_dir = Path(base_dir)
    dirs = [base_dir / f"peer{i}" for i in range(peers)]
    # The last len(malicious) peers cheat, one kind each (--malicious K:KIND); a lying validator
    # runs the validator role and the task names it as a validator, so its lies are acted on.
    cheaters = {peers - 1 - j: kind for j, kind in enumerate(reversed(malicious or []))}
    procs = []
    cheater_ids: dict[int, str] = {}
    started = time.time()
    try:
        # Peer 0 is the bootstrap and the trainer (it announces the task, so it is the task's rank-0 trainer).
        # One torch thread for the trainer too: with two (--job-threads 2) its steps got slower here
        # (train_s 1.31 s against 1.15 s, 4 peers on 2 cores): the other core is never idle enough.
        device = ["--job-device", job_device] if job_device != "cpu" else []

        def metrics(i: int) -> list[str]:  # peer i serves Prometheus metrics on 127.0.0.1:BASE+i
            return [] if metrics_port is None else ["--metrics-port", str(metrics_port + i)]
        boot_args = ["--bootstrap", "--data-dir", str(dirs[0]), "--heartbeat-interval", str(heartbeat),
                     "--roles", "trainer"] + metrics(0)
        proc, boot = start_peer(boot_args + device, dirs[0] / "node.log")
        procs.append(proc)
        # A restarted bootstrap takes its old port again, so the address the others joined stays good.
        specs = [(boot_args + ["--port", boot.split("/")[4]] + device, dirs[0] / "node.log", 0)]
        _say(f"bootstrap peer listening {boot} (pid {proc.pid})")
        for i, d in enumerate(dirs[1:], 1):
            # peers 1..K-1 are standby trainers (--trainers K): they take over, so no lower priority
            kind = cheaters.get(i)
            role = "trainer" if i < trainers else "validator" if kind == "lying-validator" else "worker"
            nice = 0 if i < trainers else WORKER_NICE
            args = (["--join", boot, "--data-dir", str(d), "--heartbeat-interval", str(heartbeat), "--roles", role]
                    + (["--malicious", kind] if kind else []) + device + metrics(i))
            proc, _ = start_peer(args, d / "node.log", nice=nice)
            procs.append(proc)
            specs.append((args, d / "node.log", nice))
            _say(f"peer{i} started (pid {proc.pid}){' as a standby trainer' if i < trainers else ''}")
        _say(f"{peers} peers running (logs in {base_dir}/peer*/node.log); Ctrl-C stops them all")
        if metrics_port is not None:
            _say(f"Prometheus metrics on 127.0.0.1:{metrics_port}..{metrics_port + peers - 1}/metrics")
        # A base dir that ran before holds the task it announced: announcing it again (same table,
        # same created_at, same trainer key) gives the same task id, and the trainer resumes from the
        # last version it published (trainer/jobs.py) instead of starting over.
        saved = _saved_task(base_dir)
        if saved is not None:
            table, created_at = saved["task"], saved["created_at"]
            _say(f"resuming task {saved['task_id']} from {base_dir / TASK_RECORD}"
                 f"{' (--task ignored)' if task_file else ''}; delete that file to start a new task")
            if len(table["task"].get("trainers", ["self"])) != trainers:
                _say(f"the resumed task names {len(table['task'].get('trainers', ['self']))} trainer(s), "
                     f"not --trainers {trainers}")
        else:
            path = Path(task_file or EXAMPLE)
            try:
                table, created_at = fill_pins(tomllib.loads(path.read_text()), where=str(path)), time.time()
            except TaskFileError as exc:  # this node cannot run its own task: say what to install or fetch
                _say(f"not announcing: {exc}")
                return 1
            if trainers > 1:  # ranked: peer0 (the announcer, "self") first, then peer1 .. peer K-1
                table["task"]["trainers"] = ["self"] + [call_when_up(dirs[i], "status")["peer_id"]
                                                        for i in range(1, trainers)]
        cheater_ids.update({i: call_when_up(dirs[i], "status")["peer_id"] for i in cheaters})
        for i, kind in sorted(cheaters.items()):
            _say(f"peer{i} {cheater_ids[i]} is malicious: {kind}")
            if kind == "lying-validator" and cheater_ids[i] not in table["task"].get("validators", []):
                table["task"]["validators"] = list(table["task"].get("validators", [])) + [cheater_ids[i]]
        task_id = call_when_up(dirs[0], "announce-task", {"task": table, "created_at": created_at})["task_id"]
        _save_task(base_dir, {"task": table, "created_at": created_at, "task_id": task_id})
        _say(f"announced task {task_id} ({table['task']['name']})")
        end = None if duration is None else time.monotonic() + duration

        def reannounce() -> None:  # same table and created_at: the same task id, which the trainer resumes
            call_when_up(dirs[0], "announce-task", {"task": table, "created_at": created_at})

        keeper = Keeper(procs, dirs, specs, restart_dead, reannounce, log=_say)
        if tui:
            _supervise_under_tui(keeper, task_id, started, end, probe_interval, base_dir)
        else:
            _supervise(keeper, task_id, started, end, probe_interval, threading.Event())
    except KeyboardInterrupt:
        _say("stopping (Ctrl-C)")
    except RuntimeError as exc:
        _say(f"error: {exc}")
        stop_processes(procs)
        return 1
    report = _summarise(dirs, time.time() - started) if summary else None
    if cheaters:
        trust = _trust_report(dirs, cheaters, cheater_ids)
        for line in _trust_lines(trust):
            _say(line)
        if report is not None:
            report["malicious"] = trust
    codes = stop_processes(procs)
    if report is not None:
        report["exit_codes"] = codes
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps(report, indent=2, sort_keys=True))
        _say(f"summary written to {summary}")
    _say(f"stopped {len(procs)} peers (exit codes {codes})")
    return 0


def _supervise(keeper: Keeper, task_id: str, started: float, end: float | None, probe_interval: float,
               stop: threading.Event) -> None:
    """Until `end` or `stop`: look after dead peers, send 1 KB probes, report progress every 5 s."""
    dirs = keeper.dirs
    peers = len(dirs)
    next_report = next_probe = time.monotonic()
    probe_index = 0
    versions = VersionLines(_say)
    shown_trainer: tuple | None = None  # (peer index, term) of the active trainer last reported
    failures_seen: dict[tuple, int] = {}
    while (end is None or time.monotonic() < end) and not stop.is_set():
        keeper.check()
        now = time.monotonic()
        if now >= next_probe:  # 1 KB probes, round robin: the gossip latency the summary reports
            _quiet_call(dirs[probe_index % peers], "probe", {"size": 1024})
            probe_index += 1
            next_probe = now + probe_interval
        if now >= next_report:
            views = [_quiet_call(d, "status") for d in dirs]
            _say(_progress_line(views, time.time() - started))
            shown_trainer = _show_trainer(views, task_id, shown_trainer)
            versions.update(views[shown_trainer[0] if shown_trainer else 0], task_id)  # the versions' publisher
            _show_failures(dirs, failures_seen)
            next_report = now + 5
        time.sleep(0.05)


def _supervise_under_tui(keeper: Keeper, task_id: str, started: float, end: float | None,
                         probe_interval: float, base_dir: Path) -> None:
    """The UI owns the terminal (and the main thread, for its signals); supervision logs to a file."""
    global _LOG
    from node.tui import run_tui  # textual is imported only here

    stop, failure = threading.Event(), []
    log_path = base_dir / "local.log"
    _say(f"opening the TUI (q stops the swarm); progress goes to {log_path}")

    def supervise() -> None:
        try:
            _supervise(keeper, task_id, started, end, probe_interval, stop)
        except RuntimeError as exc:  # every peer gone: the UI shows them disconnected meanwhile
            failure.append(exc)

    with open(log_path, "a", encoding="utf-8") as log:
        _LOG = log
        thread = threading.Thread(target=supervise, name="local-supervisor", daemon=True)
        thread.start()
        try:
            run_tui(keeper.dirs)
        finally:
            stop.set()
            thread.join(timeout=10)
            _LOG = None
    if failure:
        raise failure[0]


TASK_RECORD = "task.json"  # in the base dir: the announced task, for resuming
# On one machine the trainer's job process is the critical path (checks + GRPO step, one after the
# other); workers only fill what its next step needs, so they run at a lower priority and use the
# cycles it leaves (bench/learning.py measures the effect).
WORKER_NICE = 5


def _saved_task(base_dir: Path) -> dict | None:
    path = base_dir / TASK_RECORD
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path} is unreadable ({exc}); delete it to start a new task") from None
    if not isinstance(record, dict) or not {"task", "created_at", "task_id"} <= set(record):
        raise RuntimeError(f"{path} is not a task record; delete it to start a new task")
    return record


def _save_task(base_dir: Path, record: dict) -> None:
    write_atomic(base_dir / TASK_RECORD, json.dumps(record, indent=2, sort_keys=True).encode(), point="task-record")


_LOG = None  # where progress goes while the TUI owns the terminal


def _say(text: str) -> None:
    print(f"[local] {text}", file=_LOG or sys.stdout, flush=True)


def _quiet_call(data_dir: Path, cmd: str, args: dict | None = None):
    try:
        return call(data_dir, cmd, args, timeout=5)
    except ControlError:
        return None


def _progress_line(views: list[dict | None], elapsed: float) -> str:
    seen = " ".join("?" if v is None else f"{len(v['alive'])}" for v in views)
    tasks = sum(1 for v in views if v and v["tasks"])
    return f"t={elapsed:5.0f}s  peers alive per node: {seen}  (of {len(views) - 1})  task known by {tasks}/{len(views)}"


def _show_failures(dirs: list[Path], seen: dict[tuple, int]) -> None:
    """Print each distinct failed job once (a task naming a model nobody has, an environment that
    raises, ...), then how often it repeated: the peers retry, the operator should see why."""
    for i, d in enumerate(dirs):
        for r in read_records(d, "task-refused"):  # said once: the peer does no more work for the task
            key = (i, "refused", str(r.get("task_id")), str(r.get("role")))
            if key not in seen:
                seen[key] = 1
                _say(f"peer{i} ({r.get('role')}) refuses task {r.get('task_id')}: {r.get('reason')}")
        counts: dict[tuple, int] = {}
        for r in read_records(d, "job-failed"):
            key = (i, r.get("kind"), str(r.get("error")))
            counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            if key not in seen:
                _say(f"peer{i} {key[1]} job failed: {key[2]}")
            elif n >= 2 * seen[key] and n > seen[key] + 2:
                _say(f"peer{i} {key[1]} job failed {n} times: {key[2][:100]}")
            else:
                continue
            seen[key] = n


def _show_trainer(views: list[dict | None], task_id: str, shown: tuple | None) -> tuple | None:
    """Print the task's active trainer (peer index and term) when it changes, as the peers see it:
    the best (term, lower rank) any reachable peer reports, since a dead trainer's own view is gone."""
    index = {v["peer_id"]: i for i, v in enumerate(views) if v}
    best = None
    for v in filter(None, views):
        for t in v.get("tasks", []):
            active = (t.get("trainer_chain") or {}).get("active") if t.get("task_id") == task_id else None
            if active and active["peer_id"] in index:
                key = chain_key(active["term"], active["rank"])
                if best is None or key > best[0]:
                    best = (key, index[active["peer_id"]], active)
    if best is None or (best[1], best[2]["term"]) == shown:
        return shown
    _, i, active = best
    _say(f"active trainer: peer{i} (rank {active['rank']}, term {active['term']}, version {active['version']})")
    return i, active["term"]


def _summarise(dirs: list[Path], elapsed: float) -> dict:
    nodes, status_lat, probe_lat = [], [], []
    for d in dirs:
        snap = _quiet_call(d, "status")
        samples = _quiet_call(d, "latency") or {}
        if snap is None:
            nodes.append({"data_dir": str(d), "reachable": False})
            continue
        status_lat += samples.get("status", [])
        probe_lat += samples.get("probe", [])
        nodes.append({
            "data_dir": str(d), "reachable": True, "peer_id": snap["peer_id"],
            "peers_seen": sorted(p["peer_id"] for p in snap["peers"] if p["last_seen_ago"] is not None),
            "peers_alive": snap["alive"], "connected": snap["connected"],
            "tasks": [t["task_id"] for t in snap["tasks"]],
            "delivered": snap["gossip"]["delivered"], "messages": snap["messages"],
        })
    everyone = {n["peer_id"] for n in nodes if n.get("reachable")}
    return {
        "peers": len(dirs), "elapsed_s": round(elapsed, 1),
        "all_peers_seen_by_all": all(set(n["peers_seen"]) | {n["peer_id"]} == everyone for n in nodes
                                     if n.get("reachable")) and len(everyone) == len(dirs),
        "task_known_by_all": all(n.get("tasks") for n in nodes),
        "delivery_latency_ms": {kind: _pcts(values) for kind, values in (("status", status_lat), ("probe", probe_lat))},
        "nodes": nodes,
    }


def _trust_report(dirs: list[Path], cheaters: dict[int, str], cheater_ids: dict[int, str]) -> dict:
    """Who banned each cheater, and how many of its rollouts the trainer trained on: read from the
    trainer's records.jsonl (every trained commitment is recorded there), not from logs."""
    snaps = [_quiet_call(d, "status") for d in dirs]
    honest = [i for i in range(len(dirs)) if i not in cheaters]
    trained = list(read_records(dirs[0], "rollout-trained"))
    versions = [r for r in read_records(dirs[0], "version-published")]
    rewards = [(r["version"], r["reward"]) for r in versions if "reward" in r]  # mean reward of each step's batches
    out = {"versions": {"reached": max((r["version"] for r in versions), default=0),
                        "reward_first": rewards[0][1] if rewards else None,
                        "reward_last": rewards[-1][1] if rewards else None,
                        "reward_by_version": dict(rewards)},
           "rollouts_trained": len(trained), "cheaters": {},
           "honest_banned": {f"peer{i}": [f"peer{j}" for j in honest if snaps[j] and snaps[i]
                                          and snaps[i]["peer_id"] in snaps[j]["banned"]] for i in honest}}
    for i, kind in sorted(cheaters.items()):
        pid = cheater_ids.get(i, "?")
        banned_by = [f"peer{j}" for j in honest if snaps[j] and pid in snaps[j]["banned"]]
        reasons = sorted({(snaps[j]["reputation"].get(pid) or {}).get("ban_reason", "") for j in honest
                          if snaps[j] and pid in snaps[j]["banned"]})
        out["cheaters"][f"peer{i}"] = {
            "peer_id": pid, "kind": kind, "banned_by": banned_by, "banned_by_all_honest": len(banned_by) == len(honest),
            "ban_reasons": reasons[:4], "rollouts_trained": sum(1 for r in trained if r.get("worker") == pid),
            "commitments": sum(1 for _ in read_records(dirs[i], "rollouts-committed"))}
    return out


def _trust_lines(trust: dict) -> list[str]:
    v = trust["versions"]
    lines = [f"versions reached {v['reached']}  reward first {v['reward_first']}  last {v['reward_last']}  "
             f"rollout batches trained on {trust['rollouts_trained']}"]
    for name, c in trust["cheaters"].items():
        lines.append(f"{name} ({c['kind']}): banned by {len(c['banned_by'])} honest peers {c['banned_by']}; "
                     f"{c['rollouts_trained']} of its {c['commitments']} batches trained on; {'; '.join(c['ban_reasons'])}")
    wrongly = {k: v for k, v in trust["honest_banned"].items() if v}
    lines.append(f"honest peers banned by honest peers: {wrongly or 'none'}")
    return lines


def _pcts(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(percentile(values, 50) * 1000, 2),
            "p90": round(percentile(values, 90) * 1000, 2), "p99": round(percentile(values, 99) * 1000, 2)}


if __name__ == "__main__":
    sys.exit(run_local(4, 20, None, Path("runs/local"), None))
