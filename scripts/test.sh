#!/usr/bin/env bash
# Set up .venv (if needed) and run the test suite; arguments go to pytest. It prints the 25 slowest
# tests, so a test that grew slow shows in every CI log.
#
#   bash scripts/test.sh                  # everything (what CI runs: .ci/run)
#   bash scripts/test.sh -m "not slow"    # the fast lane for development: no multi-process, model-loading
#                                         # or long simulator tests; a few minutes on a 2-core machine
#   bash scripts/test.sh tests/swarm -x   # one directory, stop at the first failure
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Several torch processes on 2 cores spin-wait without these (DESIGN.md).
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Two pytest workers (SWARM_TEST_WORKERS=0: one process), a test file per worker at a time so module
# fixtures are built once: most tests are one busy Python thread, and the multi-process ones mostly
# wait on their peers, so two lanes keep both cores busy. Tests assert on events, not on timing a
# loaded machine breaks, so they hold with a neighbour running.
workers=${SWARM_TEST_WORKERS:-2}
parallel=()
# Files go out in the order tests/conftest.py gives them (longest first), not by test count.
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder); fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
