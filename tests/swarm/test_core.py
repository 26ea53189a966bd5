import msgpack
import pytest

from gossip import topics
from gossip.envelope import seal
from gossip.identity import Identity
from gossip.messages import Probe, StatusHeartbeat
from swarm.core import CoreConfig, PeerCore
from swarm.io import (Ban, CommandResult, LocalCommand, MessageReceived, MessageVerdict, PeerConnected, Publish,
                      RequestReceived, Respond, Started, StreamAbuse, Subscribe, Tick)
from swarm.membership import MembershipConfig
from tests.samples import T0, task
from tests.swarm.harness import MemoryNet


def make_cores(n: int, roles: tuple[str, ...] = ("worker",), **membership) -> list[PeerCore]:
    """Workers by default: a relay gossips no heartbeat (CoreConfig.gossips_heartbeat), and most of
    these tests are about the gossiped ones; a worker with no task does nothing else."""
    cfg = CoreConfig(roles=roles, membership=MembershipConfig(**membership))
    return [PeerCore(Identity(bytes([i + 1]) * 32), cfg, seed=i) for i in range(n)]


def star(n: int, roles: tuple[str, ...] = ("worker",), **membership) -> tuple[MemoryNet, list[str]]:
    """n peers that know only peer 0 (the bootstrap)."""
    cores = make_cores(n, roles, **membership)
    net = MemoryNet(cores, T0)
    ids = [c.peer_id for c in cores]
    net.start()
    for p in ids[1:]:
        net.connect(ids[0], p)
    return net, ids


def announce(net: MemoryNet, peer: str, **overrides) -> str:
    t = task(trainer_keys=(net.cores[peer].identity.public_key,), **overrides)
    effects = net.deliver(peer, LocalCommand(1, "announce-task", {"task": t}))
    result = [e for e in effects if isinstance(e, CommandResult)][0]
    assert result.ok, result.error
    return result.result["task_id"]


def test_started_subscribes_and_schedules_heartbeat():
    core = make_cores(1)[0]
    effects = core.handle(T0, Started(("/ip4/127.0.0.1/tcp/1",)))
    assert {e.topic for e in effects if isinstance(e, Subscribe)} == set(topics.GLOBAL_TOPICS)
    assert core.next_deadline() > T0, "no heartbeat before there is anyone to hear it"
    core.handle(T0, PeerConnected("12D3KooWother"))
    assert core.next_deadline() == T0
    out = core.handle(T0, Tick())
    beat = [e for e in out if isinstance(e, Publish)]
    assert beat and beat[0].topic == topics.STATUS


def test_heartbeats_and_peer_exchange_connect_everyone():
    net, ids = star(6)
    net.run_for(10)
    for p in ids:
        snap = net.cores[p].snapshot(net.now)
        assert set(snap["alive"]) == set(ids) - {p}, p
        assert set(snap["connected"]) == set(ids) - {p}, "peer exchange dials beyond the bootstrap"
        for peer in snap["peers"]:
            assert peer["roles"] == ["worker"] and peer["last_seen_ago"] < 3


def test_swarm_survives_bootstrap_death():
    net, ids = star(5)
    net.run_for(10)
    net.stop(ids[0])
    net.run_for(30)
    for p in ids[1:]:
        snap = net.cores[p].snapshot(net.now)
        assert set(snap["alive"]) == set(ids[1:]) - {p}
        gone = [x for x in snap["peers"] if x["peer_id"] == ids[0]][0]
        assert gone["state"] == "gone"


def test_silent_peer_marked_gone_and_comes_back():
    net, ids = star(3, gone_after=6)
    net.run_for(6)
    net.stop(ids[2], silent=True)  # SIGSTOP: links stay, heartbeats stop
    net.run_for(10)
    state = {x["peer_id"]: x["state"] for x in net.cores[ids[0]].snapshot(net.now)["peers"]}
    assert state[ids[2]] == "gone" and state[ids[1]] == "alive"
    assert (ids[0], {"peer": ids[2]}) in [(p, {"peer": f["peer"]}) for p, f in net.events_named("peer-gone")]
    net.start(ids[2])
    for p in ids[:2]:
        net.connect(p, ids[2])
    net.run_for(5)
    state = {x["peer_id"]: x["state"] for x in net.cores[ids[0]].snapshot(net.now)["peers"]}
    assert state[ids[2]] == "alive"


def test_task_gossip_and_subscription():
    net, ids = star(4)
    net.run_for(3)
    task_id = announce(net, ids[2])
    for p in ids:
        snap = net.cores[p].snapshot(net.now)
        assert [t["task_id"] for t in snap["tasks"]] == [task_id]
        assert set(topics.task_topics(task_id)) <= net.subs[p]


def test_late_joiner_learns_task_through_sync():
    cores = make_cores(3)
    net = MemoryNet(cores, T0)
    a, b, late = (c.peer_id for c in cores)
    net.start(a)
    net.start(b)
    net.connect(a, b)
    task_id = announce(net, a)
    net.run_for(5)
    net.start(late)
    net.connect(late, b)
    net.run_for(5)
    assert [t["task_id"] for t in net.cores[late].snapshot(net.now)["tasks"]] == [task_id]


def test_expired_and_future_tasks_refused():
    net, ids = star(2)
    t = task(created_at=T0 - 10, expires_at=T0 - 1)
    wire = seal(net.cores[ids[1]].identity, t).wire
    verdict = net.inject(ids[0], topics.TASKS, wire, ids[1])[0]
    assert verdict == MessageVerdict(False, "out-of-window")
    t = task(created_at=T0 + 3600, expires_at=T0 + 7200)
    verdict = net.inject(ids[0], topics.TASKS, seal(net.cores[ids[1]].identity, t).wire, ids[1])[0]
    assert verdict == MessageVerdict(False, "out-of-window")


def test_replayed_heartbeat_and_message_rejected():
    net, ids = star(2)
    bob = net.cores[ids[1]]
    beat = StatusHeartbeat(seq=int(T0 * 1000) + 5, sent_at=T0, interval=2.0, roles=("worker",), agent="x", listen_addrs=(),
                           tasks=(), versions={}, known_peers=())
    wire = seal(bob.identity, beat).wire
    assert net.inject(ids[0], topics.STATUS, wire, ids[1])[0].accepted
    assert net.inject(ids[0], topics.STATUS, wire, ids[1])[0] == MessageVerdict(False, "duplicate")
    older = seal(bob.identity, StatusHeartbeat(**{**beat.__dict__, "seq": beat.seq - 1})).wire
    assert net.inject(ids[0], topics.STATUS, older, ids[1])[0] == MessageVerdict(False, "stale")
    stale = seal(bob.identity, Probe(seq=1, sent_at=T0 - 3600, payload=b"")).wire
    assert net.inject(ids[0], topics.PROBE, stale, ids[1])[0] == MessageVerdict(False, "out-of-window")
    rejected = net.cores[ids[0]].snapshot(net.now)["messages"]["rejected"]
    assert rejected == {"duplicate": 1, "stale": 1, "out-of-window": 1}


@pytest.mark.parametrize("data, topic, reason", [
    (b"\xc1garbage", topics.STATUS, "malformed"),
    (b"x" * 1_000_000, topics.STATUS, "oversized"),
    (None, "swarm/1/unknown-topic", "wrong-topic"),
    (None, topics.TASKS, "wrong-topic"),  # a probe on the tasks topic
])
def test_bad_input_counted_against_forwarder(data, topic, reason):
    net, ids = star(2)
    if data is None:
        data = seal(net.cores[ids[1]].identity, Probe(seq=1, sent_at=T0, payload=b"")).wire
    verdict = net.inject(ids[0], topic, data, ids[1])[0]
    assert verdict == MessageVerdict(False, reason)
    rep = net.cores[ids[0]].snapshot(net.now)["reputation"][ids[1]]
    assert rep["rejected"] == {reason: 1} and rep["score"] < 0


def test_persistent_garbage_gets_peer_banned_and_dropped():
    net, ids = star(3)
    net.run_for(4)
    effects = []
    for i in range(10):
        effects += net.inject(ids[0], topics.STATUS, b"\xc1" * (i + 1), ids[1])
    assert Ban(ids[1], "too many bad messages (malformed)") in effects
    assert frozenset((ids[0], ids[1])) not in net.links
    # Its further messages are dropped even when well-formed, and it is never redialled.
    good = seal(net.cores[ids[1]].identity, Probe(seq=99, sent_at=net.now, payload=b"")).wire
    assert net.inject(ids[0], topics.PROBE, good, ids[2])[0] == MessageVerdict(False, "banned")
    net.run_for(20)
    assert frozenset((ids[0], ids[1])) not in net.links
    assert ids[1] in net.cores[ids[0]].snapshot(net.now)["banned"]
    # Nothing already accepted was lost: the honest peer is still known and alive.
    assert ids[2] in net.cores[ids[0]].snapshot(net.now)["alive"]


def test_stream_abuse_the_transport_reports_costs_reputation_until_a_ban():
    """Idle, oversized or garbage streams never reach the core as messages; the host reports them
    (node/p2p/budget.py) and the ledger bans a repeat abuser, never an honest bystander."""
    net, ids = star(3)
    net.run_for(4)
    first = net.deliver(ids[0], StreamAbuse(ids[1], "request_idle"))
    assert not any(isinstance(e, Ban) for e in first), "one accident must not ban"
    effects = []
    for _ in range(10):
        effects += net.deliver(ids[0], StreamAbuse(ids[1], "request_too_large"))
    assert Ban(ids[1], "too many bad messages (stream-abuse)") in effects
    snap = net.cores[ids[0]].snapshot(net.now)
    assert ids[1] in snap["banned"] and ids[2] in snap["alive"]


def test_persistent_replayer_is_banned():
    net, ids = star(3)
    net.run_for(3)
    wire = seal(net.cores[ids[2]].identity, Probe(seq=1, sent_at=net.now, payload=b"")).wire
    assert net.inject(ids[0], topics.PROBE, wire, ids[1])[0].accepted
    effects = []
    for _ in range(400):
        effects += net.inject(ids[0], topics.PROBE, wire, ids[1])
    assert any(isinstance(e, Ban) and e.peer == ids[1] for e in effects)
    assert not net.cores[ids[0]].is_banned(ids[2]), "the signer of a replayed message is not at fault"


def test_spam_above_rate_limit():
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(sender_rate=10, sender_burst=20), seed=i)
             for i in range(2)]
    net = MemoryNet(cores, T0)
    a, b = (c.peer_id for c in cores)
    net.start()
    net.connect(a, b)
    verdicts = [net.inject(a, topics.PROBE, seal(cores[1].identity, Probe(seq=i, sent_at=T0, payload=b"")).wire, b)[0]
                for i in range(40)]
    assert sum(v.accepted for v in verdicts) == 20
    assert {v.reason for v in verdicts if not v.accepted} == {"rate-limited"}


def test_sync_request_garbage_is_answered_with_error():
    core = make_cores(1)[0]
    core.handle(T0, Started(()))
    out = core.handle(T0, RequestReceived("12D3KooWfake", "/swarm/sync/1", 7, b"\xc1"))
    assert Respond(7, error="malformed") in out
    out = core.handle(T0, RequestReceived("12D3KooWfake", "/swarm/sync/1", 8, msgpack.packb({"tasks": ["x"] * 99})))
    assert Respond(8, error="malformed") in out


def test_probe_latency_in_snapshot():
    net, ids = star(2)
    net.run_for(3)
    net.deliver(ids[1], LocalCommand(2, "probe", {"size": 1024}))
    lat = net.cores[ids[0]].snapshot(net.now)["gossip"]["latency"]
    assert lat["probe"]["n"] == 1 and lat["probe"]["p50_ms"] == 0.0


def test_snapshot_is_plain_json():
    import json
    net, ids = star(3)
    announce(net, ids[0])
    net.run_for(5)
    json.dumps(net.cores[ids[1]].snapshot(net.now))


def test_same_seed_same_effects():
    def run():
        net, ids = star(5)
        net.run_for(20)
        return [(p, repr(e)) for p, e in net.events], [net.cores[p].snapshot(net.now)["connected"] for p in ids]
    assert run() == run()


def test_heartbeat_interval_stretches_with_swarm_size_and_liveness_follows():
    net, ids = star(8, status_budget=2.0, gone_after=3.0)
    net.run_for(30)
    core = net.cores[ids[0]]
    assert core.membership.heartbeat_interval() == pytest.approx(8 / 2.0)
    # Peers declare their stretched interval, so nobody is marked gone though 4 s > gone_after.
    assert set(core.snapshot(net.now)["alive"]) == set(ids[1:])
    assert not net.events_named("peer-gone")


def test_shared_envelope_memo_gives_same_results():
    from gossip.envelope import EnvelopeMemo
    memo = EnvelopeMemo()
    cores = [PeerCore(Identity(bytes([i + 1]) * 32), CoreConfig(roles=("worker",)), seed=i, envelope_memo=memo)
             for i in range(4)]
    net = MemoryNet(cores, T0)
    ids = [c.peer_id for c in cores]
    net.start()
    for p in ids[1:]:
        net.connect(ids[0], p)
    net.run_for(10)
    assert memo.hits > 0
    for p in ids:
        assert set(net.cores[p].snapshot(net.now)["alive"]) == set(ids) - {p}
    assert net.inject(ids[0], topics.STATUS, b"\xc1", ids[1])[0] == MessageVerdict(False, "malformed")
    assert net.inject(ids[0], topics.STATUS, b"\xc1", ids[1])[0] == MessageVerdict(False, "malformed")


def test_partition_heals_and_sides_reconnect():
    net, ids = star(6, gone_after=4)
    net.run_for(10)
    left, right = ids[:3], ids[3:]
    for a in left:
        for b in right:
            net.disconnect(a, b)
    saved = net.connect
    net.connect = lambda a, b: None if (a in left) != (b in left) else saved(a, b)  # the partition
    net.run_for(20)
    assert all(x["state"] == "gone" for x in net.cores[left[0]].snapshot(net.now)["peers"] if x["peer_id"] in right)
    net.connect = saved  # healed
    net.run_for(120)
    for p in ids:
        assert set(net.cores[p].snapshot(net.now)["alive"]) == set(ids) - {p}


def test_late_delivery_is_blamed_on_the_forwarder_not_the_signer():
    net, ids = star(3)
    net.run_for(3)
    old = seal(net.cores[ids[2]].identity, Probe(seq=1, sent_at=net.now - 3600, payload=b"")).wire
    assert net.inject(ids[0], topics.PROBE, old, ids[1])[0] == MessageVerdict(False, "out-of-window")
    rep = net.cores[ids[0]].snapshot(net.now)["reputation"]
    assert rep[ids[1]]["rejected"] == {"out-of-window": 1}
    assert rep.get(ids[2], {}).get("rejected", {}) == {}


def test_dial_backoff_survives_endless_failures():
    from swarm.io import DialFailed
    net, ids = star(2)
    core = net.cores[ids[0]]
    core.membership.learn_addrs("12D3KooWdead", ("/mem/dead",))
    for _ in range(2000):
        core.handle(net.now, DialFailed("12D3KooWdead", "refused"))
    assert core.membership.peers["12D3KooWdead"].next_dial <= net.now + 300


def test_heartbeat_interval_is_bounded_by_the_schema():
    from gossip.messages import StatusHeartbeat
    core = make_cores(1, status_budget=0.01)[0]
    for i in range(200):  # each heard over its link (so vouched for), declaring a 1 s interval
        core.membership.on_heartbeat(T0, f"p{i}", StatusHeartbeat(
            seq=1, sent_at=T0, interval=1.0, roles=("worker",), agent="t", listen_addrs=(), tasks=(),
            versions={}, known_peers=()))
    assert core.membership.heartbeat_interval() == 3600.0


def test_first_heartbeat_waits_for_the_swarm_size_when_asked():
    """With first_beat_wait, the first heartbeat waits after the first link until a heartbeat declaring
    a swarm size arrives (then goes at once, declaring an interval for that size), or the wait ends."""
    core, other = make_cores(2, status_budget=0.3, first_beat_wait=2.0)
    core.handle(T0, Started(("/ip4/127.0.0.1/tcp/1",)))
    core.handle(T0, PeerConnected(other.peer_id))
    assert core.timers._due["heartbeat"] == T0 + 2.0
    heard = StatusHeartbeat(seq=int(T0 * 1000), sent_at=T0, interval=3000.0, roles=("relay",), agent="x",
                            listen_addrs=("/mem/x",), tasks=(), versions={}, known_peers=(), peers=900)
    out = core.handle(T0 + 0.5, MessageReceived(topics.STATUS, seal(other.identity, heard).wire, other.peer_id))
    assert out[0].accepted
    assert core.next_deadline() == T0 + 0.5
    (pub,) = [e for e in core.handle(T0 + 0.5, Tick()) if isinstance(e, Publish)]
    from gossip.envelope import open_envelope
    sent = open_envelope(pub.data).message
    assert sent.peers == 900 and sent.interval == pytest.approx(900 / 0.3)
    # A plain core (no wait) still heartbeats on its first link.
    plain = make_cores(1)[0]
    plain.handle(T0, Started(()))
    plain.handle(T0, PeerConnected(other.peer_id))
    assert plain.next_deadline() == T0
