#!/usr/bin/env bash
# LongMedia: run the GPU test layer (tests/gpu) on a GPU machine without network.
#
#     bash tools/gpu/run_tests.sh [tests/gpu/FILE ...] [pytest args]   # no file: all of tests/gpu
#
# From the repo root, with .whl/ and .comfy_src/ copied into it (see tools/gpu/README.md). It sources
# tools/gpu/bootstrap.sh when LONGMEDIA_COMFYUI_ROOT is not set yet (ComfyUI, comfy-aimdo,
# comfy-kitchen into /tmp/site), installs pytest from .whl_test/*.whl or .whl/ when the image
# has none (`pip download --no-deps -d .whl_test pytest pluggy iniconfig packaging pygments`
# on a networked machine), then runs tests/gpu on its own: tests/kernels' conftest would switch
# Triton to its interpreter. Results are also written to $OUT/gpu_tests.xml when $OUT is set.
set -u
cd "$(dirname "$0")/../.." || exit 1
if [ -z "${LONGMEDIA_COMFYUI_ROOT:-}" ]; then
    . tools/gpu/bootstrap.sh || exit 1
fi
if ! python3 -c "import pytest" 2>/dev/null; then
    wheels=$(ls .whl_test/*.whl .whl/pytest-*.whl .whl/pluggy-*.whl .whl/iniconfig-*.whl 2>/dev/null)
    if [ -z "$wheels" ]; then
        echo "run_tests: pytest is not installed and no pytest wheels in .whl_test/ or .whl/" >&2
        exit 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target "${LONGMEDIA_GPU_SITE:-/tmp/site}" $wheels \
        || { echo "run_tests: installing pytest wheels failed" >&2; exit 1; }
fi
unset TRITON_INTERPRET
junit=()
[ -n "${OUT:-}" ] && junit=(--junitxml "$OUT/gpu_tests.xml")
targets=(tests/gpu)
case "${1:-}" in tests/gpu*) targets=() ;; esac   # given test files: only those
PYTHONPATH="$(pwd):${PYTHONPATH:-}" exec python3 -m pytest -q -p no:cacheprovider "${junit[@]}" "${targets[@]}" "$@"
