"""Real libp2p nodes in one trio process: peers meet, tasks spread, blobs and control API work."""

import trio

from node import control
from node.config import NodeConfig
from node.runtime import run_node


async def wait_until(predicate, timeout=20.0, step=0.1):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(step)


async def status(data_dir):
    return await trio.to_thread.run_sync(control.call, data_dir, "status")


async def test_three_nodes_meet_and_learn_a_task(tmp_path):
    dirs = [tmp_path / f"n{i}" for i in range(3)]
    async with trio.open_nursery() as nursery:
        boot = await nursery.start(run_node, NodeConfig(data_dir=dirs[0], heartbeat_interval=0.5, gone_after=3.0))
        for d in dirs[1:]:
            await nursery.start(run_node, NodeConfig(data_dir=d, join=(boot[0],), heartbeat_interval=0.5, gone_after=3.0))
        views = {}

        async def refresh():
            for d in dirs:
                views[d] = await status(d)

        with trio.fail_after(30):
            while True:
                await refresh()
                if all(len(v["alive"]) == 2 and len(v["connected"]) == 2 for v in views.values()):
                    break
                await trio.sleep(0.3)
        # Peer exchange: the two joiners found each other, not only the bootstrap (both met it at once, so
        # the samples on their first links named nobody; a shuffle swapped newer ones, swarm/pings.py).
        assert views[dirs[2]]["peers"][0]["addrs"]
        table = {"task": {"name": "t", "model": "m", "env": "digit-sort"}}
        result = await trio.to_thread.run_sync(control.call, dirs[1], "announce-task", {"task": table})
        with trio.fail_after(20):
            while True:
                await refresh()
                if all([t["task_id"] for t in v["tasks"]] == [result["task_id"]] for v in views.values()):
                    break
                await trio.sleep(0.3)
        snap = views[dirs[0]]
        assert snap["messages"]["accepted"] > 0
        assert "status" not in snap["gossip"]["latency"], "relays know each other by their links: no heartbeat gossiped"
        await trio.to_thread.run_sync(control.call, dirs[0], "stop")
        await trio.to_thread.run_sync(control.call, dirs[1], "stop")
        await trio.to_thread.run_sync(control.call, dirs[2], "stop")


async def test_control_api_refuses_bad_token_and_unknown_command(tmp_path):
    import json
    import socket
    async with trio.open_nursery() as nursery:
        await nursery.start(run_node, NodeConfig(data_dir=tmp_path, heartbeat_interval=0.5, gone_after=3.0))
        info = json.loads((tmp_path / "control.json").read_text())
        assert (tmp_path / "control.json").stat().st_mode & 0o077 == 0

        def raw(request: bytes) -> dict:
            with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as sock:
                sock.sendall(request)
                return json.loads(sock.makefile().readline())
        assert not (await trio.to_thread.run_sync(raw, b'{"token": "wrong", "cmd": "status"}\n'))["ok"]
        assert not (await trio.to_thread.run_sync(raw, b'not json\n'))["ok"]
        try:
            await trio.to_thread.run_sync(control.call, tmp_path, "teleport")
        except control.ControlError as exc:
            assert "unknown command" in str(exc)
        else:
            raise AssertionError("unknown command accepted")
        await trio.to_thread.run_sync(control.call, tmp_path, "stop")
    assert not (tmp_path / "control.json").exists()
