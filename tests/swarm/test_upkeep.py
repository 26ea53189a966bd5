"""The maintain timer parks while a relay's links are full and wakes on its old beat when one closes
(swarm/upkeep.py): a big swarm of relays no longer wakes every peer every `maintain_interval` for nothing."""

from swarm.timers import Timers
from swarm.upkeep import NAME, MaintainClock
from tests.swarm.test_relays import swarm


def test_a_parked_clock_wakes_on_the_beat_it_would_have_kept():
    timers = Timers()
    clock = MaintainClock(timers, 10.0)
    clock.start(100.0)
    assert timers.due(NAME) == 110.0
    timers.pop_due(110.0)
    clock.ran(110.0, idle=False)
    assert timers.due(NAME) == 120.0
    timers.pop_due(120.0)
    clock.ran(120.0, idle=True)
    assert NAME not in timers
    clock.link_closed(164.5)  # it would have fired at 130, 140, ..., 170
    assert timers.due(NAME) == 170.0
    clock.link_closed(165.0)  # awake already: a second close changes nothing
    assert timers.due(NAME) == 170.0


def test_a_clock_parked_for_less_than_a_beat_wakes_when_it_was_due():
    timers = Timers()
    clock = MaintainClock(timers, 10.0)
    clock.ran(50.0, idle=True)
    clock.link_closed(52.0)
    assert timers.due(NAME) == 60.0


def test_relays_with_full_links_park_and_a_closed_link_is_replaced():
    net, relays, workers = swarm(8, 2)
    net.run_for(120)
    full = [r for r in relays if len(net.cores[r].membership.linked) >= 3]
    assert len(full) >= 6
    for r in full:
        assert NAME not in net.cores[r].timers, "a relay with its links full still wakes to maintain them"
    for w in workers:  # a role keeps it: its pass also retries dials to the holders of what it fetches
        assert net.cores[w].timers.due(NAME) is not None
    relay = full[-1]
    core = net.cores[relay]
    neighbour = sorted(core.membership.linked)[0]
    net.disconnect(relay, neighbour)
    assert core.timers.due(NAME) is not None, "a closed link woke the timer"
    net.run_for(30)
    assert len(core.membership.linked) >= 3, "the closed link was replaced"
    assert NAME not in core.timers, "parked again once the links are full"
