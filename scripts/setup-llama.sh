#!/usr/bin/env bash
# A real LLM engine for tests/test_llm_real_engine.py (make setup-llama; not
# part of make setup): llama-cpp-python's OpenAI server, built from source by
# pip into the project's .venv (made by make setup), and a tiny random-weight
# model written by scripts/tiny_gguf.py from a fixed seed. Idempotent: a second
# run installs and writes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
LLAMA_CPP_PYTHON=0.3.36
GGUF=0.19.0
MODEL=${HUNTLB_LLAMA_MODEL:-.cache/llama/tiny.gguf}
LOG=.cache/setup-llama.log
mkdir -p .cache "$(dirname "$MODEL")"

[ -x "$VENV/bin/python" ] || { echo "setup-llama: no $VENV: run make setup first" >&2; exit 1; }
have() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]) != sys.argv[2])" "$1" "$2" 2>/dev/null; }

if have llama_cpp_python "$LLAMA_CPP_PYTHON" && have gguf "$GGUF"; then
    echo "setup-llama: llama-cpp-python $LLAMA_CPP_PYTHON and gguf $GGUF already in $VENV"
else
    printf 'setup-llama: pip install llama-cpp-python[server]==%s gguf==%s (llama.cpp compiles: minutes) ... ' "$LLAMA_CPP_PYTHON" "$GGUF"
    t0=$SECONDS
    # the build runs cmake and ninja; one job a core. LLAVA_BUILD=OFF skips the
    # multimodal library (mtmd), which the server imports only for image chat
    # formats: 354 s instead of 445 s here, the text server unchanged.
    if ! CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install \
        "llama-cpp-python[server]==$LLAMA_CPP_PYTHON" "gguf==$GGUF" >>"$LOG" 2>&1; then
        echo "FAILED; the end of $LOG:"
        tail -n 30 "$LOG" | sed 's/^/    /'
        exit 1
    fi
    echo "done ($((SECONDS - t0)) s)"
fi

if [ -s "$MODEL" ]; then
    echo "setup-llama: $MODEL already written"
else
    "$VENV/bin/python" scripts/tiny_gguf.py "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
fi
