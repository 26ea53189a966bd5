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


def _sample_by_randrange(rng: Rng, items: list, k: int) -> list:
    """`Rng.sample` as written before its draws were inlined: a partial Fisher-Yates on `randrange`."""
    pool = list(items)
    k = min(k, len(pool))
    for i in range(k):
        j = i + rng.randrange(len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def test_sample_draws_what_a_fisher_yates_on_randrange_draws():
    sizes = Rng(12)
    for case in range(2000):
        n, k = sizes.randrange(70), sizes.randrange(80)
        seed = sizes.next_u64()
        a, b = Rng(seed), Rng(seed)
        items = list(range(n))
        assert a.sample(items, k) == _sample_by_randrange(b, items, k)
        assert a.next_u64() == b.next_u64()  # the streams stay in step
