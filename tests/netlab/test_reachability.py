"""Reachability, relays and hole punching with real `swarm-node` processes behind real NAT routers.

Five public relay peers (`--relay-service --relay-max-reservations 1`: one slot each, so that the
two NATed peers, which want two reservations each, are refused somewhere) and two peers behind two
different NAT routers (iptables masquerade: outbound only). One swarm proves, in order:

- the public peers report `reachability.status == "public"`, the NATed ones `"private"`, from
  dial-backs that failed at the NAT, and they learn the NAT's public IP (`external_ips`);
- each NATed peer reserves on two relays and advertises its circuit addresses, which reach the
  others' peer tables through heartbeats;
- a relay that is full refuses a reservation with a reason (RESERVATION_REFUSED, counted on both
  ends) and the refused peer reserves elsewhere;
- the two NATed peers, which can never dial each other, connect through a relay circuit, and DCUtR
  runs over it: attempts and successes are counted in `status --json` (the lab's masquerade keeps
  ports, so TCP simultaneous open goes through);
- a relay SIGKILLed: the NATed peer that held it reserves on the spare relay;
- the dead relay and the NATed peers' private addresses are redialed with bounded backoff, not
  endlessly (`host.stats.dial_failures`).
"""

from __future__ import annotations

import math
import os
import signal
import time

import pytest

from netlab.lab import stop_all
from netlab.nodes import node_call, start_node
from tests.netlab.conftest import add_nat_or_skip
from tests.node.helpers import wait_for

pytestmark = pytest.mark.slow
FAST = ["--heartbeat-interval", "0.5", "--gone-after", "4"]
RELAYS = 5
DIAL_BACKOFF = 5.0  # swarm.membership.MembershipConfig.dial_backoff: doubles per failure


def max_dials(seconds: float) -> int:
    """Failed dials to one address that backoff allows in `seconds`: retries at 5, 15, 35, 75 s...,
    plus one for a dial already in flight."""
    return 2 + int(math.log2(seconds / DIAL_BACKOFF + 1))


def test_nat_reachability_relays_hole_punch_limits_and_failover(lab, tmp_path):
    add_nat_or_skip(lab, "home")
    add_nat_or_skip(lab, "office")
    where = {f"r{i}": lab.add_peer(f"r{i}") for i in range(RELAYS)}
    where["a"] = lab.add_peer("a", nat="home")
    where["b"] = lab.add_peer("b", nat="office")
    dirs = {name: tmp_path / name for name in where}
    procs = {}

    def status(name):
        return node_call(lab, where[name], dirs[name], "status")

    def reach(name):
        return status(name)["reachability"]

    def relay_stats(name):
        return status(name)["host"]["stats"]["relay"]

    relay_args = ["--relay-service", "--relay-max-reservations", "1", *FAST]
    try:
        procs["r0"], boot = start_node(lab, where["r0"], ["--bootstrap", "--data-dir", str(dirs["r0"]), *relay_args],
                                       dirs["r0"] / "node.log")
        for name in where:
            if name != "r0":
                args = relay_args if name.startswith("r") else FAST
                procs[name], _ = start_node(lab, where[name], ["--join", boot, "--data-dir", str(dirs[name]), *args],
                                            dirs[name] / "node.log")
        started = time.monotonic()
        ids = {name: status(name)["peer_id"] for name in where}
        relays = [n for n in where if n.startswith("r")]

        # Reachability from real dial-backs: public on the bridge, private behind masquerade.
        wait_for(lambda: all(reach(n)["status"] == "private" for n in "ab"), 60, "both NATed peers private")
        wait_for(lambda: all(reach(n)["status"] == "public" for n in relays), 30, "every relay public")
        for n, router in (("a", "home"), ("b", "office")):
            r = reach(n)
            assert r["evidence"].get("failed", 0) >= 2 and r["evidence"].get("ok", 0) == 0, r
            assert r["external_ips"] == [lab.routers[router].wan_ip], r

        # Two reservations each, on five one-slot relays: somebody was refused, with a reason.
        wait_for(lambda: all(len(reach(n)["relays"]) == 2 for n in "ab"), 30, "two relays held by each NATed peer")
        reserved = time.monotonic()
        held = {n: set(reach(n)["relays"]) for n in "ab"}
        assert not held["a"] & held["b"], held  # one slot per relay
        refused_at_relays = sum(relay_stats(n).get("refused_reservations_full", 0) for n in relays)
        refused_at_clients = sum(relay_stats(n).get("client_reserve_failed_RESERVATION_REFUSED", 0) for n in "ab")
        assert refused_at_relays >= 1 and refused_at_clients >= 1, (refused_at_relays, refused_at_clients)
        for n in "ab":
            assert all("/p2p-circuit/p2p/" + ids[n] in addr for addr in reach(n)["relayed_addrs"])

        # Circuit addresses travel in heartbeats: a public peer's table lists them first.
        def advertised(viewer, name):
            return next((p["addrs"] for p in status(viewer)["peers"] if p["peer_id"] == ids[name]), [])
        wait_for(lambda: all("/p2p-circuit" in (advertised("r0", n) or [""])[0] for n in "ab"), 20,
                 "the NATed peers' circuit addresses in r0's peer table")

        # The NATed peers cannot dial each other directly; they connect through a relay.
        wait_for(lambda: ids["b"] in status("a")["host"]["connected"] and ids["a"] in status("b")["host"]["connected"],
                 90, "the two NATed peers connected")
        linked = time.monotonic()
        circuits = sum(relay_stats(n).get("circuits_opened", 0) for n in relays)
        dialed = sum(status(n)["host"]["stats"]["dials"].get("relayed_ok", 0) for n in "ab")
        assert circuits >= 1 and dialed >= 1, (circuits, dialed)

        # DCUtR over the circuit: counted on both ends; with masquerade keeping ports it succeeds.
        def punched():
            return [reach(n)["hole_punch"] for n in "ab"]
        wait_for(lambda: all(h["attempts"] >= 1 for h in punched()), 30, "hole punch attempts counted")
        wait_for(lambda: sum(h["successes"] for h in punched()) >= 1, 30, f"a hole punch success: {punched()}")
        punch = punched()

        # SIGKILL one of a's relays: a reserves on the spare relay.
        victim = next(n for n in relays if ids[n] in held["a"])
        os.kill(procs[victim].pid, signal.SIGKILL)
        procs[victim].wait(timeout=10)
        killed = time.monotonic()
        wait_for(lambda: len(reach("a")["relays"]) == 2 and ids[victim] not in reach("a")["relays"], 30,
                 f"a to replace its dead relay {victim}")
        replaced = time.monotonic()
        assert relay_stats("a").get("client_relay_lost", 0) >= 1
        assert not any(ids[victim] in addr for addr in reach("a")["relayed_addrs"])

        # Unreachable addresses are retried with backoff: the dead relay by everyone, the NATed
        # peers' private addresses by the other NATed peer (before the circuit existed).
        time.sleep(max(0.0, 8 - (time.monotonic() - killed)))
        since_kill, since_start = time.monotonic() - killed, time.monotonic() - started
        live = [n for n in where if n != victim]
        to_victim = {n: status(n)["host"]["stats"]["dial_failures"].get(ids[victim], 0) for n in live}
        assert max(to_victim.values()) <= max_dials(since_kill), (to_victim, since_kill)
        private = {n: status(n)["host"]["stats"]["dial_failures"].get(ids[o], 0) for n, o in (("a", "b"), ("b", "a"))}
        assert max(private.values()) <= 4 * max_dials(since_start), (private, since_start)  # <= 4 addrs per dial
        for n in live:
            assert status(n)["banned"] == [], f"{n} banned someone"
        print(f"\nfigures: reserved {reserved - started:.1f}s after start; NATed peers linked "
              f"{linked - reserved:.1f}s after both reserved; hole punch a={punch[0]} b={punch[1]}; dead relay "
              f"replaced in {replaced - killed:.1f}s; failed dials to the dead relay in {since_kill:.0f}s: {to_victim}; "
              f"between the NATed peers in {since_start:.0f}s: {private}")
        codes = stop_all([p for n, p in procs.items() if n != victim])
    finally:
        stop_all(list(procs.values()))
    assert codes == [0] * (len(where) - 1)
