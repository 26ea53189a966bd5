"""A real cheater among real peer processes on 127.0.0.1: `swarm-node start --malicious
fabricated-tokens` (right answers with honestly computed logprobs and TOPLOC activations, which
only the sampling replay catches) is banned by every honest peer, and the trainer's records show
that none of its rollouts were trained on while an honest worker's were. Every process is stopped
by PID in a finally."""

from __future__ import annotations

from pathlib import Path

import pytest

from node import control
from node.procs import stop_processes
from node.records import read_records
from tests.node.helpers import start_trainer_with_workers, wait_for

pytestmark = pytest.mark.slow
TASK = {"task": {"name": "digit-sort-cheat", "model": "builtin:digit-sort-tiny", "env": "digit-sort",
                 "async_level": 2, "lifetime_hours": 1, "trainers": ["self"], "validators": [],
                 "params": {"group_size": 8, "prompts_per_commit": 2, "prompts_per_step": 4, "warmup_steps": 10,
                            "eval_prompts": 16, "max_new_tokens": 10, "lr": 3e-5}}}


def test_fabricating_worker_is_banned_by_everyone_and_never_trained_on(tmp_path):
    trainer, honest, cheater = (tmp_path / name for name in ("trainer", "honest", "cheater"))
    procs = []
    try:
        ids = start_trainer_with_workers(procs, trainer, [(honest, [], None),
                                                          (cheater, ["--malicious", "fabricated-tokens"], None)])
        control.call(trainer, "announce-task", {"task": TASK})

        def settled():
            banned = [ids[cheater] in control.call(d, "status")["banned"] for d in (trainer, honest)]
            trained = list(read_records(trainer, "rollout-trained"))
            return all(banned) and trained
        wait_for(settled, 150, "the cheater banned by both honest peers and a version trained")

        trained = list(read_records(trainer, "rollout-trained"))
        assert {r["worker"] for r in trained} == {ids[honest]}, "only the honest worker's rollouts were trained on"
        assert list(read_records(cheater, "rollouts-committed")), "the cheater did publish rollouts"
        bans = {d: [r for r in read_records(d, "peer-banned") if r["peer"] == ids[cheater]] for d in (trainer, honest)}
        assert "failed sampling" in bans[trainer][0]["reason"]  # its own re-check: the tokens were not sampled
        assert bans[honest] and "verdict by a trainer" in bans[honest][0]["reason"]
        for d in (trainer, honest):  # nobody honest was banned
            assert control.call(d, "status")["banned"] == [ids[cheater]]
        snap = control.call(trainer, "status")
        assert snap["reputation"][ids[cheater]]["banned"] and snap["reputation"][ids[honest]]["score"] > 0
    finally:
        codes = stop_processes(procs)
    assert codes == [0, 0, 0]


def test_status_text_shows_reputation_lowest_first():
    from node.status_text import render_status
    snap = {"peer_id": "me", "roles": ["worker"], "uptime": 3, "peers": [], "tasks": [], "banned": ["bad"],
            "messages": {"accepted": 5, "rejected": {"cheated": 1}},
            "reputation": {"good": {"accepted": 40, "rejected": {}, "score": 4.0, "banned": False, "ban_reason": ""},
                           "bad": {"accepted": 2, "rejected": {"cheated": 1}, "score": -100.0, "banned": True,
                                   "ban_reason": "failed sampling (verdict by a trainer)"}}}
    text = render_status(snap).splitlines()
    at = text.index("reputation (this node's own ledger, lowest score first):")
    assert text[at + 1].startswith("  bad  score -100.0  accepted 2  rejected: cheated 1  BANNED: failed sampling")
    assert text[at + 2] == "  good  score +4.0  accepted 40"


def test_malicious_flags_are_checked():
    from node.cli import parse_malicious
    from node.config import NodeConfig
    from node.config_file import ConfigError, check_value

    assert parse_malicious(["1:other-model", "2:replay"], 5) == ["other-model", "replay", "replay"]
    for bad, peers in ((["1:polite"], 5), (["0:replay"], 5), (["replay"], 5), (["2:replay"], 3)):
        with pytest.raises(ValueError):
            parse_malicious(bad, peers)
    with pytest.raises(ValueError, match="unknown malicious kind"):
        NodeConfig(data_dir=Path("."), malicious="polite")
    with pytest.raises(ConfigError):
        check_value("malicious", "polite")
    assert check_value("malicious", "lying-validator") == "lying-validator"
