"""Task files for environments and models from packages: [task.params.env.*] sub-tables flattened,
and the pins (env_version, model_hash) filled in from the announcing node's own installation."""

import tomllib

import pytest

from gossip.identity import Identity
from node.taskfile import TaskFileError, fill_pins, task_from_dict
from swarm.taskparams import TaskParams, env_options
from tests.hfcache import REVISION, add_model
from trainer.envs_rg import installed_version

T0 = 1_800_000_000.0
RG = """
[task]
name = "rg"
model = "builtin:digit-sort-tiny"
env = "reasoning-gym:basic_arithmetic,chain_sum"
[task.params]
max_new_tokens = 32
[task.params.env.basic_arithmetic]
max_terms = 2
operators = "+,-"
[task.params.env.chain_sum]
weight = 2
"""


def test_env_sub_tables_are_flattened_and_the_generator_version_filled_in():
    table = fill_pins(tomllib.loads(RG))
    task = task_from_dict(table, Identity(bytes(32)), T0)
    assert task.params["env_version"] == f"reasoning-gym=={installed_version()}"
    assert env_options(task.params) == {"basic_arithmetic.max_terms": 2, "basic_arithmetic.operators": "+,-",
                                        "chain_sum.weight": 2}
    assert TaskParams.of(task).max_new_tokens == 32
    # a pin the file sets is kept: the announcer may ask for another version than it has
    other = tomllib.loads(RG.replace("max_new_tokens = 32", 'max_new_tokens = 32\nenv_version = "reasoning-gym==0.1.24"'))
    assert fill_pins(other)["task"]["params"]["env_version"] == "reasoning-gym==0.1.24"


def test_what_the_announcer_cannot_run_is_not_announced(tmp_path, monkeypatch):
    bad = tomllib.loads(RG.replace("chain_sum]", "no_such_task]"))
    with pytest.raises(TaskFileError, match="does not include|has no task"):
        fill_pins(bad)
    with pytest.raises(TaskFileError, match="must be a number, string or boolean"):
        task_from_dict(tomllib.loads(RG.replace('"+,-"', '["+", "-"]')), Identity(bytes(32)), T0)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf = tomllib.loads(RG.replace('"builtin:digit-sort-tiny"', f'"hf:org/model@{REVISION}"'))
    with pytest.raises(TaskFileError, match="cannot pin the model: .*hf download org/model"):
        fill_pins(hf)
    hf["task"]["params"]["env_version"] = "reasoning-gym==0.1.25"
    with pytest.raises(TaskFileError, match="model_hash .* is required for hf: models"):
        task_from_dict(hf, Identity(bytes(32)), T0)


def test_an_hf_model_is_pinned_by_its_content_hash(tmp_path, monkeypatch):
    from trainer.model import create_builtin_model, save_model

    source = save_model(*create_builtin_model(0), tmp_path / "m")
    name = add_model(tmp_path / "hub", "org/tiny", source)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    table = fill_pins({"task": {"name": "t", "model": name, "env": "digit-sort"}})
    assert set(table["task"]["params"]) == {"model_hash"} and len(table["task"]["params"]["model_hash"]) == 48
    assert task_from_dict(table, Identity(bytes(32)), T0).params["model_hash"] == table["task"]["params"]["model_hash"]


def test_status_text_says_why_a_task_is_refused():
    from node.status_text import render_status

    task = {"task_id": "abc", "name": "rg", "model": "smollm2-135m", "env": "reasoning-gym:chain_sum", "async_level": 2}
    snap = {"peer_id": "me", "roles": ["worker"], "uptime": 3, "peers": [], "tasks": [task], "messages": {},
            "work": {"worker": {"abc": {"refused": "refused: ... run `pip install 'reasoning-gym==0.1.25'`"}},
                     "validator": {"abc": {"refused": None}}}}
    text = render_status(snap).splitlines()
    at = text.index("  abc  rg  model=smollm2-135m  env=reasoning-gym:chain_sum  async_level=2")
    assert text[at + 1] == "    worker REFUSED: refused: ... run `pip install 'reasoning-gym==0.1.25'`"
    assert "validator" not in "".join(text)


def test_status_text_shows_the_task_summary():
    from node.status_text import render_status

    task = {"task_id": "abc", "name": "rg", "model": "m", "env": "e", "async_level": 2,
            "summary": {"signer": "t", "version": 41, "term": 1, "workers": 12, "completions": 3072, "versions": 16,
                        "trainers_alive": 2, "age": 7.4}}
    text = render_status({"peer_id": "me", "roles": ["relay"], "uptime": 3, "peers": [], "tasks": [task],
                          "messages": {}}).splitlines()
    at = text.index("  abc  rg  model=m  env=e  async_level=2")
    assert text[at + 1] == ("    summary: version 41 term 1, 12 workers and 3072 completions over 16 versions, "
                            "2 trainers alive (7 s ago)")


def test_status_text_names_the_protocol_and_peers_on_another_release():
    from node.status_text import render_status

    peers = [{"peer_id": "old", "state": "alive", "roles": ["worker"], "proto": "1.0"},
             {"peer_id": "new", "state": "alive", "roles": ["worker"], "proto": "1.1 [uptime]"}]
    text = render_status({"peer_id": "me", "roles": ["worker"], "uptime": 3, "peers": peers, "tasks": [],
                          "messages": {}, "protocol": "1.0"}).splitlines()
    assert text[0].endswith("protocol 1.0")
    assert [line.endswith("protocol 1.1 [uptime]") for line in text if line.startswith("  ")] == [False, True]
