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
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
