"""A members-only task (task param `member_topics`, swarm/memberlinks.py) between real peer processes on
127.0.0.1. Every peer keeps one link, and the trainer and the worker each join only a relay: the worker
finds the trainer by the trainer's heartbeat, which the relay carries, links to it, and they train over
that link, while the relay subscribes to none of the task's topics. Every process is stopped by PID."""

from __future__ import annotations

import pytest

from gossip import topics
from node import control
from node.procs import start_peer, stop_processes
from tests.node.helpers import FAST, wait_for

pytestmark = pytest.mark.slow
ONE_LINK = ["--target-connections", "1"]
TASK = {"task": {"name": "digit-sort-members", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                 "async_level": 4, "lifetime_hours": 1, "trainers": ["self"], "validators": [],
                 "params": {"group_size": 8, "prompts_per_commit": 2, "prompts_per_step": 4, "warmup_steps": 10,
                            "eval_prompts": 16, "max_new_tokens": 10, "member_topics": True}}}


def test_a_members_only_task_trains_over_a_member_link_and_the_relay_carries_none_of_it(tmp_path):
    relay, trainer, worker = (tmp_path / name for name in ("relay", "trainer", "worker"))
    procs = []
    try:
        proc, boot = start_peer(["--bootstrap", "--data-dir", str(relay), "--roles", "relay", *FAST, *ONE_LINK],
                                relay / "node.log")
        procs.append(proc)
        for data_dir, role in ((trainer, "trainer"), (worker, "worker")):
            proc, _ = start_peer(["--join", boot, "--data-dir", str(data_dir), "--roles", role, *FAST, *ONE_LINK],
                                 data_dir / "node.log")
            procs.append(proc)
        ids = {d: control.call(d, "status")["peer_id"] for d in (relay, trainer, worker)}
        control.call(trainer, "announce-task", {"task": TASK})
        task_id = wait_for(lambda: [t["task_id"] for t in control.call(relay, "status")["tasks"]], 30,
                           "the relay to learn the task")[0]
        wait_for(lambda: ids[trainer] in control.call(worker, "status")["connected"], 60,
                 "the worker to link to the trainer")
        wait_for(lambda: control.call(trainer, "status")["versions"].get(task_id, 0) >= 3, 240,
                 "the trainer to train on the worker's batches")

        def topic_row(data_dir, kind: str) -> dict:
            return control.call(data_dir, "status")["gossip"]["topics"].get(topics.task_topic(task_id, kind), {})
        for kind in (*topics.TASK_TOPIC_KINDS, topics.MEMBERS):
            assert not topic_row(relay, kind).get("accepted"), f"the relay was handed the task's {kind}"
        assert topic_row(worker, topics.MEMBERS).get("published", 0) > 0, "the worker beats on the members topic"
        assert topic_row(trainer, topics.MEMBERS).get("accepted", 0) > 0, "...and the trainer hears it there"
        assert topic_row(trainer, "rollouts").get("accepted", 0) > 0
        for d in (relay, trainer, worker):
            assert not control.call(d, "status")["banned"]
    finally:
        codes = stop_processes(procs)
    assert codes == [0, 0, 0]
