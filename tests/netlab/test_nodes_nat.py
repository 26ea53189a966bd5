"""A learning run in the lab: real `swarm-node` processes, three of them behind NAT routers
(outbound only): a public trainer and a public worker (both also relays, `--relay-service`), a
NATed worker behind router "home", a second NATed worker and a NATed mirror behind router "office"
(a NATed peer at home and one at the office cannot dial each other). Both NATed workers' rollout
batches are fetched and trained on (`rollout-trained` names them), the NATed follower gets every
version the trainer publishes, the NATed peers find themselves private and reserve on the public
relays, and the two NATed workers connect to each other (through a relay, then DCUtR). Every
process is stopped by PID (the lab's teardown backs that up)."""

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
             "natted": lab.add_peer("natted", nat="home"), "natted2": lab.add_peer("natted2", nat="office"),
             "follower": lab.add_peer("follower", nat="office")}
    dirs = {name: tmp_path / name for name in where}
    procs = []

    def status(name):
        return node_call(lab, where[name], dirs[name], "status")

    try:
        proc, boot = start_node(lab, where["trainer"], ["--bootstrap", "--data-dir", str(dirs["trainer"]),
                                                        "--roles", "trainer", "--relay-service", *FAST],
                                dirs["trainer"] / "node.log")
        procs.append(proc)
        assert f"/ip4/{where['trainer'].ip}/" in boot
        for name, role in (("public", "worker"), ("natted", "worker"), ("natted2", "worker"), ("follower", "mirror")):
            relay = ["--relay-service"] if name == "public" else []
            proc, _ = start_node(lab, where[name], ["--join", boot, "--data-dir", str(dirs[name]), "--roles", role,
                                                    *relay, *FAST], dirs[name] / "node.log")
            procs.append(proc)
        ids = {name: status(name)["peer_id"] for name in where}
        wait_for(lambda: len(status("trainer")["alive"]) == 4, 30, "every peer to join the trainer")
        node_call(lab, where["trainer"], dirs["trainer"], "announce-task", {"task": TASK})

        def trained_from(name):
            return [r for r in read_records(dirs["trainer"], "rollout-trained") if r["worker"] == ids[name]]

        def done():
            published = {r["version"] for r in read_records(dirs["trainer"], "version-published")}
            return (trained_from("natted") and trained_from("natted2") and trained_from("public")
                    and len(published) > VERSIONS)
        wait_for(done, 240, "all three workers trained on and more than 3 versions published")

        # Every version published so far (0 is the trainer's warm-up), each one, reaches the NATed follower.
        published = {r["version"] for r in read_records(dirs["trainer"], "version-published")}
        assert published == set(range(len(published)))

        def mirrored():
            return {r["version"] for r in read_records(dirs["follower"], "version-mirrored")}
        wait_for(lambda: published <= mirrored(), 30, f"the NATed follower to hold versions {sorted(published)}")
        for name in ("natted", "natted2"):
            assert list(read_records(dirs[name], "rollouts-committed")), f"{name} committed rollouts"
            assert {r["version"] for r in read_records(dirs[name], "version-installed")}, f"{name} installed versions"
        # Behind NAT, every NATed peer knows it and holds reservations on the public relays; the
        # NATed workers behind different routers reach each other (a relay circuit, then DCUtR).
        # (Peers behind the same router reach each other's dial-back, so "private" can take a few more
        # answers from public servers under load: waited for, not asserted at once.)
        for name in ("natted", "natted2", "follower"):
            wait_for(lambda: status(name)["reachability"]["status"] == "private"
                     and status(name)["reachability"]["relays"], 90, f"{name} private with a relay reservation")
        assert status("trainer")["reachability"]["status"] == "public"
        wait_for(lambda: ids["natted2"] in status("natted")["host"]["connected"], 60,
                 "the two NATed workers behind different routers connected")
        # Nobody was punished for being behind NAT.
        for name in where:
            assert status(name)["banned"] == [], f"{name} banned someone"
    finally:
        codes = stop_all(procs)
    assert codes == [0, 0, 0, 0, 0]
