"""Issue 27 attacks 2, 3 and 4 against a real node process (`swarm-node start`): identities and
addresses of one network are free to an attacker, so what they may hold is budgeted by source network
(node/p2p/subnet.py) as well as by peer id and address.

The attackers leave from 127.0.1.x, a /24 of their own on loopback (Linux answers every 127/8
address); the honest peer dials from 127.0.0.1. Each test runs the attack while the honest peer keeps
asking, and asserts the issue's target: at least 95% of its requests or dials served.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack

import pytest
import trio

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity, peer_id_from_public_key
from gossip.messages import StatusHeartbeat

from node.p2p.framing import encode_uvarint
from node.procs import stop_processes
from swarm.tasks import TaskBook
from tests.samples import task

from ..node_p2p.helpers import open_hosts
from .conftest import ROOT, stop
from .peers import PlainPeer, open_plain_gossip_peer, open_raw_stream, wait_for
from .test_spam_node import start_node, status

pytestmark = pytest.mark.slow
SYNC = "/swarm/sync/1"
ATTACK_NET = "127.0.1"


def leave_from(peer: PlainPeer, source_ip: str) -> None:
    """Make every TCP dial of `peer` leave from `source_ip` (py-libp2p's hole-punching dial)."""
    for transport in peer.host.get_network().transport_manager.get_transports():
        if hasattr(transport, "dial_with_source"):
            transport.dial = lambda maddr, t=transport: t.dial_with_source(maddr, (source_ip, 0))


async def ask_for(seconds: float, honest, victim_id: str, every: float = 0.3) -> tuple[int, int, list[str]]:
    """One honest sync request every `every` seconds for `seconds`: (asked, answered, failures)."""
    asked = answered = 0
    failures: list[str] = []
    question = TaskBook.sync_request([])
    deadline = trio.current_time() + seconds
    while trio.current_time() < deadline:
        asked += 1
        try:
            with trio.fail_after(3):
                TaskBook.parse_sync_response(await honest.request(victim_id, SYNC, question, timeout=3))
            answered += 1
        except Exception as exc:  # noqa: BLE001 - counted and asserted
            failures.append(repr(exc))
        await trio.sleep(every)
    return asked, answered, failures


async def test_fresh_ids_of_one_network_cannot_starve_honest_requests(tmp_path):
    """Attack 3: 10 fresh peer ids x 4 request streams each, every stream dribbling its frame at
    1 byte/s under the read deadline and reopened when reset. Before the network budget 8 ids held all
    32 slots and an honest client got 9 of 25 answers; now the network holds at most 24."""
    proc, addr, data_dir = await start_node(tmp_path)
    try:
        victim_id = addr.rsplit("/", 1)[1]
        with trio.fail_after(150):
            async with open_hosts(1, "honest") as (honest,), AsyncExitStack() as stack:
                await honest.connect(addr)
                sybils = []
                for i in range(10):
                    sybil = await stack.enter_async_context(open_plain_gossip_peer(f"sybil-{i}"))
                    leave_from(sybil, f"{ATTACK_NET}.{i + 1}")
                    await sybil.connect(addr)
                    sybils.append(sybil)
                opened = 0

                async def dribble(sybil: PlainPeer) -> None:
                    nonlocal opened
                    while True:
                        try:
                            stream = await open_raw_stream(sybil, victim_id, SYNC)
                            opened += 1
                            await stream.write(encode_uvarint(64))
                            for _ in range(64):
                                await trio.sleep(1.0)
                                await stream.write(b"\x00")
                        except Exception:  # noqa: BLE001 - reset, refused or banned: open another
                            await trio.sleep(0.2)

                async with trio.open_nursery() as nursery:
                    for sybil in sybils:
                        for _ in range(4):
                            nursery.start_soon(dribble, sybil)
                    await trio.sleep(2.0)  # the slots fill before the first honest question
                    asked, answered, failures = await ask_for(15, honest, victim_id)
                    nursery.cancel_scope.cancel()
                snap = await status(data_dir)
        failed = snap["host"]["stats"]["requests_failed"]
        print(f"attack 3: honest sync answers {answered}/{asked} during 15 s of 10 sybil ids x 4 slow "
              f"streams ({opened} opened); refused subnet_busy {failed.get('subnet_busy', 0)}, "
              f"peer_busy {failed.get('peer_busy', 0)}, busy {failed.get('busy', 0)}")
        assert asked >= 15 and answered >= 0.95 * asked, failures[:5]
        assert failed.get("subnet_busy", 0) > 0, failed  # the network's share is what held them
    finally:
        stop_processes([proc])


async def test_many_addresses_of_one_network_cannot_lock_out_honest_dials(tmp_path):
    """Attack 4: 300 sockets from 40 addresses of one network, each sending multistream's header and
    then nothing, re-opened as soon as they are closed. Before the network bound they filled every
    pending-handshake slot with young talking handshakes and 5 of 10 honest dials failed."""
    proc, addr, data_dir = await start_node(tmp_path)
    ip, port = addr.split("/")[2], int(addr.split("/")[4])
    victim_id = addr.rsplit("/", 1)[1]
    attacker = subprocess.Popen(
        [sys.executable, "-m", "tests.adversarial_net.silent_sockets", ip, str(port), "300",
         "--sources", ATTACK_NET, "40", "--header"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
    try:
        with trio.fail_after(300):
            with trio.fail_after(30):
                ready = await trio.to_thread.run_sync(attacker.stdout.readline, abandon_on_cancel=True)
            assert ready.strip() == "ready", ready
            ok, failures = 0, []
            for i in range(20):
                try:
                    async with open_hosts(1, f"newcomer-{i}") as (peer,):
                        await peer.connect(addr, timeout=6)
                        # The attack is on handshakes: the dial has its 6 s, and the answer, which only shows
                        # the link works, the loaded machine's time (a CI run with the suite's two lanes and
                        # the vLLM install beside it timed 6 of 20 answers out at 6 s, every dial through).
                        TaskBook.parse_sync_response(
                            await peer.request(victim_id, SYNC, TaskBook.sync_request([]), timeout=20))
                    ok += 1
                except Exception as exc:  # noqa: BLE001 - counted and asserted
                    failures.append(repr(exc))
                await trio.sleep(0.3)
            snap = await status(data_dir)
        refused = snap["host"]["stats"]["connections_refused"]
        print(f"attack 4: honest dials {ok}/20 during 300 header-only sockets from 40 addresses of "
              f"{ATTACK_NET}.0/24; refused {dict(refused)}")
        assert ok >= 19, failures
        assert refused.get("pending_per_subnet", 0) + refused.get("evicted_pending_per_subnet", 0) > 0, refused
    finally:
        stop(attacker)
        stop_processes([proc])


async def test_junk_tasks_kept_alive_by_one_trainer_key_leave_room_for_a_real_one(tmp_path):
    """Attack 2: 16 fresh announcer keys x 2 tasks, all naming one trainer key that sends a heartbeat
    every 2 s, from two networks (one network may hold only 16 of the 32 slots: the first sends 20).
    Before, the junk was never silent, so never evicted, and an honest peer's new task was refused
    `capacity` for as long as the heartbeats went on; a key named by more than 2 tasks now keeps none of
    them alive."""
    proc, addr, data_dir = await start_node(tmp_path)
    victim_id = addr.rsplit("/", 1)[1]
    decoy = Identity(os.urandom(32))
    try:
        with trio.fail_after(120):
            async with AsyncExitStack() as stack:
                peers = []
                for name, source in (("junk-a", f"{ATTACK_NET}.1"), ("junk-b", "127.0.2.1"), ("honest", None)):
                    peer = await stack.enter_async_context(open_plain_gossip_peer(name))
                    if source:
                        leave_from(peer, source)
                    peer.pubsub.router.spam_protection_enabled = False
                    for topic in (topics.TASKS, topics.STATUS):
                        await peer.subscribe(topic)
                    await peer.connect(addr)
                    await wait_for(lambda p=peer: victim_id in p.mesh_peers(topics.TASKS), 15, "mesh with the node")
                    peers.append(peer)
                junk_a, junk_b, honest = peers

                async def beat() -> None:
                    while True:
                        now = time.time()
                        await junk_a.publish(topics.STATUS, seal(decoy, StatusHeartbeat(
                            seq=int(now * 1000), sent_at=now, interval=2.0, roles=("trainer",), agent="decoy",
                            listen_addrs=(), tasks=(), versions={}, known_peers=())).wire)
                        await trio.sleep(2.0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(beat)
                    now = time.time()
                    for i in range(36):
                        announcer = Identity(os.urandom(32)) if i % 2 == 0 else announcer
                        junk = task(name=f"junk-{i}", trainer_keys=(decoy.public_key,), created_at=now,
                                    expires_at=now + 3600)
                        await (junk_a if i < 20 else junk_b).publish(topics.TASKS, seal(announcer, junk).wire)
                        await trio.sleep(0.05)
                    await trio.sleep(3.0)
                    snap = await status(data_dir)
                    by_net = Counter(t["via"] for t in snap["tasks"])
                    assert by_net == {f"{ATTACK_NET}.0/24": 16, "127.0.2.0/24": 16}, (by_net, snap["messages"])
                    assert peer_id_from_public_key(decoy.public_key) in snap["alive"], "the decoy heartbeats"
                    owner = Identity(os.urandom(32))
                    real = task(name="real", trainer_keys=(owner.public_key,), created_at=time.time(),
                                expires_at=time.time() + 3600)
                    real_id = real.task_id
                    await honest.publish(topics.TASKS, seal(owner, real).wire)
                    for _ in range(30):
                        snap = await status(data_dir)
                        if real_id in {t["task_id"] for t in snap["tasks"]}:
                            break
                        await trio.sleep(0.2)
                    nursery.cancel_scope.cancel()
        held = {t["task_id"] for t in snap["tasks"]}
        print(f"attack 2: honest task admitted: {real_id in held}; table {len(held)} tasks; refused "
              f"{snap['messages']['rejected']}")
        assert real_id in held, snap["messages"]["rejected"]
        assert len(held) == 32
    finally:
        stop_processes([proc])

