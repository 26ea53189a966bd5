"""Test order for the two-worker CI run (scripts/test.sh: xdist, one file per worker at a time).

xdist hands out files in collection order (scripts/test.sh turns off its default reordering by test
count, which put the one-test files that take a minute or two last, where one worker ran them while
the other sat idle). Longest first is the classic fix for that tail: the files below, the slowest in
CI's `--durations` list, start first; every other file keeps its place. A file missing from the list
only loses its head start.
"""

LONGEST_FIRST = (
    "tests/simulator/test_scenarios.py",  # one unit: the shipped scenarios' runs are shared by its tests
    "tests/adversarial_net/test_local_peer_death.py",
    "tests/simulator/test_failover.py",
    "tests/node/test_local_failover.py",
    "tests/netlab/test_nodes_nat.py",
    "tests/node/test_local_resume.py",
    "tests/node/test_quorum_multiprocess.py",
    "tests/simulator/test_realjobs.py",
    "tests/netlab/test_reachability.py",
    "tests/trainer/test_smollm2.py",
    "tests/trainer/test_warmup.py",
    "tests/proofs/test_detection_bound.py",
    "tests/node/test_crash_restart.py",
    "tests/node/test_local_trainers.py",
    "tests/node/test_malicious.py",
    "tests/adversarial_net/test_sybil_budgets.py",
)


def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))
