"""Issue 27 item 2, attacks 1 and 2 against a real node process.

1. A heartbeat flood from fresh keys.
The attacker is a plain py-libp2p gossipsub peer (peers.py) that signs each heartbeat with a key
minted for it, declaring a 3,599.5 s interval. Before: every fake took a table entry, counted in the
victim's swarm size (190 fakes: its 0.5 s interval stretched to 19 s) and was forwarded. Now the
attacker's link gets its share of unproven entries (128) and the rest is refused, the interval holds,
and an honest peer joining mid-flood sees the victim (and is seen) within 10 s.

2. Live junk tasks: 16 fresh announcers x 2 tasks, all naming one trainer key whose heartbeats the
attacker sends every second. Before: never "silent", so never evicted, and an honest peer's task was
refused `capacity` for as long as the heartbeats went on. Now one key's heartbeats keep at most 2 tasks
live, and the honest task is admitted.
"""

from __future__ import annotations

import os
import time
import tomllib

import pytest
import trio

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from node import control
from node.procs import start_peer, stop_processes
from node.taskfile import EXAMPLE
from tests.samples import task

from .peers import open_plain_gossip_peer, wait_for
from .test_spam_node import start_node, status

pytestmark = pytest.mark.slow
FAKES = 190  # within the 200-message burst of the fresh-signer bucket: nothing is refused for rate


def forged_beat(key: Identity | None = None, interval: float = 3599.5) -> bytes:
    now = time.time()
    return seal(key or Identity(os.urandom(32)), StatusHeartbeat(
        seq=int(now * 1000), sent_at=now, interval=interval, roles=("trainer",), agent="sybil", listen_addrs=(),
        tasks=(), versions={}, known_peers=(), peers=1 << 20)).wire


async def test_a_heartbeat_flood_from_fresh_keys_is_held_to_one_links_share(tmp_path):
    procs = []
    try:
        proc, addr, data_dir = await start_node(tmp_path)
        procs.append(proc)
        victim_id = addr.rsplit("/", 1)[1]
        with trio.fail_after(40):
            async with open_plain_gossip_peer("heartbeat-flooder") as atk:
                atk.pubsub.router.spam_protection_enabled = False  # py-libp2p caps its own publishing at 10/s
                await atk.subscribe(topics.STATUS)
                await atk.connect(addr)
                await wait_for(lambda: victim_id in atk.mesh_peers(topics.STATUS), 15, "mesh with the node")
                started = trio.current_time()
                for _ in range(FAKES):
                    await atk.publish(topics.STATUS, forged_beat())
                    await trio.sleep(0.01)  # py-libp2p's 32-slot send queue drops a faster burst
                newcomer_dir = tmp_path / "newcomer"
                newcomer, _ = await trio.to_thread.run_sync(lambda: start_peer(
                    ["--join", addr, "--data-dir", str(newcomer_dir), "--heartbeat-interval", "0.5"],
                    newcomer_dir / "log"))
                procs.append(newcomer)
                joined = time.monotonic()  # its node is up (listening); now it must find the victim
                newcomer_id = (await trio.to_thread.run_sync(lambda: control.call(newcomer_dir, "status")))["peer_id"]
                seen: dict[str, float] = {}
                for _ in range(100):
                    snap = await status(data_dir)
                    theirs = await trio.to_thread.run_sync(lambda: control.call(newcomer_dir, "status", timeout=2))
                    for side, ok in (("victim", newcomer_id in snap["alive"]), ("newcomer", victim_id in theirs["alive"])):
                        if ok:
                            seen.setdefault(side, time.monotonic() - joined)
                    if len(seen) == 2:
                        break
                    await trio.sleep(0.1)
                seen_after = max(seen.values(), default=float("inf"))
                took = trio.current_time() - started
        refused = snap["messages"]["rejected"].get("capacity", 0)
        print(f"heartbeat flood: {FAKES} fakes in {took:.1f}s, {len(snap['peers'])} table entries, {refused} "
              f"refused (capacity), interval {snap['heartbeat_interval']} s, newcomer seen both ways after "
              f"{seen_after:.1f}s {seen}, attacker banned: {atk.peer_id in snap['banned']}")
        assert newcomer_id in snap["alive"] and victim_id in theirs["alive"]
        assert seen_after < 10.0
        assert len(snap["peers"]) <= 128 + 3 and refused >= FAKES - 128 - 10
        assert snap["heartbeat_interval"] == 0.5  # 190 counted fakes would have made it 19 s
        assert len(theirs["peers"]) <= 128 + 3  # the newcomer got at most what the victim let through
    finally:
        stop_processes(procs)


async def test_junk_tasks_kept_live_by_one_keys_heartbeats_leave_room_for_an_honest_task(tmp_path):
    procs = []
    try:
        proc, addr, data_dir = await start_node(tmp_path)
        procs.append(proc)
        victim_id = addr.rsplit("/", 1)[1]
        trainer = Identity(os.urandom(32))
        with trio.fail_after(40):
            async with open_plain_gossip_peer("junk-tasks") as atk, trio.open_nursery() as nursery:
                atk.pubsub.router.spam_protection_enabled = False
                for topic in (topics.STATUS, topics.TASKS):
                    await atk.subscribe(topic)
                await atk.connect(addr)
                await wait_for(lambda: victim_id in atk.mesh_peers(topics.TASKS), 15, "mesh with the node")

                async def heartbeats() -> None:
                    while True:
                        await atk.publish(topics.STATUS, forged_beat(trainer, interval=2.0))
                        await trio.sleep(1.0)
                nursery.start_soon(heartbeats)
                now = time.time()
                for i in range(16):
                    key = Identity(os.urandom(32))
                    for j in range(2):
                        junk = task(name=f"junk-{i}-{j}", trainer_keys=(trainer.public_key,), created_at=now,
                                    expires_at=now + 3600)
                        await atk.publish(topics.TASKS, seal(key, junk).wire)
                        await trio.sleep(0.01)  # py-libp2p's 32-slot send queue drops a faster burst
                await trio.sleep(1.5)
                snap = await status(data_dir)
                assert len(snap["tasks"]) == 32 and trainer_id(trainer) in snap["alive"], snap["messages"]
                honest_dir = tmp_path / "honest"
                honest, _ = await trio.to_thread.run_sync(lambda: start_peer(
                    ["--join", addr, "--data-dir", str(honest_dir), "--heartbeat-interval", "0.5"], honest_dir / "log"))
                procs.append(honest)
                await trio.sleep(1.0)  # linked, heartbeats heard: a trainer the victim knows is alive
                table = tomllib.loads(EXAMPLE.read_text())
                result = await trio.to_thread.run_sync(
                    lambda: control.call(honest_dir, "announce-task", {"task": table}))
                admitted = None
                for _ in range(50):
                    snap = await status(data_dir)
                    if result["task_id"] in {t["task_id"] for t in snap["tasks"]}:
                        admitted = snap
                        break
                    await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
        print(f"junk tasks: 32 junk tasks, one heartbeating trainer; honest task admitted: {admitted is not None}; "
              f"capacity refusals {snap['messages']['rejected'].get('capacity', 0)}")
        assert admitted is not None and len(admitted["tasks"]) == 32
    finally:
        stop_processes(procs)


def trainer_id(key: Identity) -> str:
    from gossip.identity import peer_id_from_public_key
    return peer_id_from_public_key(key.public_key)
