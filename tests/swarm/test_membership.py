"""Membership's heap-driven sweep and counted links give what a scan of the whole table gives."""

from __future__ import annotations

import copy

from gossip.errors import Rejected
from gossip.messages import PeerAddrs, StatusHeartbeat
from swarm.io import Disconnect, Emit
from swarm.membership import ALIVE, GONE, Membership, MembershipConfig
from swarm.rng import Rng


def reference_sweep(m: Membership, now: float) -> list:
    """The table scan `sweep()` replaced, kept here as the specification."""
    effects: list = []
    for peer in sorted(m.peers):
        info = m.peers[peer]
        if info.state == ALIVE and info.last_seen is not None and now - info.last_seen > m.gone_threshold(info):
            info.state = GONE
            info.next_dial = now + m.config.dial_backoff
            effects.append(Emit("peer-gone", {"peer": peer, "silent_for": round(now - info.last_seen, 3)}))
            if info.connected:
                effects.append(Disconnect(peer, "silent"))
        elif info.state == GONE and not info.connected and now - (info.last_seen or 0.0) > m.config.forget_after:
            del m.peers[peer]
    return effects


def table(m: Membership) -> list:
    return [(p, i.state, i.connected, i.last_seen, i.next_dial) for p, i in sorted(m.peers.items())]


def test_sweep_matches_a_full_scan_under_random_traffic():
    cfg = MembershipConfig(gone_after=5.0, forget_after=40.0, max_peers=40)
    m = Membership("self", cfg)
    rng = Rng(7)
    peers = [f"p{i:02d}" for i in range(30)]
    seq = {p: 0 for p in peers}
    now = 1000.0
    changed = 0
    for step in range(3000):
        now += rng.uniform(0.0, 0.7)
        p = rng.choice(peers)
        roll = rng.random()
        if roll < 0.5:
            seq[p] += 1
            beat = StatusHeartbeat(seq=seq[p], sent_at=now, interval=rng.choice([1.0, 2.0, 4.0]), roles=("relay",),
                                   agent="t", listen_addrs=(f"/mem/{p}",), tasks=(), versions={},
                                   known_peers=(PeerAddrs(rng.choice(peers), (f"/mem/x{step}",)),))
            try:
                m.on_heartbeat(now, p, beat)
            except Rejected:
                pass
        elif roll < 0.65:
            m.on_connected(p, (f"/mem/{p}",))
        elif roll < 0.85:
            m.on_disconnected(p)
        if step % 5 == 0:
            ref = copy.deepcopy(m)
            expected = reference_sweep(ref, now)
            got = m.sweep(now)
            assert got == expected
            assert table(m) == table(ref)
            changed += len(got)
        assert len(m._linked) == sum(1 for i in m.peers.values() if i.connected)
    assert changed > 20  # peers did go gone and come back


def test_maintain_dials_only_while_short_of_links():
    cfg = MembershipConfig(target_connections=2)
    m = Membership("self", cfg)
    for i in range(5):
        m.learn_addrs(f"p{i}", (f"/mem/p{i}",))
    dials = m.maintain(0.0, Rng(1), lambda p: False)
    assert len(dials) == 2
    m.on_connected("p0", ())
    m.on_connected("p1", ())
    assert m.maintain(100.0, Rng(1), lambda p: False) == []
    m.on_disconnected("p1")
    assert len(m.maintain(100.0, Rng(1), lambda p: False)) == 1
