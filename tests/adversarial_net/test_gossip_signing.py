"""Issue 20 items 1 and 2: our gossip is accepted by a StrictSign peer of another stack, and a copy
of a real message on the wrong topic no longer blocks the genuine one.

Before the fix a StrictSign peer refused every message we published (no signature), and the wrong-
topic copy made the node drop the genuine message for the validation cache's 5-minute lifetime.
"""

from __future__ import annotations

import trio

from node.p2p import Host

from ..node_p2p.helpers import link, open_hosts
from .peers import open_plain_gossip_peer, wait_for

TOPIC_A = "swarm/1/a"
TOPIC_B = "swarm/1/b"
SYNC = "/swarm/sync/1"


async def test_strict_sign_peer_accepts_our_messages_and_we_accept_its():
    with trio.fail_after(40):
        async with open_hosts(1, "ours") as (ours,), open_plain_gossip_peer("js-like") as plain:
            got: list[tuple[str, bytes, str]] = []
            ours.set_validator(lambda t, d, f: got.append((t, d, f)) or True)
            await ours.subscribe(TOPIC_A)
            await plain.subscribe(TOPIC_A)
            await plain.connect(ours.listen_addrs()[0] + f"/p2p/{ours.peer_id}")
            await wait_for(lambda: plain.peer_id in ours.mesh_peers(TOPIC_A)
                           and ours.peer_id in plain.mesh_peers(TOPIC_A), 10, "mesh")
            for i in range(5):
                await ours.publish(TOPIC_A, b"from ours %d" % i)
            took = await wait_for(lambda: len(plain.received) == 5, 5, "all 5 messages at the StrictSign peer")
            assert plain.refused == []  # figure: 5 of 5 accepted (0 of 5 with signing off)
            assert {f for _, _, f in plain.received} == {ours.peer_id}
            await plain.publish(TOPIC_A, b"from plain")
            await wait_for(lambda: (TOPIC_A, b"from plain", plain.peer_id) in got, 5, "the other way")
            print(f"strict-sign interop: 5/5 accepted in {took:.2f}s")


async def test_wrong_topic_copy_does_not_block_the_genuine_message():
    with trio.fail_after(50):
        async with open_hosts(2, "wt") as (victim, honest), open_plain_gossip_peer("attacker") as atk:
            accepted: list[tuple[str, bytes, str]] = []
            rejected: list[tuple[str, bytes, str]] = []

            def validate(topic: str, data: bytes, fwd: str) -> bool:
                ok = data.startswith(topic.encode() + b":")  # a real envelope names its topic's kind
                (accepted if ok else rejected).append((topic, data, fwd))
                return ok

            async def sync_handler(peer: str, data: bytes) -> bytes:
                return b"ok " + data

            victim.set_validator(validate)
            victim.set_request_handler(SYNC, sync_handler)
            for topic in (TOPIC_A, TOPIC_B):
                await victim.subscribe(topic)
                await atk.subscribe(topic)
            await honest.subscribe(TOPIC_A)
            await atk.connect(victim.listen_addrs()[0] + f"/p2p/{victim.peer_id}")
            await link(honest, victim)
            await wait_for(lambda: atk.peer_id in victim.mesh_peers(TOPIC_B)
                           and honest.peer_id in victim.mesh_peers(TOPIC_A), 10, "meshes")

            genuine = TOPIC_A.encode() + b":genuine envelope"
            await atk.publish(TOPIC_B, genuine)  # the attack: the real bytes, first, on the wrong topic
            await wait_for(lambda: len(rejected) == 1, 5, "the wrong-topic copy to be rejected")
            assert rejected[0][2] == atk.peer_id
            await honest.publish(TOPIC_A, genuine)
            took = await wait_for(lambda: (TOPIC_A, genuine, honest.peer_id) in accepted, 5, "the genuine message")
            answer = await _timed_request(honest, victim, b"during")
            assert answer == b"ok during"
            # A replay of the genuine message is still one message id (ids are content + topic).
            await honest.publish(TOPIC_A, genuine)
            await trio.sleep(1.0)
            assert [a for a in accepted if a[1] == genuine] == [(TOPIC_A, genuine, honest.peer_id)]
            print(f"wrong-topic attack: genuine message delivered in {took:.2f}s after the copy")


async def _timed_request(client: Host, server: Host, data: bytes) -> bytes:
    with trio.fail_after(2):  # the node keeps answering within 2 s
        return await client.request(server.peer_id, SYNC, data, timeout=2)
