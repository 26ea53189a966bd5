"""Issue 27 attack 1 against a real node process: heartbeats signed by fresh keys, under the per-forwarder
rate of new signers, each declaring an hour's interval. Before, the fakes filled the node's table and
stretched its heartbeat interval (a swarm of hundreds, as far as it could tell), so a peer that joined
through it heard nothing of it until its next heartbeat, tens of seconds later. Now nothing vouches
for a fresh key (swarm/newcomers.py): at most `newcomers_per_net` of them are alive at the node, the
rest get no entry, none is relayed (`kept`), and the node's interval does not move; and a link that
keeps introducing strangers nobody vouches for is cut after a window, penalised and refused for a while
(swarm/floodwatch.py), so the fakes stop reaching the node at all. The newcomer's first link is pinged at
once, and the ping's answer carries the node's heartbeat: the target is the issue's, the new peer sees
its neighbour within 10 s."""

from __future__ import annotations

import os
import time

import pytest
import trio

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from node.procs import start_peer, stop_processes
from swarm.floodwatch import FloodConfig
from swarm.membership import MembershipConfig

from .peers import open_plain_gossip_peer, wait_for
from .test_spam_node import start_node, status

pytestmark = pytest.mark.slow
FLOOD_RATE = 18.0  # fresh signers a second: under the 20/s a forwarder may bring
FLOOD_SECONDS = 25.0


def fake_heartbeat() -> bytes:
    now = time.time()
    return seal(Identity(os.urandom(32)), StatusHeartbeat(
        seq=int(now * 1000), sent_at=now, interval=3599.5, roles=("worker",), agent="fake",
        listen_addrs=(), tasks=(), versions={}, known_peers=(), peers=1000)).wire


async def test_a_heartbeat_flood_does_not_hide_a_node_from_a_peer_that_joins_through_it(tmp_path):
    procs = []
    try:
        proc, addr, data_dir = await start_node(tmp_path)  # heartbeats every 0.5 s before the flood
        procs.append(proc)
        victim_id = addr.rsplit("/", 1)[1]
        with trio.fail_after(150):
            async with open_plain_gossip_peer("heartbeat-flooder") as atk:
                atk.pubsub.router.spam_protection_enabled = False  # py-libp2p caps its own publishing at 10/s
                await atk.subscribe(topics.STATUS)
                await atk.connect(addr)
                await wait_for(lambda: victim_id in atk.mesh_peers(topics.STATUS), 15, "mesh with the node")
                before = await status(data_dir)
                sent = 0
                started = trio.current_time()
                while trio.current_time() - started < FLOOD_SECONDS:
                    await atk.publish(topics.STATUS, fake_heartbeat())
                    sent += 1
                    await trio.sleep_until(started + sent / FLOOD_RATE)
                snap = await status(data_dir)
                fakes_alive = sum(1 for p in snap["peers"] if p["state"] == "alive" and p["agent"] == "fake")
                budget = MembershipConfig().newcomers_per_net  # the flood comes through one network
                assert fakes_alive <= budget and snap["membership"]["newcomers_alive"] == fakes_alive, snap["membership"]
                refused = snap["membership"]["refused_newcomers"]
                # every fake heartbeat that reached the node was kept (taken, relayed to nobody); an entry went only
                # to those within the budget; then the link was cut: one window of the flood (10 s, judged at the
                # node's 1-s sweeps) and a few in flight, not the whole of it
                kept = snap["messages"]["kept"]
                window = FloodConfig().window
                assert kept == snap["messages"]["accepted"] and kept <= FLOOD_RATE * (window + 3), (kept, sent)
                assert refused > kept / 4, snap["membership"]
                assert snap["flooding"]["links_cut"] == 1 and snap["penalties"].get("flooding") == 1, snap["flooding"]
                assert atk.peer_id not in snap["connected"]
                assert snap["membership"]["interval"] == before["membership"]["interval"] == 0.5
                joined_at = time.monotonic()
                newcomer, _ = await trio.to_thread.run_sync(lambda: start_peer(
                    ["--join", addr, "--data-dir", str(tmp_path / "newcomer")], tmp_path / "newcomer" / "log"))
                procs.append(newcomer)
                seen_after = None
                while time.monotonic() - joined_at < 30:
                    mine = await status(tmp_path / "newcomer")
                    if victim_id in mine["alive"]:
                        seen_after = time.monotonic() - joined_at
                        break
                    await trio.sleep(0.25)
                theirs = await status(data_dir)
        print(f"attack 1: {sent} fake heartbeats in {FLOOD_SECONDS:g} s, {kept} reached the node before it cut the "
              f"link, {fakes_alive} alive at the node, {refused} refused, "
              f"its interval {snap['membership']['interval']} s; "
              f"a newcomer joining through it saw it alive after "
              f"{'never' if seen_after is None else f'{seen_after:.1f} s'} (from its process start)")
        assert seen_after is not None and seen_after < 10, "the newcomer sees its neighbour within 10 s"
        assert any(p["peer_id"] == mine["peer_id"] for p in theirs["peers"] if p["state"] == "alive")
    finally:
        stop_processes(procs)
