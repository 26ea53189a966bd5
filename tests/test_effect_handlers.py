"""Every effect the core can emit is carried out by each of its three runtimes.

The node (node/driver.py), the simulator (simulator/sim.py) and the in-memory test harness
(tests/swarm/harness.py) each keep a dispatch table {effect class: handler}. A new effect class in
swarm/io.py that one of them lacks fails here, instead of being dropped (or crashing a run) later.
The effect classes are found in swarm/io.py itself, not only read from `ALL_EFFECTS`, so a class
missing from that tuple fails too.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from node.driver import CoreDriver
from simulator.sim import Simulation
from simulator.trace import Trace
from swarm import io
from tests.simulator.helpers import tiny
from tests.swarm.harness import MemoryNet


def defined_effects() -> set[type]:
    """The dataclasses swarm/io.py defines after its `Input` union: its effects section."""
    lines, _ = inspect.getsourcelines(io)
    input_line = next(n for n, line in enumerate(lines, 1) if line.startswith("Input = "))
    return {cls for cls in vars(io).values()
            if inspect.isclass(cls) and cls.__module__ == io.__name__ and dataclasses.is_dataclass(cls)
            and inspect.getsourcelines(cls)[1] > input_line}


def simulation(core_factory=None) -> Simulation:
    kwargs = {} if core_factory is None else {"core_factory": core_factory}
    return Simulation(tiny(peers=1, duration=10, settle=1), Trace(), **kwargs)


def tables() -> dict[str, dict]:
    return {"node/driver.py": CoreDriver.EFFECT_HANDLERS, "simulator/sim.py": simulation().effect_handlers,
            "tests/swarm/harness.py": MemoryNet.EFFECT_HANDLERS}


def test_effects_are_found_in_swarm_io():
    effects = defined_effects()
    assert {io.Publish, io.RespondShard, io.CommandResult, io.MessageVerdict} <= effects
    assert not {io.Started, io.Tick, io.ShardSent} & effects  # inputs are not effects
    assert set(io.ALL_EFFECTS) == effects, "ALL_EFFECTS must list every effect class in swarm/io.py"
    assert len(io.ALL_EFFECTS) == len(effects)
    assert set(typing.get_args(io.Effect)) == effects, "the Effect union must name every effect class"


@pytest.mark.parametrize("runtime", ["node/driver.py", "simulator/sim.py", "tests/swarm/harness.py"])
def test_every_effect_has_a_handler(runtime):
    table = tables()[runtime]
    missing = sorted(cls.__name__ for cls in defined_effects() - set(table))
    assert not missing, f"{runtime} has no handler for {', '.join(missing)}"
    assert all(callable(handler) for handler in table.values())


@dataclasses.dataclass(frozen=True)
class Unknown:
    """An effect no runtime knows."""


class UnknownEmitter:
    """A core that answers any input with an effect no table holds."""

    peer_id = "peer-unknown"

    def __init__(self, *args, **kwargs) -> None:
        pass

    def handle(self, now, inp) -> list:
        return [Unknown()]

    def next_deadline(self):
        return None


def test_an_unknown_effect_is_an_error_not_dropped():
    driver = CoreDriver(UnknownEmitter(), host=None, nursery=None, log=lambda *a, **k: None)
    with pytest.raises(TypeError, match="no handler for effect Unknown"):
        driver.feed(io.Tick())
    net = MemoryNet([UnknownEmitter()], now=0.0)
    with pytest.raises(TypeError, match="no handler for effect Unknown"):
        net.deliver(UnknownEmitter.peer_id, io.Tick())
    sim = simulation(core_factory=UnknownEmitter)
    sim.create_peer(sim.scenario.peers[0])
    with pytest.raises(TypeError, match="no handler for effect Unknown"):
        sim.start_peer(0)
