"""A host fed garbage on the raw socket and on every protocol it speaks keeps serving.

Without node/p2p/guard.py, two of these payloads kill a py-libp2p 0.8.1 host outright: a length-
prefixed non-protobuf frame on /meshsub (DecodeError escapes Pubsub.stream_handler) and a published
message whose signing key does not parse (signature_validator re-raises inside the push_msg task;
libp2p message signing is on, StrictSign: see node/p2p/build.py).
"""

from __future__ import annotations

import os

import trio
from libp2p.pubsub.pb import rpc_pb2

from node.p2p.framing import encode_uvarint

from .helpers import link, open_hosts, wait_until

TOPIC = "swarm/1/test"
BLOB = "/swarm/blob/1"


def stream_payloads() -> list[bytes]:
    bad_key_msg = rpc_pb2.Message(
        data=b"x", topicIDs=[TOPIC], from_id=os.urandom(20), seqno=b"\0" * 8, signature=b"sig", key=b"\x08\x01junk"
    )
    bad_key_rpc = rpc_pb2.RPC(publish=[bad_key_msg]).SerializeToString()
    bogus_control = rpc_pb2.RPC(
        control=rpc_pb2.ControlMessage(
            ihave=[rpc_pb2.ControlIHave(topicID=TOPIC, messageIDs=[os.urandom(3000)] * 50)],
            iwant=[rpc_pb2.ControlIWant(messageIDs=[b"\xff" * 40] * 50)],
            graft=[rpc_pb2.ControlGraft(topicID="nope")],
        )
    ).SerializeToString()
    return [
        encode_uvarint(2**62),  # absurd length
        b"\xff" * 12,  # varint that never terminates
        encode_uvarint(100) + b"\xff" * 100,  # right length, not protobuf
        encode_uvarint(len(bad_key_rpc)) + bad_key_rpc,  # parses, then breaks signature checking
        encode_uvarint(len(bogus_control)) + bogus_control,
        os.urandom(5000),
        encode_uvarint(1000) + b"short",  # truncated frame, then close
        encode_uvarint(50) + b"short",  # truncated within /swarm/blob/1's 64-byte request cap
    ]


async def raw_tcp_garbage(port: int) -> None:
    for payload in (os.urandom(4096), b"\x13/multistream/1.0.0\n\x07/noise\n" + os.urandom(300), b"\xff" * 64, b""):
        sock = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            await sock.send_all(payload)
            await trio.sleep(0.02)
        finally:
            await sock.aclose()


async def test_garbage_everywhere_then_still_serving():
    with trio.fail_after(50):
        async with open_hosts(1, "victim", request_idle_timeout=0.5) as (victim,), open_hosts(2, "peer") as (good, atk):
            got: list[bytes] = []
            victim.set_validator(lambda t, d, f: got.append(d) or True)

            async def echo(peer: str, data: bytes) -> bytes:
                return data

            victim.set_request_handler(BLOB, echo)
            for h in (victim, good, atk):
                await h.subscribe(TOPIC)
            await link(good, victim)
            await link(atk, victim)

            port = int(victim.listen_addrs()[0].split("/")[4])
            await raw_tcp_garbage(port)

            protocols = sorted(str(p) for p in victim._host.get_mux().handlers if p is not None)
            assert {"/meshsub/1.1.0", BLOB, "/ipfs/id/1.0.0", "/ipfs/ping/1.0.0"} <= set(protocols)
            assert not any(p.startswith("/meshsub/1.2") or "plaintext" in p for p in protocols)
            for proto in protocols:
                for payload in stream_payloads():
                    try:
                        stream = await atk._raw_stream(victim.peer_id, proto)
                        await stream.write(payload)
                        await trio.sleep(0.01)
                        await stream.close()
                    except Exception:
                        pass  # the victim resetting us is fine; we only care that it survives
            # a request stream that stalls mid-frame must be cut by the read deadline
            stalled = await atk._raw_stream(victim.peer_id, BLOB)
            await stalled.write(encode_uvarint(40) + b"partial")
            await wait_until(lambda: victim.stats.requests_failed["slow"] >= 1, what="read deadline")

            errors = victim.stats.guarded_errors
            assert errors["/meshsub/1.1.0"] >= 1, dict(errors)  # DecodeError contained
            assert errors["pubsub/push_msg"] >= 1, dict(errors)  # the unparsable signing key, contained
            failed = victim.stats.requests_failed
            assert failed["too_large"] >= 1 and failed["bad_varint"] >= 1 and failed["truncated"] >= 1, dict(failed)

            # still serving: a new request and new gossip in both directions
            assert await good.request(victim.peer_id, BLOB, b"still alive") == b"still alive"
            assert good.peer_id in victim.connected_peers()
            await wait_until(lambda: victim.peer_id in good.mesh_peers(TOPIC), what="mesh with good peer")
            await good.publish(TOPIC, b"gossip after attack")
            await wait_until(lambda: b"gossip after attack" in got, what="gossip into victim")
            back: list[bytes] = []
            good.set_validator(lambda t, d, f: back.append(d) or True)
            await victim.publish(TOPIC, b"victim speaks")
            await wait_until(lambda: b"victim speaks" in back, what="gossip out of victim")
