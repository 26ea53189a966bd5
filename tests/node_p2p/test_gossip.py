"""Gossip: multi-hop delivery, validator semantics, size limit, rate limiting without drops."""

from __future__ import annotations

import trio
import pytest

from node.p2p import Host, MessageTooLarge

from .helpers import link, open_hosts, wait_until

TOPIC = "swarm/1/test"


async def _mesh(a: Host, b: Host) -> None:
    await wait_until(lambda: b.peer_id in a.mesh_peers(TOPIC) and a.peer_id in b.mesh_peers(TOPIC), what="mesh")


async def test_line_a_b_c_forwarding_and_validator_reject():
    with trio.fail_after(30):
        async with open_hosts(3) as (a, b, c):
            seen_b: list[tuple[str, bytes, str]] = []
            seen_c: list[tuple[str, bytes, str]] = []

            def b_validator(topic: str, data: bytes, fwd: str) -> bool:
                seen_b.append((topic, data, fwd))
                return not data.startswith(b"bad")

            b.set_validator(b_validator)
            c.set_validator(lambda t, d, f: seen_c.append((t, d, f)) or True)
            for h in (a, b, c):
                await h.subscribe(TOPIC)
            await link(a, b)
            await link(b, c)
            assert c.peer_id not in a.connected_peers()
            await _mesh(a, b)
            await _mesh(b, c)

            await a.publish(TOPIC, b"bad message")
            await a.publish(TOPIC, b"good message")
            await wait_until(lambda: any(d == b"good message" for _, d, _ in seen_c), what="A->B->C delivery")
            assert (TOPIC, b"good message", b.peer_id) in seen_c  # forwarder is B, not A
            assert [d for _, d, _ in seen_b] == [b"bad message", b"good message"]
            assert all(f == a.peer_id for _, _, f in seen_b)
            await trio.sleep(1.5)  # a heartbeat of IHAVE gossip later, the rejected one still never reached C
            assert [d for _, d, _ in seen_c] == [b"good message"]
            assert b.stats.rejected == 1 and b.stats.accepted == 1
            assert a.stats.published == 2 and a.stats.received == 0  # own messages are not validated


async def test_validator_exception_counts_as_reject_and_host_survives():
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            got: list[bytes] = []

            def flaky(topic: str, data: bytes, fwd: str) -> bool:
                if data == b"boom":
                    raise RuntimeError("validator bug")
                got.append(data)
                return True

            b.set_validator(flaky)
            await a.subscribe(TOPIC)
            await b.subscribe(TOPIC)
            await link(a, b)
            await _mesh(a, b)
            await a.publish(TOPIC, b"boom")
            await a.publish(TOPIC, b"after")
            await wait_until(lambda: got == [b"after"], what="message after the raising one")
            assert b.stats.validator_errors == 1 and b.stats.rejected == 1


async def test_oversize_publish_is_refused():
    with trio.fail_after(20):
        async with open_hosts(1, max_gossip_bytes=1000) as (a,):
            await a.subscribe(TOPIC)
            await a.publish(TOPIC, b"x" * 1000)  # at the limit: fine
            with pytest.raises(MessageTooLarge):
                await a.publish(TOPIC, b"x" * 1001)
            assert a.stats.dropped["too_large"] == 1 and a.stats.published == 1


async def test_rate_limit_applies_backpressure_without_drops():
    # 60 messages at 100/s with a burst of 10 need >= 0.5 s. py-libp2p's default spam protection would
    # have dropped everything past 10 msg/s at the receiver; with it off, all 60 arrive.
    n, rate, burst = 60, 100.0, 10
    with trio.fail_after(30):
        async with open_hosts(2, publish_rate=rate, publish_burst=burst) as (a, b):
            got: list[bytes] = []
            b.set_validator(lambda t, d, f: got.append(d) or True)
            await a.subscribe(TOPIC)
            await b.subscribe(TOPIC)
            await link(a, b)
            await _mesh(a, b)
            start = trio.current_time()
            for i in range(n):
                await a.publish(TOPIC, i.to_bytes(4, "big") + b"\0" * 1020)
            elapsed = trio.current_time() - start
            assert elapsed >= (n - burst) / rate * 0.95, elapsed  # a lower bound: a busy machine only adds to it
            await wait_until(lambda: len(got) == n, timeout=10, what=f"all {n} messages")
            assert sorted(int.from_bytes(d[:4], "big") for d in got) == list(range(n))
            # The wait is counted, though not all of it: time spent inside publish() itself refills the
            # bucket, and on a loaded machine that is a good share of the 0.5 s (CI measured 0.38 s).
            assert not a.stats.dropped and a.stats.publish_wait_seconds >= 0.5 * (n - burst) / rate


async def test_stuck_peer_backpressure_is_bounded_and_counted():
    # A peer that accepts our pubsub stream but never reads: yamux's window fills, then py-libp2p's
    # 32-slot send queue. publish() waits at the high-water mark (backpressure), but only for
    # send_queue_wait and then not again for that peer, so one stuck peer cannot stall the node;
    # every drop is counted.
    with trio.fail_after(30):
        async with open_hosts(1, "pub", send_queue_wait=0.3, publish_rate=1000.0, publish_burst=100) as (a,), \
                open_hosts(1, "stuck") as (stuck,):

            async def never_read(stream) -> None:
                await trio.sleep_forever()

            stuck._host.set_stream_handler("/meshsub/1.1.0", never_read)
            await a.subscribe(TOPIC)
            await stuck.subscribe(TOPIC)
            await link(a, stuck)
            await wait_until(lambda: stuck.peer_id in a.mesh_peers(TOPIC), what="stuck peer in mesh")
            start = trio.current_time()
            n = 45  # 500 KB each: ~8 fill the 4 MB yamux window py-libp2p grants, 24 more fill the queue
            for i in range(n):
                await a.publish(TOPIC, bytes([i]) * 500_000)
            elapsed = trio.current_time() - start
            assert a.stats.published == n
            # waited once for the stuck peer, then stopped waiting for it (its messages are dropped)
            assert a.stats.dropped["send_queue_stalled"] == 1, dict(a.stats.dropped)
            assert a.stats.dropped["libp2p_queue_full"] >= 1, dict(a.stats.dropped)
            # It did wait (a lower bound, which load cannot break); that it waited only once is the stall
            # counter above, not an upper time bound: pushing 22 MB through yamux on a busy 2-core machine
            # can itself take seconds.
            assert elapsed >= 0.3, elapsed


async def test_the_router_keeps_no_timestamp_per_message():
    """py-libp2p 0.8.1's GossipSub.publish appends a timestamp per message it sends or forwards to a
    list per topic that only its adaptive-gossip health check trims, which we do not run: it grew
    for a node's whole life (bench/soak.py). The guarded router's log keeps nothing."""
    with trio.fail_after(30):
        async with open_hosts(3) as (a, b, c):
            got: list[bytes] = []
            c.set_validator(lambda t, d, f: got.append(d) or True)
            for h in (a, b, c):
                await h.subscribe(TOPIC)
            await link(a, b)
            await link(b, c)
            await _mesh(a, b)
            await _mesh(b, c)
            for i in range(50):
                await a.publish(TOPIC, b"m%d" % i)
            await wait_until(lambda: len(got) == 50, what="50 messages through b")
            for h in (a, b):  # a published them, b forwarded them
                log = h._router.recent_message_deliveries
                assert sum(len(times) for times in log.values()) == 0, {t: len(v) for t, v in log.items()}


async def test_yamux_returns_read_credit_in_batches(monkeypatch):
    """py-libp2p 0.8.1 sends a yamux WINDOW_UPDATE for every read by default: three per gossip message
    received (its varint prefix is read a byte at a time, then the body). The adapter turns that off:
    one per message, the body's read (py-libp2p still returns a partial window's credit at once)."""
    from libp2p.stream_muxer.yamux.yamux import YamuxStream

    updates: list[int] = []
    original = YamuxStream.send_window_update

    async def counting(self, increment, skip_lock=False):
        updates.append(increment)
        await original(self, increment, skip_lock=skip_lock)

    monkeypatch.setattr(YamuxStream, "send_window_update", counting)
    monkeypatch.delenv("PY_YAMUX_RELEASE_ON_READ", raising=False)  # the adapter's default, not the caller's
    with trio.fail_after(30):
        async with open_hosts(2) as (a, b):
            got: list[bytes] = []
            b.set_validator(lambda t, d, f: got.append(d) or True)
            for h in (a, b):
                await h.subscribe(TOPIC)
            await link(a, b)
            await _mesh(a, b)
            before = len(updates)
            for i in range(300):
                await a.publish(TOPIC, b"m%03d" % i + b"x" * 200)
            await wait_until(lambda: len(got) == 300, what="300 messages")
            assert len(updates) - before <= 310, len(updates) - before  # 900 with py-libp2p's default
