"""Task params: one model for files, scenarios and the network; a bad value refuses the task, naming the key."""

import pytest

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, Emit, LocalCommand, MessageVerdict
from swarm.taskparams import ParamError, TaskParams
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet


def star(n: int) -> tuple[MemoryNet, list[str]]:
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(), seed=i) for i in range(n)]
    net = MemoryNet(cores, T0)
    net.start()
    ids = [c.peer_id for c in cores]
    for p in ids[1:]:
        net.connect(ids[0], p)
    return net, ids


def test_known_keys_parse_with_defaults_and_float_from_integer():
    p = TaskParams.from_params({"group_size": 4, "republish_interval": 60, "weights_dtype": "fp16"})
    assert (p.group_size, p.prompts_per_step, p.republish_interval, p.weights_dtype) == (4, 16, 60.0, "fp16")
    assert type(p.republish_interval) is float and p.lr is None  # None: the trainer's own default


@pytest.mark.parametrize("params, message", [
    ({"colour": 1}, "task param colour: unknown key"),
    ({"group_size": 0}, "task param group_size: must be > 0, got 0"),
    ({"group_size": "16"}, "task param group_size: must be an integer, not str '16'"),
    ({"group_size": 16.0}, "task param group_size: must be an integer, not float 16.0"),
    ({"decoupled": 1}, "task param decoupled: must be true or false, not int 1"),
    ({"prompts_per_commit": True}, "task param prompts_per_commit: must be an integer, not bool True"),
    ({"validate_fraction": 1.5}, "task param validate_fraction: must be <= 1, got 1.5"),
    ({"weights_dtype": "fp8"}, "task param weights_dtype: must be 'bf16', 'fp16' or 'fp32', not 'fp8'"),
    ({"beta2": 1.0}, "task param beta2: must be < 1, got 1"),
])
def test_bad_params_are_refused_naming_the_key_never_defaulted(params, message):
    with pytest.raises(ParamError) as err:
        TaskParams.from_params(params)
    assert message in str(err.value)


def test_the_parse_cache_tells_true_from_one():
    assert TaskParams.from_params({"decoupled": True}).decoupled is True
    with pytest.raises(ParamError, match="decoupled"):
        TaskParams.from_params({"decoupled": 1})  # equal to True, and hashes the same: still refused
    assert TaskParams.from_params({"group_size": 16}).group_size == 16
    with pytest.raises(ParamError, match="group_size"):
        TaskParams.from_params({"group_size": 16.0})


def test_a_task_with_a_bad_param_from_the_network_is_refused_and_counted():
    net, ids = star(2)
    sender = net.cores[ids[1]].identity
    bad = task(trainer_keys=(sender.public_key,), params={"group_size": 4, "prompts_per_step": -2})
    effects = net.inject(ids[0], topics.TASKS, seal(sender, bad).wire, ids[1])
    assert effects[0] == MessageVerdict(False, "schema")
    rejected = [e for e in effects if isinstance(e, Emit) and e.event == "message-rejected"]
    assert "task param prompts_per_step: must be > 0, got -2" in rejected[0].fields["detail"]
    assert net.cores[ids[0]].ledger.totals_rejected["schema"] == 1
    assert bad.task_id not in net.cores[ids[0]].tasks.tasks, "never learned with a default in its place"
    unknown = task(trainer_keys=(sender.public_key,), params={"sampler": "plain"})
    assert net.inject(ids[0], topics.TASKS, seal(sender, unknown).wire, ids[1])[0] == MessageVerdict(False, "schema")


def test_announcing_a_task_with_a_bad_param_fails_with_the_reason():
    net, ids = star(1)
    t = task(trainer_keys=(net.cores[ids[0]].identity.public_key,), params={"lr": -1.0})
    effects = net.deliver(ids[0], LocalCommand(1, "announce-task", {"task": t}))
    result = [e for e in effects if isinstance(e, CommandResult)][0]
    assert not result.ok and "task param lr: must be > 0" in result.error
