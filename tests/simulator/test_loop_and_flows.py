"""The virtual clock and the fair-share bandwidth model."""

import pytest

from simulator.flows import FlowScheduler
from simulator.loop import EventLoop

MB = 1_000_000


def test_events_run_in_time_then_scheduling_order():
    loop, seen = EventLoop(), []
    loop.at(2.0, seen.append, "c")
    loop.at(1.0, seen.append, "a")
    loop.at(1.0, seen.append, "b")  # same instant: scheduling order
    loop.at(5.0, seen.append, "late")
    loop.run(3.0)
    assert seen == ["a", "b", "c"] and loop.now == 3.0
    loop.at(0.5, seen.append, "past")  # never runs before now
    loop.run(10.0)
    assert seen[-2:] == ["past", "late"]


def _flows(up_mbps: dict, down_mbps: dict):
    loop = EventLoop()
    sched = FlowScheduler(loop, lambda p: up_mbps[p] * 1e6 / 8, lambda p: down_mbps[p] * 1e6 / 8)
    return loop, sched


def test_50_megabytes_at_50_megabit_takes_8_seconds():
    loop, sched = _flows({0: 50, 1: 1000}, {0: 1000, 1: 1000})
    done = []
    sched.start(0, 1, 50 * MB, lambda f: done.append(loop.now))
    loop.run(100)
    assert done == [pytest.approx(8.0, abs=1e-6)]


def test_two_flows_from_one_uplink_share_it_fairly():
    loop, sched = _flows({0: 50, 1: 1000, 2: 1000}, {0: 1000, 1: 1000, 2: 1000})
    done = {}
    sched.start(0, 1, 50 * MB, lambda f: done.setdefault("a", loop.now))
    sched.start(0, 2, 50 * MB, lambda f: done.setdefault("b", loop.now))
    loop.run(100)
    assert done["a"] == pytest.approx(16.0, abs=1e-6) and done["b"] == pytest.approx(16.0, abs=1e-6)


def test_a_flow_that_ends_early_gives_its_share_back():
    loop, sched = _flows({0: 80, 1: 1000, 2: 1000}, {0: 1000, 1: 1000, 2: 1000})
    done = {}
    sched.start(0, 1, 10 * MB, lambda f: done.setdefault("short", loop.now))
    sched.start(0, 2, 50 * MB, lambda f: done.setdefault("long", loop.now))
    loop.run(100)
    # 40 Mbit/s each until the short one ends at 2 s (10 MB), then 80 Mbit/s for the remaining 40 MB: 4 s.
    assert done["short"] == pytest.approx(2.0, abs=1e-6)
    assert done["long"] == pytest.approx(6.0, abs=1e-6)


def test_max_min_fairness_across_uplinks_and_a_shared_downlink():
    # A (100 up) and B (10 up) both send to C (50 down): B is held by its own uplink at 10, A gets the
    # rest of C's downlink, 40, not an equal 25.
    loop, sched = _flows({0: 100, 1: 10, 2: 1000}, {0: 1000, 1: 1000, 2: 50})
    a = sched.start(0, 2, 100 * MB, lambda f: None)
    b = sched.start(1, 2, 100 * MB, lambda f: None)
    assert a.rate * 8 / 1e6 == pytest.approx(40.0) and b.rate * 8 / 1e6 == pytest.approx(10.0)


def test_cancelled_flow_never_completes_and_frees_bandwidth():
    loop, sched = _flows({0: 50, 1: 1000, 2: 1000}, {0: 1000, 1: 1000, 2: 1000})
    done = []
    first = sched.start(0, 1, 50 * MB, lambda f: done.append(("first", loop.now)))
    sched.start(0, 2, 50 * MB, lambda f: done.append(("second", loop.now)))
    loop.at(4.0, sched.cancel, first)
    loop.run(100)
    # second: 25 Mbit/s for 4 s (12.5 MB), then 50 Mbit/s for 37.5 MB (6 s) -> 10 s.
    assert done == [("second", pytest.approx(10.0, abs=1e-6))]



def test_a_flow_whose_rest_is_below_the_clock_resolution_completes():
    """Seen in `scale` at t = 180.85: a small flow left with 1.5e-6 bytes (above the byte tolerance)
    at 125 MB/s needs 1.2e-14 s, less than the clock can add to 180.85; it must complete, not be
    rescheduled at the same instant forever."""
    loop = EventLoop()
    done: list = []
    flows = FlowScheduler(loop, lambda p: 125e6, lambda p: 125e6)
    calls: list = []
    complete = flows._complete

    def counted(generation):
        calls.append(generation)
        if len(calls) > 1000:
            raise AssertionError("the flow is rescheduled at the same instant forever")
        complete(generation)
    flows._complete = counted

    def start():
        flow = flows.start(0, 1, 100, done.append)
        flow.remaining = 1.5e-6
        flows._reschedule()
    loop.at(180.84950788800023, start)
    loop.run(until=300)
    assert len(done) == 1 and len(calls) < 10
