"""Real `swarm-node` processes in the lab, two of them behind NAT routers (outbound only): a public
trainer, a public worker, a NATed worker (router "home") and a NATed mirror (router "office", so
the two NATed peers cannot reach each other either). The NATed worker's rollout batches are fetched
and trained on, and the NATed follower gets every version the trainer publishes. Every process is
stopped by PID (the lab's teardown backs that up)."""

from __future__ import annotations

import pytest

from netlab.lab import stop_all
from netlab.nodes import node_call, start_node
from node.records import read_records
from tests.netlab.conftest import add_nat_or_skip
from tests.node.helpers import wait_for

pytestmark = pytest.mark.slow
FAST = ["--heartbeat-interval", "0.5", "--gone-after", "4"]
TASK = {"task": {"name": "digit-sort-netlab", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                 "async_level": 2, "lifetime_hours": 1, "trainers": ["self"], "validators": [],
                 "params": {"group_size": 8, "prompts_per_commit": 2, "prompts_per_step": 4, "warmup_steps": 10,
                            "eval_prompts": 16, "max_new_tokens": 10, "lr": 3e-5}}}
VERSIONS = 3  # published versions (beyond the warm-up version 0) before the checks


def test_natted_worker_is_trained_on_and_natted_follower_gets_every_version(lab, tmp_path):
    add_nat_or_skip(lab, "home")
    add_nat_or_skip(lab, "office")
    where = {"trainer": lab.add_peer("trainer"), "public": lab.add_peer("public"),
             "natted": lab.add_peer("natted", nat="home"), "follower": lab.add_peer("follower", nat="office")}
    dirs = {name: tmp_path / name for name in where}
    procs = []

    def status(name):
        return node_call(lab, where[name], dirs[name], "status")

    try:
        proc, boot = start_node(lab, where["trainer"], ["--bootstrap", "--data-dir", str(dirs["trainer"]),
                                                        "--roles", "trainer", *FAST], dirs["trainer"] / "node.log")
        procs.append(proc)
        assert f"/ip4/{where['trainer'].ip}/" in boot
        for name, role in (("public", "worker"), ("natted", "worker"), ("follower", "mirror")):
            proc, _ = start_node(lab, where[name], ["--join", boot, "--data-dir", str(dirs[name]), "--roles", role,
                                                    *FAST], dirs[name] / "node.log")
            procs.append(proc)
        ids = {name: status(name)["peer_id"] for name in where}
        wait_for(lambda: len(status("trainer")["alive"]) == 3, 30, "every peer to join the trainer")
        node_call(lab, where["trainer"], dirs["trainer"], "announce-task", {"task": TASK})

        def trained_from(name):
            return [r for r in read_records(dirs["trainer"], "rollout-trained") if r["worker"] == ids[name]]

        def done():
            published = {r["version"] for r in read_records(dirs["trainer"], "version-published")}
            return trained_from("natted") and trained_from("public") and len(published) > VERSIONS
        wait_for(done, 240, "both workers trained on and more than 3 versions published")

        # Every version published so far (0 is the trainer's warm-up), each one, reaches the NATed follower.
        published = {r["version"] for r in read_records(dirs["trainer"], "version-published")}
        assert published == set(range(len(published)))

        def mirrored():
            return {r["version"] for r in read_records(dirs["follower"], "version-mirrored")}
        wait_for(lambda: published <= mirrored(), 30, f"the NATed follower to hold versions {sorted(published)}")
        installed = {r["version"] for r in read_records(dirs["natted"], "version-installed")}
        assert list(read_records(dirs["natted"], "rollouts-committed")), "the NATed worker committed rollouts"
        assert installed, "the NATed worker installed versions"
        # Nobody was punished for being behind NAT.
        for name in where:
            assert status(name)["banned"] == [], f"{name} banned someone"
    finally:
        codes = stop_all(procs)
    assert codes == [0, 0, 0, 0]
