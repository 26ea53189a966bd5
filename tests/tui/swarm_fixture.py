"""A small in-memory swarm of real `PeerCore`s whose snapshots feed the TUI, as the control API would.

One trainer, three workers and one peer that sends garbage (so there are rejections and a ban).
Jobs are done by a deterministic fake executor whose reward rises with the version, so the reward
chart has something to draw. `FakeControl` answers `status` with the real `core.snapshot()` plus
the fields the runtime adds (pid, data_dir, host counters from a real `HostStats`), advances
virtual time by one second per call, and can be taken down to simulate a node that went away.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from gossip import topics
from gossip.identity import Identity
from node.control import ControlError
from node.p2p.stats import HostStats
from swarm import jobs
from swarm.core import CoreConfig, PeerCore
from swarm.io import LocalCommand
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet, fake_packed_version


def _h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def rising_jobs(peer, job):
    """Weights are b'w<version>'; the reward of version v is 0.1 + 0.05 v (capped at 1)."""
    p = job.payload
    if job.kind == jobs.INIT:
        return fake_packed_version(0, b"w0")
    if job.kind == jobs.GENERATE:
        blob = f"rollouts v{p.version} {p.prompt_indices} by {peer}".encode()
        reward = min(1.0, 0.1 + 0.05 * p.version)
        return True, jobs.GenerateResult(_h(blob), len(blob), 10 * len(p.prompt_indices), reward), "", {_h(blob): blob}
    if job.kind == jobs.VERIFY:  # every batch is honest here
        return True, jobs.VerifyResult(True, "ok", b""), "", {}
    if job.kind == jobs.TRAIN:
        blob = f"w{p.version + 1}".encode()
        stats = {"reward": min(1.0, 0.1 + 0.05 * p.version), "loss": 1.0 / (p.version + 2)}
        return fake_packed_version(p.version + 1, blob, stats)
    raise AssertionError(job.kind)


class LiveSwarm:
    def __init__(self, n_workers: int = 3) -> None:
        self.trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",)), seed=1)
        self.workers = [PeerCore(Identity(bytes([i + 2]) * 32), CoreConfig(roles=("worker",)), seed=i + 2)
                        for i in range(n_workers)]
        self.attacker = PeerCore(Identity(b"\x66" * 32), CoreConfig(roles=("relay",)), seed=66)
        self.cores = [self.trainer, *self.workers, self.attacker]
        self.net = MemoryNet(self.cores, T0)
        self.net.jobs = rising_jobs
        self.net.start()
        for c in self.cores[1:]:
            self.net.connect(self.trainer.peer_id, c.peer_id)
        self.net.run_for(3)
        t = task(trainer_keys=(self.trainer.identity.public_key,),
                 params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8})
        self.net.deliver(self.trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
        self.task_id = t.task_id
        self.net.run_for(8)
        self.lock = threading.Lock()

    def send_garbage(self, count: int = 3) -> None:
        """The attacker sends malformed status messages to the trainer (enough of them gets it banned)."""
        with self.lock:
            for i in range(count):
                self.net.inject(self.trainer.peer_id, topics.STATUS, b"\xc1" * (i + 1), self.attacker.peer_id)

    def status(self, core: PeerCore, data_dir: Path | str = "") -> dict:
        """What `swarm-node status --json` returns for this core."""
        snap = core.snapshot(self.net.now)
        stats = HostStats()
        for i, p in enumerate(snap["connected"]):
            stats.bytes_in[p] = 1000 * (i + 1)
            stats.bytes_out[p] = 4000 * (i + 1)
        snap.update(pid=4242, data_dir=str(data_dir),
                    host={"connected": snap["connected"], "stats": stats.snapshot(), "driver": {"jobs": 1}})
        return snap


class FakeControl:
    """`control.call` for the TUI's poller: data dir name 'peerN' is core N; `down` makes calls fail."""

    def __init__(self, live: LiveSwarm, advance: float = 1.0) -> None:
        self.live = live
        self.advance = advance
        self.down = False
        self.calls: list[str] = []

    def __call__(self, data_dir, cmd, args=None, timeout=10.0):
        name = Path(data_dir).name
        self.calls.append(name)
        if cmd != "status":
            raise ControlError(f"unexpected command {cmd}")
        if self.down:
            raise ControlError(f"the node for {data_dir} is not answering (Connection refused)")
        core = self.live.cores[int(name.removeprefix("peer"))]
        with self.live.lock:
            self.live.net.run_for(self.advance)
            return self.live.status(core, data_dir)
