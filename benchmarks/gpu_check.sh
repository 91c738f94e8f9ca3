#!/usr/bin/env bash
# One prepared run on the GPU machine (no network; its own python3 holds numba, numba-cuda,
# numpy, torch, pytest, hypothesis, but not cffi): install this checkout offline, then at once
# certify every suite on cuda, the PTX lint and the kernel tests' cuda cases, then the fold
# benchmark. Each phase runs under a time limit taken from one budget (480 s), so a hung phase
# cannot eat the device time, and the summary is written whatever fails.
# Through the device tool, one call:
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=560)
# The tool sends the working tree, uncommitted edits included: to certify a commit while work
# is in progress, send a clean copy of it (ignored by git) and run the script there:
#   mkdir .gpu-head && git archive HEAD | tar -x -C .gpu-head   (.gpu-head/, .whl/: .gitignore)
#   run(command="cd .gpu-head && MOJOLIKE_GPU_WHEELS=$PWD/../.whl bash benchmarks/gpu_check.sh",
#       carry=[".whl", ".gpu-head"], timeout_s=560)
# $OUT (default ./gpu-out) gets four files:
#   summary.txt     versions found, nvidia-smi, each phase's exit code and seconds, each suite's card
#   log.txt         every phase's output
#   cards.tar.gz    cuda/<suite>.card and .meta.json of every suite, and to-commit/<suite>.cuda.meta.json
#                   for each suite whose run provenance.real_gpu_run accepts as a real GPU run
#   bench_fold.txt  benchmarks/fold.py
# After the run, commit the metas it marked: that file is what tells every later meta that a
# real GPU run happened.
#   tar -xzf <files_at>/cards.tar.gz -C /tmp/gpu && cp /tmp/gpu/to-commit/*.cuda.meta.json cards/
# Settings: MOJOLIKE_GPU_PYTHON (python3); MOJOLIKE_GPU_BACKEND (cuda; cuda-sim where
# NUMBA_ENABLE_CUDASIM=1, since the simulator hides the GPU from `cuda`); MOJOLIKE_GPU_BUDGET_S
# (480); MOJOLIKE_GPU_SLOWER (1: every phase's limit times this); MOJOLIKE_GPU_JOBS (suites
# certified at once: the CPU count less 2, at most 10); MOJOLIKE_GPU_INSTALL (pip; tree skips pip);
# MOJOLIKE_GPU_SUITES (every suite of mojolike's list; a rehearsal may name fewer);
# MOJOLIKE_GPU_SKIP (phases not to run: any of ptx-lint kernel-tests bench-fold);
# MOJOLIKE_GPU_PROFILE (suites to profile beside the certify phase, benchmarks/profile_suite.py:
# $OUT/profile-<suite>.txt).
# Rehearse it with no network and no GPU: bash benchmarks/gpu_rehearsal.sh.
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
PY=${MOJOLIKE_GPU_PYTHON:-python3}
KERNEL_TESTS="tests/test_schedule_kernels.py tests/test_layers_kernels.py tests/test_optim_kernels.py"

seconds_since() { awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $1}"; }

case "${1-}" in
--certify-one)  # one suite; the certify phase runs several at once
    suite=$2 work=$3 t0=$EPOCHREALTIME
    "$PY" -m mojolike certify --backend "$BACKEND" --suite "$suite" --out "$work/cards" \
        > "$work/certify-$suite.log" 2>&1
    rc=$?
    echo "$suite $rc $(seconds_since "$t0")" >> "$work/certify-status"
    exit "$rc" ;;
--kernel-tests)  # the kernel tests' cases that run on $BACKEND (cuda: a real `cuda` parameter)
    mapfile -t ids < <("$PY" -m pytest -q -p no:cacheprovider --collect-only $KERNEL_TESTS \
                       | "$PY" benchmarks/gpu_check.py select "$BACKEND")
    [ "${#ids[@]}" -gt 0 ] && [ -n "${ids[0]}" ] \
        || { echo "no case on $BACKEND was collected from $KERNEL_TESTS"; exit 5; }
    echo "${#ids[@]} cases on $BACKEND"
    exec "$PY" -m pytest -q -p no:cacheprovider "${ids[@]}" ;;
esac

OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -z "${MOJOLIKE_GPU_BACKEND-}" ] && [ "${NUMBA_ENABLE_CUDASIM-0}" = 1 ]; then
    MOJOLIKE_GPU_BACKEND=cuda-sim
fi
export BACKEND=${MOJOLIKE_GPU_BACKEND:-cuda} PY
BUDGET=${MOJOLIKE_GPU_BUDGET_S:-480}
SLOWER=${MOJOLIKE_GPU_SLOWER:-1}
JOBS=${MOJOLIKE_GPU_JOBS:-$(( $(nproc 2>/dev/null || echo 3) - 2 ))}
[ "$JOBS" -gt 10 ] && JOBS=10
[ "$JOBS" -lt 1 ] && JOBS=1
START=$EPOCHREALTIME
RESERVE=20  # seconds kept for the summary and the archive
DEADLINE=$(( ${START%.*} + BUDGET - RESERVE ))
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
LOG=$OUT/log.txt
: > "$LOG"
# safe path: the checkout's own mojolike/ (no oracles/ inside) must not shadow the installed package
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1

# phase NAME CAP CMD...: CMD under min(CAP x SLOWER, what the budget has left); its output goes to
# a log of its own (phases run side by side), appended to log.txt by `keep`
phase() {
    local name=$1 cap=$(( $2 * SLOWER )) left t0 rc why=""
    shift 2
    left=$(( DEADLINE - ${EPOCHREALTIME%.*} ))
    [ "$cap" -gt "$left" ] && cap=$left
    if [ "$cap" -lt 5 ]; then
        echo "$name: not run, the ${BUDGET} s budget is spent" | tee -a "$WORK/phases"
        return 124
    fi
    echo "=== $name (limit ${cap} s): $*" > "$WORK/log-$name"
    echo "=== $name (limit ${cap} s)"
    t0=$EPOCHREALTIME
    timeout -k 10 "$cap" "$@" >> "$WORK/log-$name" 2>&1
    rc=$?
    { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && why=" (stopped at its ${cap} s limit)"
    echo "$name: exit $rc$why, $(seconds_since "$t0") s" | tee -a "$WORK/phases"
    return "$rc"
}

keep() {
    local f
    for f in "$@"; do
        [ -f "$f" ] || continue
        # a phase stopped mid-line must not run into the next one's header
        { cat "$f"; [ -z "$(tail -c 1 "$f")" ] || echo; } >> "$LOG"
        rm -f "$f"
    done
}

finish() {
    local rc=$?
    trap - EXIT
    [ -n "$(jobs -p)" ] && kill $(jobs -p) 2>/dev/null
    keep "$WORK"/log-*
    {
        echo "gpu_check on $(hostname) at $(date -u +%FT%TZ), backend $BACKEND, install: ${HOW:-none}"
        [ "$BACKEND" = cuda ] || echo "a rehearsal: $BACKEND stands in for the GPU; nothing here is a GPU run"
        echo; cat "$WORK/versions.txt" 2>/dev/null || echo "versions: not read"
        echo; cat "$WORK/nvidia-smi.txt" 2>/dev/null || echo "nvidia-smi: not run"
        echo; cat "$WORK/phases" 2>/dev/null
        echo; echo "suites on $BACKEND ($JOBS at once):"
        timeout 60 "$PY" benchmarks/gpu_check.py cards "$BACKEND" "$WORK/cards" "$WORK/certify-status" \
            "$WORK/cards/to-commit" 2>&1
        echo; echo "total $(seconds_since "$START") s of a ${BUDGET} s budget; exit $rc"
    } > "$OUT/summary.txt" 2>&1
    [ -d "$WORK/cards" ] && tar -czf "$OUT/cards.tar.gz" -C "$WORK/cards" .
    cat "$OUT/summary.txt"
    rm -rf "$WORK"
    exit "$rc"
}
trap finish EXIT
trap 'exit 143' TERM INT

# carried wheels (.whl/, ignored by git, named in the device tool's carry) go first on the path:
# the GPU machine's numpy 2.5 lacks np.row_stack, which numba-cuda 0.30.4 registers at import, so
# carry numpy 2.4.6 and ml-dtypes 0.7.0 (pyproject's range) for cp312 manylinux_2_28_x86_64
# (python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 ...); with none
# there the run goes on with what the machine has
WHEELS=${MOJOLIKE_GPU_WHEELS:-.whl}
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    phase wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" \
        "$WHEELS"/*.whl \
        && export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
    keep "$WORK/log-wheels"
fi

# install: pip from this checkout only (editable, no index, no deps), else the tree on PYTHONPATH
HOW=""
if [ "${MOJOLIKE_GPU_INSTALL:-pip}" = pip ] \
    && phase install 120 "$PY" -m pip install --no-index --no-deps --no-build-isolation -e . \
    && (cd / && "$PY" -c "import mojolike.cards as c, pathlib, sys
sys.exit(c.DIR != pathlib.Path('$ROOT', 'cards').resolve())") >> "$WORK/log-install" 2>&1; then
    HOW="pip install -e ."
else
    phase tree 30 "$PY" benchmarks/gpu_check.py tree "$WORK/tree" \
        && export PYTHONPATH=$WORK/tree${PYTHONPATH:+:$PYTHONPATH} \
        && HOW="the tree on PYTHONPATH ($WORK/tree)"
fi
timeout 60 "$PY" benchmarks/gpu_check.py versions > "$WORK/versions.txt" 2>&1
{ timeout 30 nvidia-smi || echo "nvidia-smi: exit $?"; } > "$WORK/nvidia-smi.txt" 2>&1
phase backends 60 "$PY" -m mojolike backends
phase numba-sysinfo 30 "$PY" -m numba -s
keep "$WORK/log-install" "$WORK/log-tree" "$WORK/log-backends" "$WORK/log-numba-sysinfo"

# side by side: certify (several suites at once; the oracle side is single-threaded Python),
# the PTX lint (compiles on the CPU; under the simulator it would skip) and the kernel tests
SUITES=$(timeout 60 "$PY" -c "from mojolike.contracts import SUITES; print(*SUITES)" 2>>"$LOG")
if [ -n "${MOJOLIKE_GPU_SUITES-}" ]; then
    SUITES=$MOJOLIKE_GPU_SUITES
    echo "certify: only the suites $SUITES (MOJOLIKE_GPU_SUITES)" >> "$WORK/phases"
fi
# the slowest first (their oracles take longest), so the last to start is a short one
ORDER=$(for s in layers train distributed $SUITES; do [[ " $SUITES " == *" $s "* ]] && echo "$s"; done \
        | awk '!seen[$0]++')
if [ -n "$SUITES" ]; then
    # 400 s: on an H200 beside the other suites, train did not finish in 300 s (its cuda
    # outputs alone took 129 s; the other eleven suites took 13-133 s each)
    phase certify 400 xargs -P "$JOBS" -I{} bash "$SELF" --certify-one {} "$WORK" \
        <<< "$ORDER" &
    certify_pid=$!
else
    echo "certify: not run, mojolike's suite list did not import" >> "$WORK/phases"
    certify_pid=""
fi
skipped() { [[ " ${MOJOLIKE_GPU_SKIP-} " == *" $1 "* ]] && echo "$1: skipped (MOJOLIKE_GPU_SKIP)" >> "$WORK/phases"; }
lint_pid="" kernels_pid="" profile_pids=()
if ! skipped ptx-lint; then
    phase ptx-lint 240 env -u NUMBA_ENABLE_CUDASIM MOJOLIKE_REQUIRE_PTX_LINT=1 \
        "$PY" -m pytest -q -p no:cacheprovider tests/test_ptx_lint.py &
    lint_pid=$!
fi
if ! skipped kernel-tests; then
    phase kernel-tests 240 bash "$SELF" --kernel-tests &
    kernels_pid=$!
fi
for s in ${MOJOLIKE_GPU_PROFILE-}; do
    phase "profile-$s" 400 "$PY" benchmarks/profile_suite.py "$s" --backend "$BACKEND" &
    profile_pids+=($!)
done
certify=1 lint=0 kernels=0
[ -n "$certify_pid" ] && { wait "$certify_pid"; certify=$?; }
[ -n "$lint_pid" ] && { wait "$lint_pid"; lint=$?; }
[ -n "$kernels_pid" ] && { wait "$kernels_pid"; kernels=$?; }
for p in "${profile_pids[@]}"; do wait "$p"; done
for s in ${MOJOLIKE_GPU_PROFILE-}; do
    cp "$WORK/log-profile-$s" "$OUT/profile-$s.txt" 2>/dev/null
done
keep "$WORK/log-certify"
for s in $SUITES; do
    [ -f "$WORK/certify-$s.log" ] && { echo "--- certify $s"; cat "$WORK/certify-$s.log"; } >> "$LOG"
done
keep "$WORK/log-ptx-lint" "$WORK/log-kernel-tests" "$WORK"/log-profile-*

if skipped bench-fold; then
    echo "bench-fold: skipped (MOJOLIKE_GPU_SKIP)" > "$OUT/bench_fold.txt"
else
    if [ "$BACKEND" = cuda ]; then BENCH=(); else BENCH=(--backends "cpu-numba,$BACKEND" --n 4096 --repeat 1 --rounds 1); fi
    phase bench-fold 60 env PYTHONPATH="benchmarks${PYTHONPATH:+:$PYTHONPATH}" \
        "$PY" benchmarks/fold.py "${BENCH[@]}"
    cp "$WORK/log-bench-fold" "$OUT/bench_fold.txt" 2>/dev/null || echo "bench-fold: not run" > "$OUT/bench_fold.txt"
    keep "$WORK/log-bench-fold"
fi

[ -n "$HOW" ] && [ "$certify" -eq 0 ] && [ "$lint" -eq 0 ] && [ "$kernels" -eq 0 ]
