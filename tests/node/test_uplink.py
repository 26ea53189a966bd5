"""node/uplink.py: the emulated per-peer uplink (off by default) serialises shard answers at its rate."""

import pytest
import trio
import trio.testing

from node.config import NodeConfig
from node.uplink import Uplink


def test_answers_leave_one_after_another_at_the_rate():
    done = {}

    async def main():
        link = Uplink(8.0)  # 1e6 bytes/s
        t0 = trio.current_time()

        async def send(name, n):
            await link.send(n)
            done[name] = trio.current_time() - t0

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "a", 1_000_000)
            await trio.sleep(0)
            nursery.start_soon(send, "b", 500_000)
        assert link.bytes_sent == 1_500_000

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert done["a"] == pytest.approx(1.0)
    assert done["b"] == pytest.approx(1.5), "the second answer waits for the first (one link)"


def test_off_by_default_and_positive_when_set(tmp_path):
    assert NodeConfig(data_dir=tmp_path).upload_mbps is None
    with pytest.raises(ValueError):
        NodeConfig(data_dir=tmp_path, upload_mbps=0)
    with pytest.raises(ValueError):
        Uplink(-1)
