"""status shows who trains each task: the active trainer and its term, the standbys, this peer's own role."""

from tests.swarm.test_takeover import published, swarm


def chain_of(core, task_id, now):
    [t] = [t for t in core.snapshot(now)["tasks"] if t["task_id"] == task_id]
    return t["trainer_chain"]


def test_status_names_the_active_trainer_its_term_and_the_standbys():
    net, trainers, workers, task_id = swarm(n_trainers=2, n_workers=2)
    net.run_for(30)
    head = max(f["version"] for _, f in published(net))
    for core in trainers + workers:
        view = chain_of(core, task_id, net.now)
        assert view["active"]["peer_id"] == trainers[0].peer_id
        assert view["active"]["rank"] == 0 and view["active"]["term"] == 0
        assert head - 1 <= view["active"]["version"] <= head
        [standby] = view["standbys"]
        assert standby["peer_id"] == trainers[1].peer_id and standby["rank"] == 1 and standby["alive"]
        assert standby["version"] is not None and 0 <= standby["behind"] <= 2
    assert chain_of(trainers[0], task_id, net.now)["self"] == {"state": "active", "rank": 0, "term": 0,
                                                         "state_version": None, "state_behind": None}
    assert chain_of(trainers[1], task_id, net.now)["self"]["state"] == "standby"
    assert chain_of(trainers[1], task_id, net.now)["self"]["rank"] == 1
    assert chain_of(workers[0], task_id, net.now)["self"] is None


def test_after_a_takeover_status_shows_the_new_term_and_the_dead_standby():
    net, trainers, workers, task_id = swarm(n_trainers=2, n_workers=2)
    net.run_for(30)
    net.stop(trainers[0].peer_id)
    net.run_for(90)
    assert net.events_named("trainer-takeover")
    view = chain_of(workers[0], task_id, net.now)
    assert view["active"]["peer_id"] == trainers[1].peer_id
    assert view["active"]["rank"] == 1 and view["active"]["term"] == 1
    [old] = view["standbys"]
    assert old["peer_id"] == trainers[0].peer_id and old["rank"] == 0 and not old["alive"]
    assert chain_of(trainers[1], task_id, net.now)["self"] == {"state": "active", "rank": 1, "term": 1,
                                                         "state_version": None, "state_behind": None}
