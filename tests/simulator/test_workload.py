"""Jobs: executors by kind, virtual durations, honest vs forged results, slots, unknown kinds.

The roles' own kinds (init, generate, verify, train, unpack) go to simulator/rolejobs.py
(tests/simulator/test_roles.py); these tests drive the generic executors with kinds of their own: a
tiny fake core (tests only) turns a local command into RunJob and records the JobFinished it gets back.
"""

import pytest

from simulator import adversaries
from simulator.run import prepare
from simulator.trace import Trace
from simulator.workload import CostModelExecutor, CostResult, JobContext, JobRegistry, register_real_function
from swarm.core import PeerCore
from swarm.io import CommandResult, JobFinished, LocalCommand, RunJob
from swarm.rng import Rng

from tests.simulator.helpers import tiny


class JobEmittingCore(PeerCore):
    """PeerCore plus a 'fake-job' command that emits RunJob, and a log of JobFinished inputs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.finished: list[tuple[float, JobFinished]] = []

    def handle(self, now, inp):
        if isinstance(inp, LocalCommand) and inp.name == "fake-job":
            return [RunJob(inp.args["job_id"], inp.args["kind"], inp.args.get("payload")),
                    CommandResult(inp.command_id, True)]
        if isinstance(inp, JobFinished):
            self.finished.append((now, inp))
        return super().handle(now, inp)


JOBS = """
job_slots = 1
[jobs.rollout]
seconds = 20
[jobs.check]
seconds = 2
jitter = 0.5
[jobs.square]
mode = "real"
function = "test-square"
seconds = 1
"""

register_real_function("test-square", lambda payload: payload * payload)


def _sim():
    s = tiny(peers=2, duration=200, extra="")
    s = type(s)(**{**s.__dict__, "jobs": {}})  # start clean, then load the job table through the parser
    from simulator.scenario import loads
    s = loads(f'name = "jobs"\nduration = 200\n{JOBS}\n[[peers]]\nname = "p"\ncount = 2\n')
    sim, _ = prepare(s, Trace(), core_factory=JobEmittingCore)
    sim.loop.run(5.0)
    return sim


def test_cost_model_job_finishes_after_its_virtual_duration_with_an_honest_result():
    sim = _sim()
    core = sim.nodes[0].core
    sim.command(0, "fake-job", {"job_id": 1, "kind": "rollout", "payload": {"prompts": [1, 2]}})
    sim.loop.run(24.9)
    assert core.finished == []
    sim.loop.run(25.1)
    (at, fin), = core.finished
    assert fin.ok and fin.job_id == 1
    assert at - 1.8e9 == pytest.approx(25.0, abs=1e-6)
    assert isinstance(fin.result, CostResult) and fin.result.honest and fin.result.producer == sim.nodes[0].peer_id
    assert fin.result.payload == {"prompts": [1, 2]}


def test_jobs_queue_on_slots_and_unknown_kinds_fail():
    sim = _sim()
    core = sim.nodes[1].core
    sim.command(1, "fake-job", {"job_id": 1, "kind": "rollout"})
    sim.command(1, "fake-job", {"job_id": 2, "kind": "rollout"})
    sim.command(1, "fake-job", {"job_id": 3, "kind": "no-such-kind"})
    sim.loop.run(100.0)
    done = {fin.job_id: (round(at - 1.8e9, 6), fin) for at, fin in core.finished}
    assert done[1][0] == pytest.approx(25.0) and done[2][0] == pytest.approx(45.0)  # one slot: one after the other
    assert not done[3][1].ok and "no executor" in done[3][1].error


def test_real_executor_computes_the_result_with_a_virtual_duration():
    sim = _sim()
    sim.command(0, "fake-job", {"job_id": 9, "kind": "square", "payload": 12})
    sim.loop.run(10.0)
    (at, fin), = sim.nodes[0].core.finished
    assert fin.ok and fin.result == 144 and at - 1.8e9 == pytest.approx(6.0)


def test_forging_peer_results_are_marked_forged():
    sim = _sim()

    class Forger(adversaries.Behaviour):
        kind = "test-forger"
        forges_jobs = True

    sim.nodes[0].behaviour = Forger({}, adversaries.GroupController("g", 1))
    sim.command(0, "fake-job", {"job_id": 5, "kind": "rollout"})
    sim.command(1, "fake-job", {"job_id": 5, "kind": "rollout"})
    sim.loop.run(40.0)
    assert sim.nodes[0].core.finished[0][1].result.honest is False
    assert sim.nodes[1].core.finished[0][1].result.honest is True


def test_jobs_die_with_a_crashed_peer():
    sim = _sim()
    core = sim.nodes[0].core
    sim.command(0, "fake-job", {"job_id": 1, "kind": "rollout"})
    sim.loop.run(10.0)
    sim.stop_peer(0, "crash")
    sim.start_peer(0)
    sim.loop.run(60.0)
    assert core.finished == [] and sim.nodes[0].core.finished == []


def test_registry_and_cost_model_validation():
    reg = JobRegistry()
    reg.register("train", CostModelExecutor(seconds=60, jitter=0.1))
    assert reg.kinds() == ["train"] and reg.get("verify") is None
    with pytest.raises(ValueError):
        CostModelExecutor(seconds=-1)
    ctx = JobContext(0, "p", 1, "train", None, False, Rng(3))
    d = reg.get("train").run(ctx).duration
    assert 54 <= d <= 66
    assert reg.get("train").run(JobContext(0, "p", 1, "train", None, False, Rng(3))).duration == d
