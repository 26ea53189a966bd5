"""Pings on the virtual network: a ping's timeout is scheduled only when it can fire, and still fires then."""

from simulator import streams
from simulator.run import run_scenario
from swarm import protocols
from swarm.core import PeerCore
from swarm.io import RequestReceived, Respond, ResponseReceived, SendRequest
from tests.simulator.helpers import tiny

TIMEOUT = 5.0  # LinkConfig.ping_timeout


class Recording(PeerCore):
    """Records when each ping went out and how it ended; with `mute`, never answers one."""

    mute = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent: dict[int, float] = {}  # request id -> when
        self.ended: list[tuple[float, float, str | None]] = []  # (sent, ended, error)

    def handle(self, now: float, inp: object) -> list:
        effects = super().handle(now, inp)
        if isinstance(inp, ResponseReceived) and inp.protocol == protocols.PING and inp.request_id in self.sent:
            self.ended.append((self.sent.pop(inp.request_id), now, inp.error))
        if self.mute and isinstance(inp, RequestReceived) and inp.protocol == protocols.PING:
            effects = [e for e in effects if not isinstance(e, Respond)]
        for e in effects:
            if isinstance(e, SendRequest) and e.protocol == protocols.PING:
                self.sent[e.request_id] = now
        return effects


class Mute(Recording):
    mute = True


def _run(core_factory, monkeypatch):
    timeouts = []
    fire = streams.Streams._timeout
    monkeypatch.setattr(streams.Streams, "_timeout", lambda self, req: (timeouts.append(req.protocol), fire(self, req)))
    cores: list = []

    def factory(*args, **kwargs):
        cores.append(core_factory(*args, **kwargs))
        return cores[-1]

    run_scenario(tiny("pings", duration=90, peers=4), core_factory=factory)
    return cores, timeouts


def test_answered_pings_schedule_no_timeout(monkeypatch):
    cores, timeouts = _run(Recording, monkeypatch)
    answered = [end for core in cores for end in core.ended]
    assert len(answered) >= 8 and all(error is None for _, _, error in answered)
    assert protocols.PING not in timeouts  # nothing left in the loop to fire for them


def test_an_unanswered_ping_times_out_at_its_deadline(monkeypatch):
    cores, timeouts = _run(Mute, monkeypatch)
    ended = [end for core in cores for end in core.ended]
    assert ended and all(error == "timeout" and abs(end - sent - TIMEOUT) < 1e-6 for sent, end, error in ended)
    assert timeouts.count(protocols.PING) == len(ended)
