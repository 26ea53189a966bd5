"""Prometheus exposition: parsed by the client library's own parser, values match the snapshot, a real
node is scraped on loopback only, and a crowd of scrapers is bounded."""

import socket
import threading
import time

import trio
from prometheus_client.parser import text_string_to_metric_families

from node import control
from node.config import NodeConfig
from node.metrics import render_metrics
from node.metrics_http import BoundedWSGIServer
from node.runtime import run_node
from swarm.stats import Buckets
from tests.tui.swarm_fixture import LiveSwarm
from tests.tui.test_model import ODD_SNAPSHOTS


def parse(text: str) -> dict[str, float]:
    """{'name{k="v",...}' (labels sorted): value}; every counter sample ends in _total, no series twice."""
    samples, names = {}, set()
    for family in text_string_to_metric_families(text):
        assert family.name not in names, f"family {family.name} twice"
        names.add(family.name)
        for s in family.samples:
            if family.type == "counter":
                assert s.name.endswith("_total"), s
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            key = f"{s.name}{{{labels}}}" if labels else s.name
            assert key not in samples, f"duplicate series {key}"
            samples[key] = s.value
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
    assert got["swarm_messages_kept_total"] == snap["messages"]["kept"]
    assert got["swarm_heartbeat_interval_seconds"] == snap["membership"]["interval"] > 0
    assert got["swarm_newcomers_alive"] == snap["membership"]["newcomers_alive"]
    assert got["swarm_links_cut_flooding_total"] == snap["flooding"]["links_cut"] == 0
    assert got["swarm_peers_connected"] == len(snap["connected"])
    assert got["swarm_peers_banned"] == 1
    assert got[f'swarm_policy_version{{task="{tid}"}}'] == snap["versions"][tid]
    trainer = snap["work"]["trainer"][tid]
    assert got[f'swarm_trainer_version{{task="{tid}"}}'] == trainer["version"]
    assert got[f'swarm_trainer_trained_commitments_total{{task="{tid}"}}'] == trainer["trained_commitments"]
    assert got[f'swarm_trainer_takeovers_total{{task="{tid}"}}'] == 0
    assert got[f'swarm_trainer_last_reward{{task="{tid}"}}'] == trainer["history"][-1]["reward"]
    active = next(t for t in snap["tasks"] if t["task_id"] == tid)["trainer_chain"]["active"]
    assert got[f'swarm_trainer_chain_version{{task="{tid}"}}'] == active["version"]
    assert got[f'swarm_trainer_chain_term{{task="{tid}"}}'] == active["term"]
    status_topic = snap["gossip"]["topics"]["swarm/1/status"]
    assert got['swarm_topic_messages_total{kind="rejected",topic="swarm/1/status"}'] == status_topic["rejected"]
    assert got["swarm_weight_bytes_served_total"] == snap["weight_bytes"]["served"] > 0
    delivered = snap["gossip"]["latency_histogram"]["status"]["count"]
    assert got['swarm_gossip_delivery_seconds_count{kind="status"}'] == delivered > 0
    assert got['swarm_gossip_delivery_seconds_bucket{kind="status",le="+Inf"}'] == delivered
    worker_snap = live.status(live.workers[0])
    worker = parse(render_metrics(worker_snap))
    assert worker[f'swarm_worker_commitments_total{{task="{tid}"}}'] > 0
    summary = next(t for t in worker_snap["tasks"] if t["task_id"] == tid)["summary"]  # the trainer's
    assert worker[f'swarm_task_summary_workers{{task="{tid}"}}'] == summary["workers"]
    assert worker[f'swarm_task_summary_trainers_alive{{task="{tid}"}}'] == summary["trainers_alive"] == 1
    assert worker["swarm_weight_bytes_received_total"] > 0


def test_histograms_from_node_buckets():
    b = Buckets((0.1, 1.0))
    for value in (0.05, 0.5, 0.5, 7.0, -1.0):
        b.observe(value)
    assert b.snapshot() == {"buckets": [[0.1, 2], [1.0, 4]], "sum": 8.05, "count": 5}
    snap = {"host": {"request_seconds": {"/swarm/shard/1": b.snapshot()}},
            "jobs": {"seconds": {"train": b.snapshot(), "bad": {"buckets": [["x", 1]], "sum": 0, "count": 1}}}}
    got = parse(render_metrics(snap))
    assert got['swarm_request_duration_seconds_bucket{le="0.1",protocol="/swarm/shard/1"}'] == 2
    assert got['swarm_request_duration_seconds_bucket{le="+Inf",protocol="/swarm/shard/1"}'] == 5
    assert got['swarm_job_duration_seconds_sum{kind="train"}'] == 8.05
    assert not any('kind="bad"' in key for key in got)  # a malformed histogram is left out, not a crash


def test_labels_are_escaped_and_odd_snapshots_render():
    text = render_metrics({"messages": {"accepted": 1, "rejected": {'we"ird\\reason\n': 2}}})
    assert parse(text)['swarm_messages_rejected_total{reason="we"ird\\reason\n"}'] == 2
    for snap in ODD_SNAPSHOTS:
        parse(render_metrics(snap))
    # a work field that would clash with a series of another type is left out, not emitted twice
    parse(render_metrics({"work": {"trainer": {"t": {"version": 1}}, "trainer_version": {"t": {"x": 2}}}}))


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
        assert any(key.startswith("swarm_build_info{") for key in got)
        head, _ = await trio.to_thread.run_sync(_scrape, port, "/other")
        assert head.startswith("HTTP/1.0 404")
        listening = [s for s in (await trio.to_thread.run_sync(_listeners, port))]
        assert listening and all(addr == "127.0.0.1" for addr in listening), listening
        # 30 scrapes at once: each is answered (200, or 503 beyond the 4 served at once) and the node goes on
        codes = await trio.to_thread.run_sync(_crowd, port, 30)
        assert set(codes) <= {"200", "503", "ConnectionResetError"} and "200" in codes, codes
        assert (await trio.to_thread.run_sync(control.call, tmp_path / "n0", "status"))["peer_id"]
        await trio.to_thread.run_sync(control.call, tmp_path / "n0", "stop")


def _crowd(port: int, n: int) -> list[str]:
    codes: list[str] = []

    def one():
        try:
            codes.append(_scrape(port)[0].split(" ")[1])
        except OSError as exc:
            codes.append(type(exc).__name__)
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return codes


def test_many_scrapers_are_bounded():
    """40 idle connections (clients that never send a request) and 20 real scrapes at once: at most
    `max_active` request threads ever run, the rest get 503 at once, the idle ones are dropped after
    the timeout, and a scrape afterwards is answered."""
    calls = []

    def app(environ, start_response):
        calls.append(1)
        time.sleep(0.05)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"swarm_up 1\n"]

    server = BoundedWSGIServer(("127.0.0.1", 0), max_active=3, timeout=0.5)
    server.set_app(app)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    peak = [0]
    stop = threading.Event()

    def watch():  # the server's request threads alive at once
        while not stop.is_set():
            serving = sum("process_request_thread" in t.name for t in threading.enumerate())
            peak[0] = max(peak[0], serving)
            time.sleep(0.005)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
    results = []

    def scrape():
        try:
            results.append(_scrape(port)[0].split(" ")[1])
        except OSError as exc:
            results.append(type(exc).__name__)
    scrapers = [threading.Thread(target=scrape) for _ in range(20)]
    for t in scrapers:
        t.start()
    for t in scrapers:
        t.join(timeout=10)
    for sock in idle:
        sock.close()
    time.sleep(0.7)  # idle connections time out
    assert _scrape(port)[0].startswith("HTTP/1.0 200")
    stop.set()
    watcher.join()
    server.shutdown()
    server.server_close()
    assert 1 <= peak[0] <= 3, peak
    # every scraper got an answer at once: 200, or 503 (a reset if the 503 raced its request), none hung
    assert len(results) == 20 and set(results) <= {"200", "503", "ConnectionResetError"}, results
    assert server.refused >= 37 and results.count("503") >= 1


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
