"""Runs the core's `RunJob` effects in one persistent child process, one job at a time, in order.

Why a process and not a thread: torch work holds the GIL for long stretches and would stall the
trio loop (gossip validation, heartbeats); a separate process also keeps models cached between jobs
and can be killed and restarted if it dies. Why only one: the machine has two cores shared by
several peers, and each torch process uses one thread (OMP_WAIT_POLICY=PASSIVE, else idle OpenMP
threads spin and everything slows about 10x).

    runner = JobRunner(blob_dir, state_dir, driver.feed)
    await nursery.start(runner.run)      # child started; jobs may be submitted now
    runner.submit(run_job)               # sync, never blocks; the result comes back through feed()

Results are read from the pipe in a worker thread and fed to the core on the trio thread as
`JobFinished(job_id, ok, result, error)`. If the child dies, the job it was running and every
queued job fail with a clear error, and a fresh child is started. On cancellation the child is
terminated by PID (SIGTERM, then SIGKILL) within `STOP_GRACE` seconds.

Child -> parent messages: ("ready", torch threads), ("progress", job_id, fields), ("done", job_id, ok, result, error),
("fatal", message) when the child cannot start (e.g. torch missing).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from collections import deque
from pathlib import Path
from typing import Callable

import trio

from node.procs import die_with_parent
from swarm.io import JobFinished, RunJob
from swarm.stats import JOB_BOUNDS, Buckets

MAX_QUEUE = 64
STOP_GRACE = 3.0
POLITE_STOP = 1.0  # how long a child gets to finish its job, write a trainer's state and exit before SIGTERM
POLL = 0.2  # how often the reading thread checks whether it should give up
RESTART_BACKOFF = (0.5, 10.0)  # first and longest delay before restarting a child that keeps dying


class JobRunner:
    def __init__(self, blob_dir: Path, state_dir: Path, feed: Callable[[JobFinished], object], *,
                 max_queue: int = MAX_QUEUE, log: Callable[..., None] | None = None, malicious: str = "",
                 threads: int = 1, device: str = "cpu", inference: str = "torch") -> None:
        self.blob_dir, self.state_dir = Path(blob_dir), Path(state_dir)
        self.inference = inference  # what generates rollouts in the child: "torch" or "vllm" (one engine, kept up)
        self.threads = threads  # torch threads in the child (see child_main)
        self.device = device  # where the child's models run: "cpu" or a CUDA device
        self.malicious = malicious  # demonstrations and tests: the child's jobs cheat (a trainer/cheats.py Cheater)
        self.feed = feed
        self.log = log or (lambda event, **fields: None)
        self.max_queue = max_queue
        self._queue: deque[RunJob] = deque()
        self._wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._proc = None
        self._conn = None
        self.current: RunJob | None = None
        self.current_progress: dict = {}  # the running job's newest progress fields (status shows them)
        self.current_since: float | None = None  # trio time the running job was sent
        self.restarts = 0
        self.fatal = ""  # why the child could not start, if it said so
        self.seconds: dict[str, Buckets] = {}  # job kind -> wall time of its answered jobs (metrics)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def status(self) -> dict | None:
        """The job running now: kind, seconds since it was sent, its newest progress; None when idle."""
        job = self.current
        if job is None or self.current_since is None:
            return None
        return {"kind": job.kind, "job_id": job.job_id, "seconds": round(trio.current_time() - self.current_since, 1),
                "progress": dict(self.current_progress)}

    def submit(self, job: RunJob) -> None:
        """Queue a job (called from the trio thread, inside the core's effect handling: never feeds
        the core directly, so a refusal is fed from a separate task)."""
        if self._nursery is None:
            raise RuntimeError("JobRunner.submit before run() started")
        if len(self._queue) >= self.max_queue:
            self._nursery.start_soon(self._feed, JobFinished(job.job_id, False, None, "job queue full"))
            return
        self._queue.append(job)
        self._wakeup.set()

    async def _feed(self, done: JobFinished) -> None:
        self.feed(done)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                self._start_child()
                task_status.started()
                await self._serve()
            finally:
                self._nursery = None
                with trio.CancelScope(shield=True):
                    await self._stop_child()

    # ---------------------------------------------------------------- the loop

    async def _serve(self) -> None:
        backoff = RESTART_BACKOFF[0]
        while True:
            while not self._queue:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
            job = self._queue.popleft()
            self.current = job
            try:
                outcome = await self._run_one(job)
            finally:
                self.current = None
            if outcome is not None:
                backoff = RESTART_BACKOFF[0]
                self.feed(outcome)
                continue
            # the child died: fail this job and everything queued behind it, then start a new one.
            # Its pipe closes a moment before it can be reaped: wait (bounded) for the exit status.
            code = await self._exit_status()
            error = (f"job process died ({_describe_exit(code)}) before finishing {job.kind} job {job.job_id}; "
                     f"it is being restarted{': ' + self.fatal if self.fatal else ''}")
            failed = [job] + list(self._queue)
            self._queue.clear()
            self.log("job-process-died", exit=str(code), failed=len(failed), fatal=self.fatal)
            for j in failed:
                self.feed(JobFinished(j.job_id, False, None, error if j is job else
                                      f"job process died before this {j.kind} job ran ({_describe_exit(code)})"))
            await self._stop_child()
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RESTART_BACKOFF[1])
            self.restarts += 1
            self._start_child()

    async def _run_one(self, job: RunJob) -> JobFinished | None:
        """Send one job and wait for its answer; None if the child died first."""
        started = self.current_since = trio.current_time()
        self.current_progress = {}
        try:
            self._conn.send((job.job_id, job.kind, job.payload))
        except (OSError, EOFError, ValueError):
            return None
        except Exception as exc:  # the payload could not be pickled: the job's fault, not the child's
            return JobFinished(job.job_id, False, None, f"{job.kind} job could not be sent: {exc}")
        while True:
            msg = await trio.to_thread.run_sync(self._recv, abandon_on_cancel=True)
            if msg is None:
                return None
            tag = msg[0]
            if tag == "progress" and msg[1] == job.job_id:
                self.current_progress = dict(msg[2])
                self.log("job-progress", job=job.job_id, kind=job.kind, **dict(msg[2]))
            elif tag == "done" and msg[1] == job.job_id:
                _, _, ok, result, error = msg
                hist = self.seconds.get(job.kind)
                if hist is None:  # the few kinds of swarm/jobs.py
                    hist = self.seconds[job.kind] = Buckets(JOB_BOUNDS)
                hist.observe(trio.current_time() - started)
                return JobFinished(job.job_id, bool(ok), result, str(error))
            elif tag == "fatal":
                self.fatal = str(msg[1])
            elif tag == "ready":  # said once per child, before its first job's answer
                self.log("job-process-ready", threads=msg[1] if len(msg) > 1 else None)

    def _recv(self):
        """Blocking read in a worker thread; None when the child is gone."""
        conn, proc = self._conn, self._proc
        while True:
            try:
                if conn.poll(POLL):
                    return conn.recv()
            except (EOFError, OSError):
                return None
            except Exception:  # an unpicklable answer: treat the child as broken
                return None
            if proc is None or not proc.is_alive():
                try:
                    if conn.poll(0):
                        return conn.recv()
                except (EOFError, OSError):
                    pass
                return None

    # ---------------------------------------------------------------- the child

    def _start_child(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        self.fatal = ""
        proc = ctx.Process(target=child_main, args=(child, str(self.blob_dir), str(self.state_dir), self.malicious,
                                                        self.threads, self.device, self.inference),
                           name="swarm-jobs", daemon=True)
        proc.start()
        child.close()  # our copy of the child's end: its death must give us EOF
        self._proc, self._conn = proc, parent
        self.log("job-process-started", pid=proc.pid)

    async def _exit_status(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        with trio.move_on_after(STOP_GRACE):
            while proc.is_alive():
                await trio.sleep(0.02)
        return proc.exitcode

    async def _stop_child(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if proc.is_alive():
            try:
                conn.send(None)  # a polite stop between jobs
            except Exception:
                pass
            with trio.move_on_after(POLITE_STOP):
                while proc.is_alive():
                    await trio.sleep(0.02)
        if proc.is_alive():
            _signal(proc.pid, signal.SIGTERM)
            with trio.move_on_after(STOP_GRACE):
                while proc.is_alive():
                    await trio.sleep(0.05)
        if proc.is_alive():
            _signal(proc.pid, signal.SIGKILL)
            with trio.move_on_after(STOP_GRACE):
                while proc.is_alive():
                    await trio.sleep(0.05)
        proc.join(timeout=0)
        conn.close()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _describe_exit(code) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def child_main(conn, blob_dir: str, state_dir: str, malicious: str = "", threads: int = 1,
               device: str = "cpu", inference: str = "torch") -> None:
    """The job process: `threads` torch threads (one unless the operator gave the peer more),
    passive OpenMP waits, models on `device`, one JobWorker for its lifetime; with `inference`
    "vllm", its generate jobs run on one vLLM engine inside this process (trainer/inference_vllm.py)."""
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent stops us
    # A peer that is killed outright takes its job process with it, at once and quietly: nobody is
    # left to read a result, and the peer's next start runs a new one. (An orderly stop still goes
    # through JobRunner's polite stop, which lets a trainer save its moments.)
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None:
        die_with_parent(parent.pid, signal.SIGKILL)
        from trainer import crashpoints

        if crashpoints.armed():  # crash tests (SWARM_CRASH_AT): a crash here is the machine's, the node's too
            crashpoints.take_along(parent.pid)
    try:
        import torch

        torch.set_num_threads(threads)
        from trainer.jobs import SAVE_EVERY, JobError, JobWorker
        # transformers imports its model classes lazily: about 15 s on a busy 2-core machine, paid
        # here while the peer joins instead of inside its first generate or verify job
        from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: F401
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"--job-device {device}, but this torch ({torch.__version__}) sees no CUDA GPU; "
                               "use --job-device cpu, or install a CUDA build of torch")
        torch.empty(0, device=device)  # a device that does not exist (cuda:7 on one GPU) fails here
        if inference == "vllm":
            from trainer.inference_vllm import require_vllm

            require_vllm()  # not installed: say what to install now, not in the first generate job
    except BaseException as exc:
        conn.send(("fatal", f"the job process cannot start: {type(exc).__name__}: {exc}"))
        raise SystemExit(3)
    current = {"id": None}
    cheat = None
    if malicious:  # demonstrations and tests only
        from trainer.cheats import Cheater

        cheat = Cheater(malicious)
    worker = JobWorker(Path(blob_dir), Path(state_dir), defer_saves=True, cheat=cheat, device=device,
                       inference=inference, save_every=SAVE_EVERY,
                       progress=lambda fields: conn.send(("progress", current["id"], dict(fields))))
    conn.send(("ready", torch.get_num_threads()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None  # the parent is gone
        if msg is None:
            try:
                worker.close()  # a trainer's master weights and moments since its last periodic save
            except Exception:
                traceback.print_exc()
            return
        job_id, kind, payload = msg
        current["id"] = job_id
        try:
            result = worker.run(kind, payload)
            answer = ("done", job_id, True, result, "")
        except JobError as exc:
            answer = ("done", job_id, False, None, str(exc))
        except MemoryError:
            answer = ("done", job_id, False, None, f"{kind} job ran out of memory")
        except Exception as exc:  # a bug: report it with the place it happened, keep serving
            where = traceback.extract_tb(exc.__traceback__)[-1]
            answer = ("done", job_id, False, None, f"{kind} job failed: {type(exc).__name__}: {exc} "
                      f"(at {Path(where.filename).name}:{where.lineno})")
            traceback.print_exc()
        try:
            conn.send(answer)
        except Exception as exc:  # an unpicklable result
            conn.send(("done", job_id, False, None, f"{kind} job result could not be sent: {exc}"))
        try:  # e.g. a trainer's optimizer moments: written while the core publishes the version
            worker.flush()
        except Exception:  # the answer is out; the next job's own flush finds nothing left to retry
            traceback.print_exc()

