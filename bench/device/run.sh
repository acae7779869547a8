#!/usr/bin/env bash
# The whole GPU check as one command, for the lent GPU machine (bench/device/README.md):
#
#   bench/device/run.sh [--dry-run] [--steps smoke,tests,families,sanitizer,libraries,bench]
#                       [--budget SECONDS] [--out DIR] [-k EXPR (the tests step only)]
#                       [--bench-only "NAME ..." (the bench step only)]
#
# Installs what travelled in .whl/ (bench/device/prepare_wheels.sh made it), then runs the steps
# in their order of value, each under its own time limit (`timeout`), each even if the one
# before failed, writing as it goes (tee) at most 8 files under $OUT (default /tmp/hlo-device):
#
#   summary.txt    the machine, the versions, the size of what travelled, each step's exit
#                  status, time and pytest tally
#   smoke.log      driver init and device name; hlo-run examples/gelu.hlo --platform=cuda
#                  against the interpreter
#   tests.log      every `gpu`-marked test but the two files below (driver layer, gelu, XLA's
#                  loop-emitter tests, the JAX corpus plain and as CUDA graphs, tensor cores,
#                  NCCL with one participant, side streams), 60 s a test
#   families.log   tests/gpu/test_gpu_emitters.py -k real: every emitter family at a real size
#   sanitizer.log  compute-sanitizer memcheck, then racecheck, on tests/gpu/test_gpu_emitters.py -k "not real"
#   libraries.log  tests/gpu/test_gpu_libraries.py: cuBLASLt (every epilogue), cuDNN convolutions, cuFFT
#   bench.txt/.json  python -m bench --suite gpu: our time, % of a device-to-device copy, XLA:GPU's
#
# --dry-run (on a machine without a GPU; tests/gpu/test_device_check.py runs it in CI) goes through
# every step up to the first call that needs a GPU: the archives and wheels are checked whole,
# the size that travels is measured against the device tool's limit, the smoke step compiles
# gelu to PTX for sm_90 (LLVM, libdevice, ptxas when present) and runs it on the host, the
# pytest steps collect their tests (and fail when a file collects none), the sanitizer's
# command is printed, and the benchmark suite starts and says it has no GPU.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

DRY=0
STEPS="smoke,tests,families,sanitizer,libraries,bench"
BUDGET=400            # seconds for everything; the benchmark gets what the others left
KEXPR=                # -k EXPR: only the tests step's tests that match (pytest -k)
BENCH_ONLY=           # --bench-only "A B": only the bench modules whose names contain A or B
OUT_DIR=${OUT:-/tmp/hlo-device}
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --steps) STEPS=$2; shift ;;
        --steps=*) STEPS=${1#--steps=} ;;
        --budget) BUDGET=$2; shift ;;
        --out) OUT_DIR=$2; shift ;;
        -k) KEXPR=$2; shift ;;
        --bench-only) BENCH_ONLY=$2; shift ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT_DIR"
SUMMARY=$OUT_DIR/summary.txt
: >"$SUMMARY"
T0=$SECONDS
FAILED=()
# the device tool's limit on what travels is 64 MiB; keep a margin
MAX_TRAVEL_MIB=60
# per-step limits in seconds (the bench: what is left of --budget)
declare -A LIMIT=([smoke]=40 [tests]=150 [families]=60 [sanitizer]=80 [libraries]=50)
for k in "${!LIMIT[@]}"; do v=LIMIT_$k; [ -n "${!v:-}" ] && LIMIT[$k]=${!v}; done   # LIMIT_tests=200 ...

say() { echo "$*" | tee -a "$SUMMARY"; }

# ---- install what travelled -------------------------------------------------------------------
travel_mib() {
    local tree whl=0
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    [ -d .whl ] && whl=$(du -sb .whl | cut -f1)
    echo $(( (tree + whl + (1 << 20) - 1) >> 20 ))
}

install() {
    local site=${TMPDIR:-/tmp}/hlo-site rc=0
    say "== install ($( [ $DRY = 1 ] && echo dry run || echo GPU machine ))"
    if [ $DRY = 1 ]; then   # measured before it travels (the GPU machine's copy is no checkout)
        local mib; mib=$(travel_mib)
        say "travels: $mib MiB (tree + .whl; the device tool takes at most 64 MiB, we allow $MAX_TRAVEL_MIB)"
        if [ "$mib" -gt "$MAX_TRAVEL_MIB" ]; then say "FAIL: too large to travel"; rc=1; fi
    fi
    if [ $DRY = 1 ]; then
        # Python here may not be the GPU machine's 3.12: check the archives whole, use this environment
        for a in .whl/*.tar.xz; do [ -e "$a" ] || continue
            if xz -t "$a"; then say "ok: $a"; else say "FAIL: $a is damaged"; rc=1; fi; done
        for w in .whl/*.whl; do [ -e "$w" ] || continue
            if python3 -m zipfile -t "$w" >/dev/null; then say "ok: $w"; else say "FAIL: $w is damaged"; rc=1; fi; done
        [ -d .whl ] || say "no .whl/ here: the dry run uses this environment (bench/device/prepare_wheels.sh makes .whl/)"
        export PYTHONPATH=$repo:$repo/tests${PYTHONPATH:+:$PYTHONPATH}
    else
        mkdir -p "$site"
        for a in .whl/*.tar.xz; do [ -e "$a" ] || continue; tar -xJf "$a" -C "$site" || rc=1; done
        if ls .whl/*.whl >/dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
                .whl/*.whl 2>&1 | grep -v -i "warning" | tee -a "$SUMMARY" || true
        fi
        export PYTHONPATH=$site:$repo:$repo/tests${PYTHONPATH:+:$PYTHONPATH}
        # libdevice, ptxas and compute-sanitizer from the image's CUDA toolkit
        for d in /usr/local/cuda /usr/local/cuda-1[0-9]* /opt/cuda; do
            if [ -d "$d/nvvm/libdevice" ]; then export CUDA_HOME=$d PATH=$d/bin:$d/compute-sanitizer:$PATH; break; fi
        done
    fi
    if ! python3 -c "from hlo_compile.targets.nvptx import toolkit; toolkit.find_libdevice()" 2>/dev/null \
        && [ -f .whl/cuda/nvvm/libdevice/libdevice.10.bc ]; then
        export HLO_COMPILE_CUDA_HOME=$repo/.whl/cuda   # the carried libdevice
    fi
    [ -d .whl/shared/corpus ] && export HLO_CORPUS=$repo/.whl/shared/corpus
    [ -f .whl/shared/tools/xla_ref.py ] && export HLO_XLA_REF=$repo/.whl/shared/tools/xla_ref.py
    export PYTHONUNBUFFERED=1 HLO_COMPILE_CACHE_DIR=${TMPDIR:-/tmp}/hlo-cache
    say "PYTHONPATH=$PYTHONPATH"
    say "CUDA_HOME=${CUDA_HOME:-} HLO_COMPILE_CUDA_HOME=${HLO_COMPILE_CUDA_HOME:-} HLO_CORPUS=${HLO_CORPUS:-} HLO_XLA_REF=${HLO_XLA_REF:-}"
    [ $rc = 0 ] || FAILED+=(install)
    return $rc
}

environment() {
    say "== environment"
    { command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv; } 2>&1 | tee -a "$SUMMARY"
    python3 - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib, importlib.metadata as md, sys
print("python", sys.version.split()[0])
for dist in ("numpy", "ml-dtypes", "lark", "llvmlite", "click", "cuda-bindings", "cuda-core", "cuda-pathfinder",
             "nvmath-python", "nvidia-cudnn-frontend", "nccl4py", "jax", "jaxlib", "pytest", "pytest-timeout",
             "pytest-xdist"):
    try:
        print(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"{dist} -")
try:
    import llvmlite, llvmlite.binding as b
    print("llvmlite imported from", llvmlite.__file__, "LLVM", b.llvm_version_info)
except Exception as e:
    print("llvmlite: cannot import:", e)
for mod in ("nvmath.bindings.cublasLt", "nvmath.bindings.cufft", "cudnn", "nccl.core"):
    try:
        importlib.import_module(mod)
        print(f"import {mod}: ok")
    except Exception as e:
        print(f"import {mod}: {type(e).__name__}: {str(e)[:300]}")
try:
    from hlo_compile.targets.nvptx import toolkit
    print("toolkit:", {k: str(v) for k, v in vars(toolkit).items() if k.isupper() and isinstance(v, (str, tuple))})
except Exception as e:
    print("toolkit:", e)
EOF
    for tool in ptxas compute-sanitizer; do say "$tool: $(command -v $tool || echo not found)"; done
}

# ---- the steps --------------------------------------------------------------------------------
# run_step NAME LIMIT COMMAND...: the command under `timeout`, its output teed to NAME.log
run_step() {
    local name=$1 limit=$2; shift 2
    local log=$OUT_DIR/$name.log t=$SECONDS
    say "== $name (limit ${limit}s): $*"
    timeout -k 5 "$limit" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    local tally; tally=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected|tests? collected)" "$log" | tail -1)
    [ $rc = 124 ] && tally="$tally (stopped at its ${limit}s limit)"
    say "-- $name: exit $rc in $((SECONDS - t))s ${tally:+: $tally}"
    [ $rc = 0 ] || FAILED+=("$name")
    return 0
}

gpu_test_files() {  # every file with gpu-marked tests but those of the families and libraries steps
    grep -l "mark.gpu" tests/*/test_*.py | grep -v -e test_gpu_emitters.py -e test_gpu_libraries.py
}

PYTEST=(python3 -m pytest -q -p no:cacheprovider -m gpu -rfEs --durations=8)
pytest_opts() {  # per-test timeout and workers where the plugins are there
    local n=$1 opts=()
    python3 -c "import pytest_timeout" 2>/dev/null && opts+=(--timeout 60)
    [ "$n" -gt 1 ] && python3 -c "import xdist" 2>/dev/null && opts+=(-n "$n")
    echo "${opts[@]}"
}
collect() {  # dry run: the tests a pytest step would run; fails when a file collects none
    local name=$1; shift
    local log=$OUT_DIR/$name.log
    say "== $name (dry run: collect only)"
    "${PYTEST[@]}" --collect-only "$@" 2>&1 | tail -3 | tee -a "$log"
    local n; n=$(grep -oE "^[0-9]+(/[0-9]+)? tests? collected" "$log" | tail -1 | grep -oE "^[0-9]+")
    if [ "${n:-0}" -gt 0 ]; then say "-- $name: $n tests collected"; else say "-- $name: FAIL, no test collected"; FAILED+=("$name"); fi
}

step_smoke() {
    if [ $DRY = 1 ]; then
        run_step smoke "${LIMIT[smoke]}" bash -c \
            'python3 -m hlo_compile.cli.compile examples/gelu.hlo --emit=ptx --arch sm_90 --no-cache -q -o ${TMPDIR:-/tmp}/hlo-dry-gelu.ptx \
             && grep -c "^.entry\|^.visible .entry" ${TMPDIR:-/tmp}/hlo-dry-gelu.ptx \
             && python3 -m hlo_compile.cli.run examples/gelu.hlo --platform=host'
        return
    fi
    run_step smoke "${LIMIT[smoke]}" bash -c \
        'python3 -c "
from hlo_compile.runtime import cuda as rt
ok, why = rt.available(); print(\"available:\", ok, why)
with rt.CudaDevice() as d:
    print(d, d.arch, d.sm_count, \"SMs\", round(d.total_memory / 2**30, 1), \"GiB\")
" && python3 -m hlo_compile.cli.run examples/gelu.hlo --platform=cuda --reference=interpreter --iterations 3'
}

step_tests() {
    local files; mapfile -t files < <(gpu_test_files)
    if [ $DRY = 1 ]; then collect tests ${KEXPR:+-k "$KEXPR"} "${files[@]}"; return; fi
    # shellcheck disable=SC2046
    run_step tests "${LIMIT[tests]}" "${PYTEST[@]}" $(pytest_opts 8) ${KEXPR:+-k "$KEXPR"} "${files[@]}"
}

step_families() {
    if [ $DRY = 1 ]; then collect families tests/gpu/test_gpu_emitters.py -k real; return; fi
    # shellcheck disable=SC2046
    run_step families "${LIMIT[families]}" "${PYTEST[@]}" $(pytest_opts 6) -rP tests/gpu/test_gpu_emitters.py -k real
}

step_sanitizer() {
    local half=$(( LIMIT[sanitizer] / 2 ))
    if [ $DRY = 1 ]; then
        collect sanitizer tests/gpu/test_gpu_emitters.py -k "not real"
        say "   would run: compute-sanitizer --tool memcheck|racecheck --error-exitcode 9 ${PYTEST[*]} tests/gpu/test_gpu_emitters.py -k 'not real'"
        return
    fi
    local tool
    for tool in memcheck racecheck; do
        run_step sanitizer "$half" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
            "${PYTEST[@]}" tests/gpu/test_gpu_emitters.py -k "not real"
    done
}

step_libraries() {
    if [ $DRY = 1 ]; then collect libraries tests/gpu/test_gpu_libraries.py; return; fi
    # shellcheck disable=SC2046
    run_step libraries "${LIMIT[libraries]}" "${PYTEST[@]}" $(pytest_opts 6) tests/gpu/test_gpu_libraries.py
}

step_bench() {
    local left=$(( BUDGET - (SECONDS - T0) - 5 ))
    [ $left -lt 30 ] && left=30
    local log=$OUT_DIR/bench.txt t=$SECONDS
    say "== bench (limit ${left}s: what the budget left)"
    local only=() name
    for name in $BENCH_ONLY; do only+=(--only "$name"); done
    timeout -k 5 "$left" python3 -m bench --suite gpu --json "$OUT_DIR/bench.json" "${only[@]}" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    say "-- bench: exit $rc in $((SECONDS - t))s"
    [ $rc = 0 ] || FAILED+=(bench)
}

install || say "install failed: the steps below say what it broke"
environment
IFS=, read -r -a wanted <<<"$STEPS"
for s in "${wanted[@]}"; do
    if declare -F "step_$s" >/dev/null; then "step_$s"; else say "unknown step '$s'"; FAILED+=("$s"); fi
done
say "== done in $((SECONDS - T0))s; failed: ${FAILED[*]:-none}"
[ ${#FAILED[@]} = 0 ]
