"""Issue 20 items 3, 4 and 9 against a real node process (`swarm-node start`): the host reports each
stream abuse (node/p2p/budget.py), the driver feeds it to the core as `StreamAbuse`, and the node's
own reputation ledger bans the abuser (reason `stream-abuse`) while an honest peer's requests are
still answered. victim.py's stand-in blocks by the host's points instead; this is the wiring a
production node runs (its host reports only, `penalty_block_points=None`)."""

from __future__ import annotations

import pytest
import trio

from node.p2p.framing import encode_uvarint
from node.procs import stop_processes
from swarm import protocols

from ..node_p2p.helpers import open_hosts
from .peers import open_plain_gossip_peer, open_raw_stream
from .test_spam_node import RSS_BOUND_KB, rss_kb, start_node, status, wait_for_ban

pytestmark = pytest.mark.slow


async def test_a_real_node_bans_a_stream_abuser_through_its_ledger(tmp_path):
    proc, addr, data_dir = await start_node(tmp_path)
    try:
        victim_id = addr.rsplit("/", 1)[1]
        with trio.fail_after(120):
            async with open_hosts(1, "honest") as (honest,), open_plain_gossip_peer("abuser") as atk:
                await honest.connect(addr)
                await atk.connect(addr)
                started = trio.current_time()
                abuses = 0
                while abuses < 40:
                    try:  # a 2^31-byte frame announced on a stream whose cap is 64 B, then nothing
                        stream = await open_raw_stream(atk, victim_id, protocols.BLOB)
                        await stream.write(encode_uvarint(1 << 31))
                    except Exception:  # noqa: BLE001 - refused or cut off: what the node should do
                        pass
                    abuses += 1
                    if abuses % 5 == 0:
                        if atk.peer_id in (await status(data_dir))["banned"]:
                            break
                    await trio.sleep(0.05)
                snap = await wait_for_ban(data_dir, atk.peer_id)
                took = trio.current_time() - started
                # the honest peer still gets its sync answered (an empty list of tasks, not a reset)
                with trio.fail_after(2):
                    answer = await honest.request(victim_id, protocols.SYNC, b"\x81\xa5tasks\x90", timeout=2)
                assert answer, "the honest request was not answered"
        record = snap["reputation"][atk.peer_id]
        print(f"stream abuse: banned by the ledger after {abuses} oversized frames in {took:.1f}s "
              f"({record['ban_reason']}), peak RSS {rss_kb(proc.pid) // 1024} MB")
        assert "stream-abuse" in record["ban_reason"]
        assert record["rejected"].get("stream-abuse", 0) >= 1
        assert rss_kb(proc.pid) < RSS_BOUND_KB
    finally:
        stop_processes([proc])
