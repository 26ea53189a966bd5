"""Peers of two releases side by side, in memory (gossip/release.py): what each announces, what an
unknown kind costs depending on what its signer announced, another major refused for free, and a task
that needs a capability a peer lacks refused in its status instead of attempted."""

import msgpack
import pytest

from gossip import topics
from gossip.envelope import pack_envelope, seal, signed_bytes
from gossip.identity import Identity
from gossip.messages import StatusHeartbeat
from gossip.release import UPTIME, UPTIME_TOPIC, UptimeReport
from swarm.core import CoreConfig, PeerCore
from swarm.io import CommandResult, LocalCommand, MessageVerdict
from swarm.taskparams import ParamError, TaskParams
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet
from tests.swarm.test_roles import fake_jobs


def pair(release_b: str = "next", roles=("worker",), hub: PeerCore | None = None):
    """Peer a on this release, b on `release_b`, linked (both to `hub` instead, when given). Workers with
    no task: they gossip heartbeats and what a release sends beside them (a relay sends neither)."""
    a = PeerCore(Identity(b"\x11" * 32), CoreConfig(roles=roles), seed=1)
    b = PeerCore(Identity(b"\x12" * 32), CoreConfig(roles=roles, release=release_b), seed=2)
    net = MemoryNet([a, b] + ([hub] if hub else []), T0)
    net.jobs = fake_jobs
    net.start()
    for x, y in [(hub, a), (hub, b)] if hub else [(a, b)]:
        net.connect(x.peer_id, y.peer_id)
    net.run_for(5)
    return net, a, b


def score(core: PeerCore, peer: str) -> float:
    return core.ledger.score(peer)


def test_two_releases_hear_each_other_and_the_new_kind_stays_among_the_newer():
    net, old, new = pair()
    assert old.membership.peers[new.peer_id].as_dict(net.now)["proto"] == "1.1 [uptime]"
    assert new.membership.peers[old.peer_id].as_dict(net.now)["proto"] == "1.0"
    assert old.snapshot(net.now)["messages"]["rejected"] == {} == new.snapshot(net.now)["messages"]["rejected"]
    assert UPTIME_TOPIC in net.subs[new.peer_id] and UPTIME_TOPIC not in net.subs[old.peer_id]
    assert new.stats.published[UPTIME_TOPIC] > 0 and old.stats.delivered_by_kind[UPTIME] == 0


def test_an_unknown_kind_is_ignored_from_a_newer_peer_and_penalised_from_a_peer_of_our_version():
    net, old, new = pair()
    before = score(old, new.peer_id)
    report = seal(new.identity, UptimeReport(sent_at=net.now, uptime=3.0)).wire  # on a topic old peers read
    assert net.inject(old.peer_id, topics.STATUS, report, new.peer_id)[0] == MessageVerdict(False, "newer-kind")
    assert score(old, new.peer_id) == before and not old.ledger.banned_peers()
    assert old.snapshot(net.now)["messages"]["rejected"] == {"newer-kind": 1}

    net, old, same = pair(release_b="current")
    before = score(old, same.peer_id)
    report = seal(same.identity, UptimeReport(sent_at=net.now, uptime=3.0)).wire  # it announced 1.0: garbage
    assert net.inject(old.peer_id, topics.STATUS, report, same.peer_id)[0] == MessageVerdict(False, "unknown-kind")
    assert score(old, same.peer_id) == before - 5.0


def test_a_stranger_claiming_nothing_pays_for_unknown_kinds_until_banned():
    net, old, _ = pair()
    stranger = Identity(b"\x33" * 32)
    for i in range(12):
        wire = seal(stranger, UptimeReport(sent_at=net.now, uptime=float(i))).wire
        net.inject(old.peer_id, topics.STATUS, wire, stranger.peer_id)
    assert stranger.peer_id in old.ledger.banned_peers()


def test_another_major_is_refused_without_a_penalty_and_its_volume_is_bounded():
    net, old, new = pair()
    body = msgpack.packb({"anything": 1})
    wires = [pack_envelope(2, "status", body + bytes([i]), new.identity.public_key,
                           new.identity.sign(signed_bytes(2, "status", body + bytes([i])))) for i in range(30)]
    verdicts = [net.inject(old.peer_id, topics.STATUS, w, new.peer_id)[0].reason for w in wires]
    assert verdicts[:20] == ["other-major"] * 20  # the forwarder's free allowance (FOREIGN_BURST)
    assert set(verdicts[20:]) == {"rate-limited"}
    assert not old.ledger.banned_peers()
    # A heartbeat announcing another major: refused politely, the peer is not taken for alive.
    stranger = Identity(b"\x34" * 32)
    beat = StatusHeartbeat(seq=1, sent_at=net.now, interval=2.0, roles=(), agent="swarm/2", listen_addrs=(), tasks=(),
                           versions={}, known_peers=(), proto_major=2)
    verdict = net.inject(old.peer_id, topics.STATUS, seal(stranger, beat).wire, stranger.peer_id)[0]
    assert verdict == MessageVerdict(False, "other-major")
    assert score(old, stranger.peer_id) == 0.0 and stranger.peer_id not in old.membership.alive_peers()


def test_a_peer_too_old_for_a_task_says_so_and_starts_nothing():
    trainer = PeerCore(Identity(b"\x01" * 32), CoreConfig(roles=("trainer",), release="next"), seed=3)
    net, old, new = pair(roles=("worker",), hub=trainer)
    t = task(trainer_keys=(trainer.identity.public_key,),
             params={"group_size": 4, "prompts_per_commit": 4, "prompts_per_step": 8, "requires": UPTIME})
    out = net.deliver(trainer.peer_id, LocalCommand(1, "announce-task", {"task": t}))
    assert [e for e in out if isinstance(e, CommandResult)][0].ok
    net.run_for(20)
    refused = old.snapshot(net.now)["work"]["worker"][t.task_id]["refused"]
    assert refused.startswith("refused: too old: the task requires uptime; this peer speaks 1.0")
    assert [p for p, _ in net.events_named("task-refused")] == [old.peer_id]
    assert not [j for p, j in net.jobs_run if p == old.peer_id and j.kind == "generate"]
    assert new.snapshot(net.now)["work"]["worker"][t.task_id]["commitments"] > 0
    assert trainer.snapshot(net.now)["work"]["trainer"][t.task_id]["version"] >= 2
    assert not any(c.ledger.banned_peers() for c in (old, new, trainer))


@pytest.mark.parametrize("bad", ["Uptime", "a,,b", "a,", ",".join(f"c{i}" for i in range(17)), "x" * 33, 1])
def test_requires_names_capabilities_or_refuses_the_task(bad):
    assert TaskParams.from_params({"requires": "uptime,x-1"}).required_caps == ("uptime", "x-1")
    assert TaskParams.from_params({}).required_caps == ()
    with pytest.raises(ParamError, match="requires"):
        TaskParams.from_params({"requires": bad})
