#!/usr/bin/env bash
# One command for the GPU machine: install ibp-graph into its python3, run the GPU tests,
# then the GPU benchmarks (decode kernels, then the loader). Writes pytest_gpu.txt,
# bench_gpu.{txt,json} and bench_loader_gpu.{txt,json} to
# ${OUT:-bench_out}; exits non-zero if any step fails (every step runs regardless, so one
# device session yields all the evidence: hence no `set -e`).
#
#   bash scripts/gpu_check.sh                      # everything
#   PYTEST_ARGS="-x" BENCH_ARGS="--families embedding_f32" bash scripts/gpu_check.sh
#
# Time: the whole script keeps within BUDGET seconds (default 540, under the device tool's
# 600 s per command), so its summary is always printed: each step runs under its own
# timeout, cut to what the budget leaves after reserving time for the steps after it.
# Pure-Python test dependencies the GPU machine lacks (pytest, hypothesis, ...) are
# installed from wheels in .whl/ when that folder exists (no network there).
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-bench_out}"
BUDGET="${BUDGET:-540}"
TEST_TIMEOUT="${TEST_TIMEOUT:-300}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-200}"
LOADER_TIMEOUT="${LOADER_TIMEOUT:-120}"
mkdir -p "$OUT_DIR"
status=0
SECONDS=0

# step_timeout OWN KEEP: the step's own limit, cut to the budget left after keeping KEEP
# seconds for the steps after it (at least 30 s).
step_timeout() {
    local left=$((BUDGET - SECONDS - $2))
    [ "$left" -lt 30 ] && left=30
    echo $(($1 < left ? $1 : left))
}

echo "== environment"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader || true
"$PY" - <<'EOF' || status=1
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else "NONE")
try:
    import cupy
    from cupy_backends.cuda.libs import nvrtc
    print("cupy", cupy.__version__, "| nvrtc", nvrtc.getVersion())
except Exception as e:  # reported, and the tests below fail loudly
    print("cupy/nvrtc problem:", repr(e))
EOF

echo "== install"
if ! "$PY" -c "import pytest, hypothesis" 2>/dev/null; then
    if [ -d .whl ]; then
        "$PY" -m pip install -q --no-index --find-links .whl pytest hypothesis || status=1
    else
        echo "pytest/hypothesis missing and no .whl/ folder of wheels to install them from"
        status=1
    fi
fi
if ! "$PY" -m pip install -q --no-deps --no-build-isolation -e .; then
    # Not worth losing the device session over: run from the checkout. The packages that
    # pyproject.toml maps from other folders (ibp_graph.loaders, ibp_graph.kernels) are
    # linked into place (ignored by git), and the checkout goes on PYTHONPATH.
    echo "WARNING: pip install -e . failed; running from the checkout instead"
    for pkg in loaders kernels; do
        [ -e "ibp_graph/$pkg" ] || ln -s "../$pkg" "ibp_graph/$pkg"
    done
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c "import ibp_graph.loaders.pyg, ibp_graph.gpu.compiler as c; c.read_source('ibp_decode.cuh')" \
        || { echo "ibp_graph cannot be imported from the checkout either"; exit 1; }
fi

# check_rc STEP RC: report a failed step (124: its timeout) and remember the failure.
check_rc() {
    [ "$2" -eq 0 ] && return
    echo "$1 FAILED (exit $2$([ "$2" -eq 124 ] && echo ': timed out'))"
    status=1
}

t=$(step_timeout "$TEST_TIMEOUT" 180)
echo "== GPU tests (pytest -m gpu; timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=15 ${PYTEST_ARGS:-} \
    2>&1 | tee "$OUT_DIR/pytest_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "GPU tests" "$rc"

t=$(step_timeout "$BENCH_TIMEOUT" 70)
echo "== GPU benchmark (timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" scripts/bench_gpu.py --out "$OUT_DIR/bench_gpu.json" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT_DIR/bench_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "GPU benchmark" "$rc"

t=$(step_timeout "$LOADER_TIMEOUT" 0)
echo "== GPU loader benchmark (ibp vs identity vs store vs features resident on the GPU; timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" scripts/bench_loader.py --device cuda --num-workers 4 \
    --num-nodes 2000000 --batch-size 1024 --num-neighbors 15 10 --batches 40 \
    --out "$OUT_DIR/bench_loader_gpu.json" 2>&1 | tee "$OUT_DIR/bench_loader_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "GPU loader benchmark" "$rc"

echo "== gpu_check: $([ $status -eq 0 ] && echo OK || echo FAILED) in ${SECONDS}s; outputs in $OUT_DIR/"
exit $status
