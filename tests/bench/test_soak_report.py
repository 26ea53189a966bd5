"""bench/soak_report.py: growth per hour by least squares, per process lifetime, and the 5%/h target."""

from bench.soak_report import growth, slope_per_hour, verdict


def _series(peer, pid, values_at, start=0.0, step=60.0, n=40):
    return [{"t": start + i * step, "peer": peer, "pid": pid, "values": values_at(i * step)} for i in range(n)]


def test_slope_is_per_hour_and_needs_three_points():
    assert slope_per_hour([(0, 100.0), (1800, 110.0), (3600, 120.0)]) == 20.0
    assert slope_per_hour([(0, 1.0), (10, 2.0)]) is None
    assert slope_per_hour([(5, 1.0), (5, 2.0), (5, 3.0)]) is None


def test_a_flat_process_meets_the_target_and_a_leaking_one_misses_it():
    flat = _series("peer1", 11, lambda t: {"node_rss_mb": 200.0 + (t % 120) / 60, "node_fds": 40})
    leak = _series("peer2", 12, lambda t: {"node_rss_mb": 200.0 + t / 3600 * 30, "node_fds": 40})  # +30 MB/h
    report = growth(flat + leak, warmup=300)
    assert abs(report["peer1"]["growth"]["node_rss_mb"]["pct_per_hour"]) < 1
    assert 10 < report["peer2"]["growth"]["node_rss_mb"]["pct_per_hour"] < 16
    result = verdict(report)
    assert not result["met"]
    assert [o["what"] for o in result["over"]] == ["peer2.node_rss_mb"]
    assert verdict(growth(flat, warmup=300))["met"]


def test_a_restart_starts_a_new_series_and_the_warmup_is_left_out():
    # the first life leaks fast and is cut short by a kill; the second, longer one is flat after a
    # warm-up in which it climbs: neither the restart's drop nor the climb counts as growth
    first = _series("peer3", 1, lambda t: {"node_rss_mb": 100.0 + t}, n=10)
    second = _series("peer3", 2, lambda t: {"node_rss_mb": 300.0 if t >= 600 else 100.0 + t / 3}, start=700, n=50)
    report = growth(first + second, warmup=600)
    entry = report["peer3"]
    assert entry["lifetimes"] == 2 and entry["pid"] == 2
    assert entry["growth"]["node_rss_mb"]["pct_per_hour"] == 0
    assert entry["max"]["node_rss_mb"] == 640.0  # the largest value any lifetime reached


def test_nothing_judged_is_not_a_pass():
    short = _series("peer4", 5, lambda t: {"node_rss_mb": 100.0}, n=5)
    assert not verdict(growth(short, warmup=0))["met"]


def test_a_takeover_starts_a_new_series_with_its_own_warmup():
    # a standby's job process steps up once when it takes over and starts training: judged per phase,
    # that step is neither growth of the standby phase nor of the active one
    def values(t):
        return {"job_rss_mb": 500.0 if t < 1800 else 900.0, "node_rss_mb": 110.0}
    samples = _series("peer1", 7, values, n=60)
    for s in samples:
        s["phase"] = "standby" if s["t"] < 1800 else "active"
    entry = growth(samples, warmup=300)["peer1"]
    assert entry["lifetimes"] == 1 and entry["series"] == 2
    assert entry["growth"]["job_rss_mb"]["pct_per_hour"] == 0 and entry["max"]["job_rss_mb"] == 900.0
    assert verdict(growth(samples, warmup=300))["met"]
    for s in samples:  # the same samples read as one series: the step is a leak
        del s["phase"]
    assert not verdict(growth(samples, warmup=300))["met"]


def test_every_long_enough_series_is_judged_not_only_the_longest():
    # the standby phase is the longer series and flat; the active one leaks: the verdict must see it
    samples = _series("peer1", 7, lambda t: {"node_rss_mb": 100.0 if t < 2400 else 100.0 + (t - 2400) / 3600 * 20},
                      n=70)
    for s in samples:
        s["phase"] = "standby" if s["t"] < 2400 else "active"
    report = growth(samples, warmup=300)
    assert report["peer1"]["phase"] == "standby" and len(report["peer1"]["judged"]) == 2
    result = verdict(report)
    assert not result["met"] and [o["what"] for o in result["over"]] == ["peer1.node_rss_mb (active, pid 7)"]
