"""A real Prometheus server scrapes two real node processes and answers a `swarm_` counter back.

Prometheus is Debian's `prometheus` package: the fixture installs it when it is missing and this
process may (root, apt-get), and otherwise skips with the reason. Every process started is stopped
by PID with bounded waits.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from node import control
from node.procs import start_peer, stop_processes
from tests.node.helpers import wait_for

pytestmark = pytest.mark.slow
FAST = ["--heartbeat-interval", "0.5", "--gone-after", "3"]


@pytest.fixture(scope="module")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "prometheus"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        path = shutil.which("prometheus")
    if path is None:
        pytest.skip("no `prometheus` binary, and `apt-get install -y prometheus` was not possible here "
                    "(needs root and Debian's package index)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_every_peer(tmp_path, prometheus_bin):
    dirs = [tmp_path / f"p{i}" for i in range(2)]
    metrics = [_free_port(), _free_port()]
    procs: list = []
    prom = None
    try:
        proc, boot = start_peer(["--bootstrap", "--data-dir", str(dirs[0]), "--metrics-port", str(metrics[0]), *FAST,
                                 "--roles", "worker"],
                                dirs[0] / "log")
        procs.append(proc)
        proc, _ = start_peer(["--join", boot, "--data-dir", str(dirs[1]), "--metrics-port", str(metrics[1]), *FAST,
                              "--roles", "worker"],
                             dirs[1] / "log")
        procs.append(proc)
        web = _free_port()
        config = tmp_path / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in metrics)
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          f"scrape_configs:\n  - job_name: swarm\n    static_configs:\n      - targets: [{targets}]\n")
        with open(tmp_path / "prometheus.log", "wb") as log:
            prom = subprocess.Popen([prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        ids = [control.call(d, "status")["peer_id"] for d in dirs]
        wait_for(lambda: ids[1] in control.call(dirs[0], "status")["alive"], 20, "peer0 to see peer1")

        def counted():  # each node has accepted the other's heartbeats (workers: relays gossip none), as scraped
            try:
                rows = _query(web, "swarm_messages_accepted_total")
            except OSError:  # Prometheus still starting
                return None
            return rows if len(rows) == 2 and all(float(r["value"][1]) > 0 for r in rows) else None
        rows = wait_for(counted, 20, "Prometheus to scrape swarm_messages_accepted_total from both peers", step=0.5)
        assert {r["metric"]["instance"] for r in rows} == {f"127.0.0.1:{p}" for p in metrics}
        assert {r["metric"]["job"] for r in rows} == {"swarm"}
        up = _query(web, 'up{job="swarm"}')
        assert len(up) == 2 and all(r["value"][1] == "1" for r in up), up
        info = _query(web, "swarm_build_info")
        assert len(info) == 2 and all(r["metric"]["protocol"] == "1.0" for r in info), info
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(timeout=5)
        stop_processes(procs)
