#!/usr/bin/env bash
# Create (or reuse) the venv that runs mem0_runner.py: mem0 OSS 2.2.1 with its default local vector
# store (Qdrant in local mode, which needs nothing but qdrant-client). Never the project's venv: mem0's
# pins would fight ours. Idempotent: an existing venv with the pinned versions is left alone.
#
#   bash benchmarks/formation_quality/setup_mem0.sh      # last line printed: the venv's python
#
# MEM0_VENV   where the venv goes (default: ~/.cache/memory-proxy-bench/mem0-venv)
# PYTHON      interpreter to create it with (default: python3.11, else python3; mem0 needs >= 3.10)
set -euo pipefail

MEM0_VENV="${MEM0_VENV:-$HOME/.cache/memory-proxy-bench/mem0-venv}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
# mem0ai and what the runner relies on, at the versions the runner was verified with: qdrant-client
# (the local vector store) and openai (the client mem0 calls, wrapped by the runner to count calls).
PINS=(mem0ai==2.2.1 qdrant-client==1.20.0 openai==3.54.0)

pinned_ok() {
    "$MEM0_VENV/bin/python" - "${PINS[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(any(version(name) != want for name, want in (pin.split("==") for pin in sys.argv[1:])))
EOF
}

if [[ ! -x "$MEM0_VENV/bin/python" ]]; then
    echo "setup_mem0: creating venv $MEM0_VENV with $PYTHON" >&2
    mkdir -p "$(dirname "$MEM0_VENV")"
    "$PYTHON" -m venv "$MEM0_VENV"
fi

if pinned_ok; then
    echo "setup_mem0: $MEM0_VENV already has ${PINS[*]}" >&2
else
    echo "setup_mem0: installing ${PINS[*]} into $MEM0_VENV" >&2
    "$MEM0_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
    pinned_ok || { echo "setup_mem0: installed versions do not match ${PINS[*]}" >&2; exit 1; }
fi

echo "setup_mem0: ready; run mem0_runner.py with:" >&2
echo "$MEM0_VENV/bin/python"
