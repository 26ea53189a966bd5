import os
import stat

import pytest

from gossip.identity import Identity
from node.keystore import KeyFileError, create_identity, key_path, load_identity, load_or_create_identity
from node.taskfile import EXAMPLE, TaskFileError, load_task_file, task_from_dict

T0 = 1_800_000_000.0


def test_identity_created_once_with_0600_and_reloaded(tmp_path):
    ident = load_or_create_identity(tmp_path / "d")
    assert stat.S_IMODE(key_path(tmp_path / "d").stat().st_mode) == 0o600
    assert load_or_create_identity(tmp_path / "d") == ident
    with pytest.raises(KeyFileError, match="already exists"):
        create_identity(tmp_path / "d")


def test_missing_corrupt_and_exposed_key_files(tmp_path):
    with pytest.raises(KeyFileError, match="swarm-node keygen"):
        load_identity(tmp_path)
    create_identity(tmp_path)
    path = key_path(tmp_path)
    path.write_text("swarm-ed25519-seed-v1\nnot-hex\n")
    with pytest.raises(KeyFileError, match="corrupt"):
        load_identity(tmp_path)
    path.write_text("garbage")
    with pytest.raises(KeyFileError, match="corrupt"):
        load_identity(tmp_path)
    path.write_text("swarm-ed25519-seed-v1\n" + "00" * 31 + "\n")  # 31 bytes
    with pytest.raises(KeyFileError, match="corrupt"):
        load_identity(tmp_path)
    path.write_text("swarm-ed25519-seed-v1\n" + "00" * 32 + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_identity(tmp_path)


def test_example_task_file_loads():
    me = Identity(bytes(32))
    task = load_task_file(EXAMPLE, me, T0)
    assert task.name == "digit-sort" and task.trainer_keys == (me.public_key,)
    assert task.expires_at == T0 + 168 * 3600 and task.params["group_size"] == 16


@pytest.mark.parametrize("table, message", [
    ({"task": {"name": "x", "model": "m"}}, "task.env: required"),
    ({"task": {"name": "x", "model": "m", "env": "e", "colour": 1}}, "task.colour: unknown key"),
    ({"task": {"name": "x", "model": "m", "env": 3}}, "task.env: must be a string, not int 3"),
    ({"task": {"name": "x", "model": "m", "env": "e", "async_level": True}}, "task.async_level: must be an integer"),
    ({"task": {"name": "x", "model": "m", "env": "e", "async_level": 99}}, "task.async_level: must be <= 16"),
    ({"task": {"name": "x", "model": "m", "env": "e", "lifetime_hours": 0}}, "task.lifetime_hours: must be > 0"),
    ({"task": {"name": "x", "model": "m", "env": "e", "trainers": ["bob"]}}, "task.trainers\\[0\\]"),
    ({"task": {"name": "x", "model": "m", "env": "e", "params": {"colour": 1}}}, "task param colour: unknown key"),
    ({"task": {"name": "x", "model": "m", "env": "e", "params": {"lr": -1}}}, "task param lr: must be > 0, got -1"),
    ({"task": {"name": "x", "model": "m", "env": "e", "params": {"lr": 1e-5, "lr_min": 2e-5}}},
     "task param lr_min \\(2e-05\\) must not be above lr"),
    ({"task": {"name": "x", "model": "m", "env": "e", "params": {"group_size": "16"}}},
     "task param group_size: must be an integer, not str"),
    ({"tasks": {}}, "exactly one \\[task\\] table"),
])
def test_task_file_errors_name_the_key(table, message):
    with pytest.raises(TaskFileError, match=message):
        task_from_dict(table, Identity(bytes(32)), T0)


def test_missing_and_invalid_toml(tmp_path):
    with pytest.raises(TaskFileError, match="no such file"):
        load_task_file(tmp_path / "nope.toml", Identity(bytes(32)), T0)
    (tmp_path / "bad.toml").write_text("[task\n")
    with pytest.raises(TaskFileError, match="not valid TOML"):
        load_task_file(tmp_path / "bad.toml", Identity(bytes(32)), T0)
