"""`Rng.sample_positions` draws what `Rng.sample` draws: the simulator swaps one for the other on a
hot path, and a trace hash must not notice."""

from swarm.rng import Rng


def test_sample_positions_pick_what_sample_picks_and_consume_the_same_numbers():
    sizes = Rng(11)
    for case in range(300):
        n, k = sizes.randrange(40), sizes.randrange(12)
        a, b = Rng(case), Rng(case)
        items = [f"p{i}" for i in range(n)]
        assert [items[p] for p in b.sample_positions(n, k)] == a.sample(items, k)
        assert a.next_u64() == b.next_u64()  # the streams stay in step
