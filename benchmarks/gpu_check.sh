#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU: install, certify every suite on cuda,
# PTX lint, the kernel tests' cuda cases, fold benchmark. Everything it learns lands in $OUT (default ./gpu-out): the cards,
# their meta (device, driver, versions), the lint and benchmark logs.
#   bash benchmarks/gpu_check.sh
# After a green run, copy $OUT/cards/cuda/<suite>.meta.json to cards/<suite>.cuda.meta.json
# and commit it: that file is what tells every later meta that a real GPU run happened.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"

python3 -m venv .venv-gpu && . .venv-gpu/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[test]' > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }

{ nvidia-smi || true; } > "$OUT/nvidia-smi.txt" 2>&1
mojolike backends | tee "$OUT/backends.txt"
mojolike certify --backend cuda --out "$OUT/cards" 2>&1 | tee "$OUT/certify.txt"
certify=${PIPESTATUS[0]}
MOJOLIKE_REQUIRE_PTX_LINT=1 python -m pytest -q tests/test_ptx_lint.py 2>&1 | tee "$OUT/ptx_lint.txt"
lint=${PIPESTATUS[0]}
# the kernel tests that have a real `cuda` parameter (skipped on machines without a GPU)
python -m pytest -q tests/test_crmath_kernels.py tests/test_loss_kernels.py \
    tests/test_schedule_kernels.py 2>&1 | tee "$OUT/kernel_tests.txt"
kernels=${PIPESTATUS[0]}
python benchmarks/fold.py --backends cpu-numba,cpu-cffi,cuda 2>&1 | tee "$OUT/bench_fold.txt"
echo "certify exit $certify, ptx lint exit $lint, kernel tests exit $kernels" | tee "$OUT/summary.txt"
[ "$certify" -eq 0 ] && [ "$lint" -eq 0 ] && [ "$kernels" -eq 0 ]
