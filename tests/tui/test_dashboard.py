"""docs/grafana/swarm.json: valid, every panel queries something, and every series its PromQL names
is in a real scrape (a live in-memory swarm's trainer and worker, served over HTTP by the node's
metrics server)."""

import json
import re
import threading
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from node.metrics_http import BoundedWSGIServer, metrics_app
from tests.tui.swarm_fixture import LiveSwarm

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "swarm.json"
SERIES = re.compile(r"\bswarm_[A-Za-z0-9_]+")


def _scraped_names(snapshots: list[dict]) -> set[str]:
    names = set()
    for snap in snapshots:
        server = BoundedWSGIServer(("127.0.0.1", 0))
        server.set_app(metrics_app(lambda snap=snap: snap))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10) as r:
                text = r.read().decode()
        finally:
            server.shutdown()
            server.server_close()
        names |= {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    return names


def test_dashboard_names_only_series_a_scrape_has():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    assert dash["panels"] and all(p["targets"] for p in dash["panels"])
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("peers", "verdict", "bans", "version", "reward", "takeover", "weight bytes"):
        assert topic in titles, topic
    used = {name for e in exprs for name in SERIES.findall(e)}
    live = LiveSwarm()
    live.send_garbage(10)
    scraped = _scraped_names([live.status(live.trainer), live.status(live.workers[0])])
    assert used and used <= scraped, sorted(used - scraped)
