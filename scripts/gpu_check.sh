#!/usr/bin/env bash
# One command for the GPU machine: install ibp-graph into its python3, run the GPU tests,
# the decode benchmark (per feature family: decode from device memory, zero-copy fetch vs
# the pinned-copy ceiling and the PCIe floor) and one loader epoch per feature mode on a
# 10M-node papers-like graph (identity-worker, auto-worker, auto-zero-copy, +cache,
# features resident on the GPU), then print ONE table of all of it
# (ibp_graph.benchmarks.gpu_check). Every GPU result is compared bit for bit with the CPU
# path before it is timed. Writes pytest_gpu.txt, bench_gpu.{txt,json},
# features_gpu.{txt,json} and gpu_check_table.txt to ${OUT:-bench_out}; exits non-zero if
# any step fails (every step runs regardless, so one device session yields all the
# evidence: hence no `set -e`).
#
#   bash scripts/gpu_check.sh                      # everything
#   PYTEST_ARGS="-x" BENCH_ARGS="--families embedding_f32" bash scripts/gpu_check.sh
#   DRY_RUN=1 bash scripts/gpu_check.sh            # no GPU: the CPU-side steps on tiny sizes
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
TEST_TIMEOUT="${TEST_TIMEOUT:-200}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-130}"
FEATURES_TIMEOUT="${FEATURES_TIMEOUT:-180}"
DRY_RUN="${DRY_RUN:-0}"
# the epoch benchmark's graph and loaders (FEATURES_ARGS overrides any of them)
FEATURES_NODES="${FEATURES_NODES:-10000000}"
FEATURES_WORKERS="${FEATURES_WORKERS:-12}"
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

if [ "$DRY_RUN" = 1 ]; then
    echo "== dry run: no GPU steps; the CPU-side steps on tiny sizes"
    BENCH_ARGS="--dry-run --families embedding_f32 --table-rows 4096 --base-rows 2048 ${BENCH_ARGS:-}"
    FEATURES_DEVICE=cpu  # (argparse checks every --device given: "cuda" then "cpu" is refused here)
    FEATURES_ARGS="--num-nodes 8192 --base-rows 2048 --epoch-seeds 256 --batch-size 64 \
        --num-neighbors 4 2 --num-workers 0 --device-cache 100000 ${FEATURES_ARGS:-}"
fi

if [ "$DRY_RUN" != 1 ]; then
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

fi  # not a dry run

# check_rc STEP RC: report a failed step (124: its timeout) and remember the failure.
check_rc() {
    [ "$2" -eq 0 ] && return
    echo "$1 FAILED (exit $2$([ "$2" -eq 124 ] && echo ': timed out'))"
    status=1
}

if [ "$DRY_RUN" != 1 ]; then
t=$(step_timeout "$TEST_TIMEOUT" 320)
echo "== GPU tests (pytest -m gpu; timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=15 ${PYTEST_ARGS:-} \
    2>&1 | tee "$OUT_DIR/pytest_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "GPU tests" "$rc"
fi

t=$(step_timeout "$BENCH_TIMEOUT" 190)
echo "== decode benchmark (per family: device decode, zero-copy fetch; timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" scripts/bench_gpu.py --out "$OUT_DIR/bench_gpu.json" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT_DIR/bench_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "decode benchmark" "$rc"

t=$(step_timeout "$FEATURES_TIMEOUT" 10)
echo "== loader epoch per feature mode (timeout ${t}s, at ${SECONDS}s)"
timeout "$t" "$PY" scripts/bench_features.py --device "${FEATURES_DEVICE:-cuda}" --num-nodes "$FEATURES_NODES" \
    --num-workers "$FEATURES_WORKERS" --batch-size 1024 --num-neighbors 15 10 5 --epoch-seeds 65536 \
    --device-cache 1000000000 ${FEATURES_ARGS:-} --out "$OUT_DIR/features_gpu.json" \
    2>&1 | tee "$OUT_DIR/features_gpu.txt"
rc=${PIPESTATUS[0]}
check_rc "feature-mode epochs" "$rc"

echo "== gpu_check table (at ${SECONDS}s)"
"$PY" -m ibp_graph.benchmarks.gpu_check --gpu-json "$OUT_DIR/bench_gpu.json" \
    --features-json "$OUT_DIR/features_gpu.json" 2>&1 | tee "$OUT_DIR/gpu_check_table.txt"
rc=${PIPESTATUS[0]}
[ "$DRY_RUN" = 1 ] || check_rc "gpu_check table (a section missing or not exact)" "$rc"

echo "== gpu_check: $([ $status -eq 0 ] && echo OK || echo FAILED) in ${SECONDS}s; outputs in $OUT_DIR/"
exit $status
