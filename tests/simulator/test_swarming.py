"""simulator/swarming.py: the shard exchange over the bandwidth model, swarm vs a single-origin star."""

from simulator.swarming import SwarmingConfig, compare, run_swarming


def test_swarm_beats_the_star_and_everyone_gets_the_version():
    both = compare(peers=12, size_mb=8, mbps=50)
    swarm, star = both["swarm"], both["star"]
    assert swarm["completed"] == star["completed"] == 12
    assert star["trainer_upload_x"] == 12.0, "in the star only the origin serves: one copy per peer"
    assert swarm["trainer_upload_x"] < 4, "in the swarm peers serve each other"
    assert swarm["reach_95_s"] < star["reach_95_s"] / 2
    assert swarm["ratio_95"] >= 1.0 and 11 <= star["ratio_95"] <= 13  # star ~ N * size / bandwidth


def test_same_seed_same_result():
    cfg = SwarmingConfig(peers=8, size_mb=4, seed=3)
    assert run_swarming(cfg) == run_swarming(cfg)


def test_the_simulated_exchange_is_the_nodes():
    """The figures bench/weights.py reports are for the settings the node runs (swarm/roles/shards.py)."""
    from simulator.swarming import exchange_config
    from swarm.exchange import ExchangeConfig

    assert exchange_config(SwarmingConfig()) == ExchangeConfig()
