"""Prometheus exposition: format checked line by line, values match the snapshot, a real node is scraped."""

import re
import socket

import trio

from node import control
from node.config import NodeConfig
from node.metrics import render_metrics
from node.runtime import run_node
from tests.tui.swarm_fixture import LiveSwarm
from tests.tui.test_model import ODD_SNAPSHOTS

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.]+(?:e[-+]?[0-9]+)?)$')


def parse(text: str) -> dict[str, float]:
    """Check the exposition format strictly; return {'name{labels}': value}."""
    assert text.endswith("\n")
    typed, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in typed, f"TYPE twice for {name}"
            assert kind in ("counter", "gauge")
            typed[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE.match(line)
            assert m, f"not a valid sample line: {line!r}"
            assert m.group(1) in typed, f"sample before its TYPE: {line!r}"
            if typed[m.group(1)] == "counter":
                assert m.group(1).endswith("_total"), line
            key = line.rsplit(" ", 1)[0]
            assert key not in samples, f"duplicate series {key}"
            samples[key] = float(m.group(4))
    return samples


def test_metrics_match_a_real_snapshot():
    live = LiveSwarm()
    live.send_garbage(10)
    snap = live.status(live.trainer)
    got = parse(render_metrics(snap))
    tid = live.task_id
    assert got["swarm_messages_accepted_total"] == snap["messages"]["accepted"]
    assert got['swarm_messages_rejected_total{reason="malformed"}'] == snap["messages"]["rejected"]["malformed"]
    assert got['swarm_peers{state="alive"}'] == len(snap["alive"])
    assert got["swarm_peers_connected"] == len(snap["connected"])
    assert got["swarm_peers_banned"] == 1
    assert got[f'swarm_policy_version{{task="{tid}"}}'] == snap["versions"][tid]
    trainer = snap["work"]["trainer"][tid]
    assert got[f'swarm_trainer_version{{task="{tid}"}}'] == trainer["version"]
    assert got[f'swarm_trainer_trained_commitments_total{{task="{tid}"}}'] == trainer["trained_commitments"]
    assert got[f'swarm_trainer_last_reward{{task="{tid}"}}'] == trainer["history"][-1]["reward"]
    status_topic = snap["gossip"]["topics"]["swarm/1/status"]
    assert got['swarm_topic_messages_total{topic="swarm/1/status",kind="rejected"}'] == status_topic["rejected"]
    worker = parse(render_metrics(live.status(live.workers[0])))
    assert worker[f'swarm_worker_commitments_total{{task="{tid}"}}'] > 0


def test_labels_are_escaped_and_odd_snapshots_render():
    text = render_metrics({"messages": {"accepted": 1, "rejected": {'we"ird\\reason\n': 2}}})
    assert parse(text)['swarm_messages_rejected_total{reason="we\\"ird\\\\reason\\n"}'] == 2
    for snap in ODD_SNAPSHOTS:
        parse(render_metrics(snap))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        buf = b""
        while chunk := sock.recv(65536):
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


async def test_a_running_node_serves_metrics_on_loopback_only(tmp_path):
    port = _free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(run_node, NodeConfig(data_dir=tmp_path / "n0", heartbeat_interval=0.5, gone_after=3.0,
                                                 metrics_port=port))
        head, body = await trio.to_thread.run_sync(_scrape, port)
        assert head.startswith("HTTP/1.0 200") and "text/plain; version=0.0.4" in head
        got = parse(body)
        snap = await trio.to_thread.run_sync(control.call, tmp_path / "n0", "status")
        assert got["swarm_peers_connected"] == 0 and got["swarm_tasks"] == len(snap["tasks"])
        assert "swarm_uptime_seconds" in got and "swarm_messages_accepted_total" in got
        head, _ = await trio.to_thread.run_sync(_scrape, port, "/other")
        assert head.startswith("HTTP/1.0 404")
        listening = [s for s in (await trio.to_thread.run_sync(_listeners, port))]
        assert listening and all(addr == "127.0.0.1" for addr in listening), listening
        await trio.to_thread.run_sync(control.call, tmp_path / "n0", "stop")


def _listeners(port: int) -> list[str]:
    """Local addresses listening on `port`, from /proc/net/tcp{,6} (state 0A = LISTEN)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr_hex, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:
                found.append(socket.inet_ntoa(bytes.fromhex(addr_hex)[::-1]) if len(addr_hex) == 8 else addr_hex)
    return found
