#!/usr/bin/env bash
# One command for the GPU machine: install ibp-graph into its python3, run the GPU tests,
# then the GPU benchmarks (decode kernels, then the loader). Writes pytest_gpu.txt,
# bench_gpu.{txt,json} and bench_loader_gpu.{txt,json} to
# ${OUT:-bench_out}; exits non-zero if any step fails (every step runs regardless, so one
# device session yields all the evidence).
#
#   bash scripts/gpu_check.sh                      # everything
#   PYTEST_ARGS="-x" BENCH_ARGS="--families embedding_f32" bash scripts/gpu_check.sh
#
# Pure-Python test dependencies the GPU machine lacks (pytest, hypothesis, ...) are
# installed from wheels in .whl/ when that folder exists (no network there).
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-bench_out}"
TEST_TIMEOUT="${TEST_TIMEOUT:-360}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-360}"
mkdir -p "$OUT_DIR"
status=0

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
"$PY" -m pip install -q --no-deps --no-build-isolation -e . || { echo "pip install -e . failed"; exit 1; }

echo "== GPU tests (pytest -m gpu)"
timeout "$TEST_TIMEOUT" "$PY" -m pytest -m gpu -q -p no:cacheprovider ${PYTEST_ARGS:-} \
    2>&1 | tee "$OUT_DIR/pytest_gpu.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "GPU tests FAILED (exit $rc)"; status=1; }

echo "== GPU benchmark"
timeout "$BENCH_TIMEOUT" "$PY" scripts/bench_gpu.py --out "$OUT_DIR/bench_gpu.json" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT_DIR/bench_gpu.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "GPU benchmark FAILED (exit $rc)"; status=1; }

echo "== GPU loader benchmark (ibp vs identity vs store vs features resident on the GPU)"
timeout "$BENCH_TIMEOUT" "$PY" scripts/bench_loader.py --device cuda --num-workers 4 \
    --num-nodes 2000000 --batch-size 1024 --num-neighbors 15 10 --batches 40 \
    --out "$OUT_DIR/bench_loader_gpu.json" 2>&1 | tee "$OUT_DIR/bench_loader_gpu.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "GPU loader benchmark FAILED (exit $rc)"; status=1; }

echo "== gpu_check: $([ $status -eq 0 ] && echo OK || echo FAILED); outputs in $OUT_DIR/"
exit $status
