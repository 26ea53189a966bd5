"""What a node is told to be: one frozen config, built from CLI flags and a TOML file (node/config_file.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROLES = ("relay", "worker", "trainer", "validator", "mirror", "leech")


@dataclass(frozen=True)
class NodeConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    bootstrap: bool = False
    join: tuple[str, ...] = ()
    roles: tuple[str, ...] = ("relay",)
    heartbeat_interval: float = 2.0
    gone_after: float = 10.0
    target_connections: int = 8
    log_format: str = "text"
    metrics_port: int | None = None  # Prometheus text on 127.0.0.1:metrics_port; None: off
    malicious: str = ""  # demonstrations and tests: the job process cheats this way (swarm.jobs.MALICIOUS)
    upload_mbps: float | None = None  # emulated uplink for shard answers (node/uplink.py); None: off
    job_threads: int = 1  # torch threads of the train/generate job process (verify jobs keep one)
    job_device: str = "cpu"  # where the job processes run models: "cpu", "cuda" or "cuda:N"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}; roles are {', '.join(ROLES)}")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be 0..65535 (0: the OS picks)")
        if self.heartbeat_interval <= 0 or self.gone_after <= self.heartbeat_interval:
            raise ValueError("need 0 < heartbeat_interval < gone_after")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ValueError("metrics_port must be 1..65535")
        if not 1 <= self.job_threads <= 256:
            raise ValueError("job_threads must be 1..256")
        if not valid_device(self.job_device):
            raise ValueError(f"job_device must be cpu, cuda or cuda:N, got {self.job_device!r}")
        if self.upload_mbps is not None and not self.upload_mbps > 0:
            raise ValueError("upload_mbps must be positive (or unset: no emulated uplink)")
        if self.malicious:
            from swarm.jobs import MALICIOUS
            if self.malicious not in MALICIOUS:
                raise ValueError(f"unknown malicious kind {self.malicious!r}; kinds are {', '.join(MALICIOUS)}")


def valid_device(name: str) -> bool:
    """"cpu", "cuda" or "cuda:N": checked here, without torch; whether the GPU exists is the job
    process's to say (it reports a clear error when it cannot start)."""
    return isinstance(name, str) and (name in ("cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()))
