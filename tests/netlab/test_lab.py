"""The lab itself: public peers reach each other, a NATed peer dials out but cannot be dialled,
and tc tbf holds a link to its configured rate (plain sockets, no swarm code)."""

from __future__ import annotations

from netlab.probe import Listener, can_connect, transfer_mbps
from tests.netlab.conftest import add_nat_or_skip


def test_public_peers_reach_each_other(lab):
    a, b = lab.add_peer("a"), lab.add_peer("b")
    with Listener(b.ns, b.ip) as on_b, Listener(a.ns, a.ip) as on_a:
        assert can_connect(a.ns, b.ip, on_b.port)
        assert can_connect(b.ns, a.ip, on_a.port)
        assert on_b.seen(1) == [a.ip] and on_a.seen(1) == [b.ip]


def test_natted_peer_dials_out_but_cannot_be_dialled(lab):
    pub = lab.add_peer("pub")
    router = add_nat_or_skip(lab, "home")
    natted = lab.add_peer("natted", nat="home")
    with Listener(pub.ns, pub.ip) as on_pub, Listener(natted.ns, natted.ip) as on_natted:
        assert can_connect(natted.ns, pub.ip, on_pub.port)
        assert on_pub.seen(1) == [router.wan_ip], "outbound connections leave masqueraded as the router"
        # Inbound: the private address is not routed from outside, and the router's own address
        # does not forward (or answer) a connection nobody inside opened.
        assert not can_connect(pub.ns, natted.ip, on_natted.port, timeout=1.0)
        assert not can_connect(pub.ns, router.wan_ip, on_natted.port, timeout=1.0)
        # Even a public peer that routes the private subnet through the router is dropped by its firewall.
        lab.exec(pub.ns, ["ip", "route", "add", f"{router.lan_net}.0/24", "via", router.wan_ip])
        assert not can_connect(pub.ns, natted.ip, on_natted.port, timeout=1.0)
        assert on_natted.seen(1, timeout=0.5) == []
        assert can_connect(natted.ns, pub.ip, on_pub.port), "outbound still works"


def test_tbf_limits_uplink_and_downlink(lab):
    rate = 16.0
    up = lab.add_peer("up", up_mbps=rate)
    down = lab.add_peer("down", down_mbps=rate)
    free = lab.add_peer("free")
    size = 4_000_000  # 2 s at 16 Mbit/s
    measured_up = transfer_mbps(up.ns, free.ns, free.ip, size)
    measured_down = transfer_mbps(free.ns, down.ns, down.ip, size)
    unshaped = transfer_mbps(free.ns, up.ns, up.ip, size)  # up's downlink is not shaped
    assert abs(measured_up - rate) / rate < 0.25, f"uplink {measured_up:.1f} Mbit/s, configured {rate}"
    assert abs(measured_down - rate) / rate < 0.25, f"downlink {measured_down:.1f} Mbit/s, configured {rate}"
    assert unshaped > 3 * rate, f"an unshaped link ({unshaped:.0f} Mbit/s) must be far faster than the limit"


def test_a_stale_lab_is_cleaned_and_a_live_one_left_alone(lab):
    import subprocess

    from netlab.lab import STATE_DIR, clean_stale
    from netlab.tools import run

    dead = subprocess.Popen(["true"])
    dead.wait(5)
    key = "swlab-0dead0"  # a lab whose owner (a finished process) is gone
    (STATE_DIR / key).write_text(str(dead.pid))
    run(["ip", "netns", "add", f"{key}-x"])
    try:
        removed = clean_stale()
        assert f"{key}-x" in removed and not (STATE_DIR / key).exists()
        assert not [ns for ns in removed if ns.startswith(lab.key)], "the live lab was left alone"
        assert f"{lab.key}-core" in run(["ip", "netns", "list"])
    finally:
        run(["ip", "netns", "del", f"{key}-x"], check=False)
