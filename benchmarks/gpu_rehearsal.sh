#!/usr/bin/env bash
# Rehearse benchmarks/gpu_check.sh here, as the GPU machine will run it: a copy of the files
# the device tool sends (tracked and untracked, not ignored), a fresh venv holding only what that
# machine's python3 has (no cffi), no network (unshare -n; as root), and the CUDA kernels under
# numba's simulator standing in for the GPU (backend cuda-sim, in its worker process: with
# NUMBA_ENABLE_CUDASIM=1 exported, `cuda` is unavailable and the simulator runs in-process, slower).
#   bash benchmarks/gpu_rehearsal.sh          # then read $OUT/summary.txt
# The venv is built once, with the network, before the rehearsal. MOJOLIKE_GPU_INSTALL=tree
# rehearses the fallback for a machine whose setuptools cannot build the project. The simulator
# on two cores is far slower than the GPU: the limits are stretched (MOJOLIKE_GPU_SLOWER).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/tmp/gpu-rehearsal-venv}
TREE=${TREE:-/tmp/gpu-rehearsal-tree}
export OUT=${OUT:-/tmp/gpu-rehearsal-out}

if [ ! -x "$VENV/bin/python3" ]; then
    python3 -m venv "$VENV"
    torch=$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1)
    "$VENV/bin/python3" -m pip install -q numba 'numba-cuda[cu13]' numpy "${torch:-torch==2.13.0}" \
        pytest hypothesis ml-dtypes safetensors tqdm
fi
if "$VENV/bin/python3" -c "import cffi" 2>/dev/null; then
    echo "$VENV has cffi, which the GPU machine lacks: use a venv without it" >&2
    exit 2
fi

rm -rf "$TREE" "$OUT"
mkdir -p "$TREE" "$OUT"
git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | xargs -0 cp --parents -t "$TREE"
cd "$TREE"
# a network namespace of its own: loopback only (gloo's ranks need it up), nothing else
unshare -n env -u NUMBA_ENABLE_CUDASIM PATH="$VENV/bin:$PATH" MOJOLIKE_GPU_BACKEND=cuda-sim \
    MOJOLIKE_GPU_JOBS="${MOJOLIKE_GPU_JOBS:-2}" MOJOLIKE_GPU_SLOWER="${MOJOLIKE_GPU_SLOWER:-5}" \
    MOJOLIKE_GPU_BUDGET_S="${MOJOLIKE_GPU_BUDGET_S:-1800}" \
    bash -c 'ip link set lo up && exec nice bash benchmarks/gpu_check.sh'
