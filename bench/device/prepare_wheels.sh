#!/usr/bin/env bash
# Make .whl/ at the repository root: everything the lent GPU machine lacks, sized to travel with
# the working tree (`carry: [".whl"]`; the device tool takes at most 64 MiB, we keep <= 60 MiB).
#
#   bench/device/prepare_wheels.sh [EXTRA==VERSION ...]
#
# - wheels for CPython 3.12 on manylinux x86-64 (the GPU image's Python): lark (the image has
#   none), llvmlite (ours: LLVM 22, what shared/notes/nvptx.md was checked with; the image's is
#   numba's), nvmath-python (cuBLASLt, cuFFT), the cuDNN frontend (1.20: the last without the
#   CUTLASS DSL as a dependency), nccl4py (NCCL). Their other needs (numpy, cuda-bindings,
#   cuda-core, cuda-pathfinder, NVIDIA's libraries) are in the image. EXTRA==VERSION adds more
#   (with --no-deps: name their needs).
# - llvmlite's wheel (57 MiB) does not fit beside the repository: its library is stripped of its
#   symbol table and the installed tree repacked as .whl/llvmlite-VERSION.tar.xz (~35 MiB),
#   which run.sh unpacks where pip would have installed it. Repacking takes ~3 minutes on two
#   cores; an existing archive of the same version is kept.
# - what the tests read from ../shared: tools/xla_ref.py, XLA's loop-emitter tests, and the JAX
#   corpus's cases smallest first up to JAX_CORPUS_MIB (default 4) under .whl/shared/corpus, or
#   the cases JAX_CORPUS_CASES names (space-separated).
#
# Re-running replaces older versions of the same packages: two versions of one package in .whl/
# would stop the install on the GPU machine. `bench/device/run.sh --dry-run` checks the result.
set -euo pipefail

PINNED=("lark==1.3.1" "llvmlite==0.50.0" "nvmath-python==1.0.0" "nvidia-cudnn-frontend==1.20.0" "nccl4py==0.6.0")
MAX_MIB=60
JAX_CORPUS_MIB=${JAX_CORPUS_MIB:-4}

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$repo"
shared=${HLO_SHARED:-$repo/../shared}

# .whl/ must never be committed, and it travels only when named in `carry`.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d "$tmp" "${PINNED[@]}" "$@" 2>&1 | grep -v "^WARNING: Location" || true

mkdir -p .whl
for wheel in "$tmp"/*.whl; do
    name=$(basename "$wheel")
    dist=${name%%-*}                      # distribution name as the wheel spells it
    version=$(echo "$name" | cut -d- -f2)
    find .whl -maxdepth 1 \( -iname "${dist}-*.whl" -o -iname "${dist}-*.tar.xz" \) ! -name "$name" \
        ! -name "${dist}-${version}.tar.xz" -print -delete | sed 's/^/removed older /'
    if [ "$dist" = llvmlite ]; then
        archive=.whl/llvmlite-${version}.tar.xz
        if [ ! -s "$archive" ]; then
            echo "repacking $name as $archive (stripped, xz)..."
            mkdir "$tmp/llvmlite" && (cd "$tmp/llvmlite" && python3 -m zipfile -e "$wheel" .)
            if command -v strip >/dev/null; then strip --strip-unneeded "$tmp"/llvmlite/llvmlite/binding/libllvmlite.so; fi
            tar -C "$tmp/llvmlite" -cf - . | xz -9e -T0 >"$archive.part" && mv "$archive.part" "$archive"
        fi
        rm -f "$wheel" .whl/llvmlite-*.whl
        continue
    fi
    mv -f "$wheel" .whl/
done

# libdevice (0.5 MiB), in case the image's CUDA toolkit is not where toolkit.py looks: run.sh
# points HLO_COMPILE_CUDA_HOME here only when find_libdevice() fails there
libdevice=$(python3 -c "from hlo_compile.targets.nvptx import toolkit; print(toolkit.find_libdevice())" 2>/dev/null || true)
if [ -n "$libdevice" ]; then
    mkdir -p .whl/cuda/nvvm/libdevice && cp -f "$libdevice" .whl/cuda/nvvm/libdevice/
fi

# what the tests and the benchmark read from ../shared
if [ -d "$shared" ]; then
    rm -rf .whl/shared && mkdir -p .whl/shared/tools .whl/shared/corpus/jax
    cp -f "$shared/tools/xla_ref.py" .whl/shared/tools/
    loop=corpus/xla/repo/xla/codegen/emitters/tests/loop
    mkdir -p ".whl/shared/$(dirname $loop)" && cp -rf "$shared/$loop" ".whl/shared/$loop"
    rm -f ".whl/shared/$loop/large_loop_slow_compile_time.hlo"   # 1.8 MB, never run
    budget=$((JAX_CORPUS_MIB << 10)) used=0 n=0
    cp -f "$shared"/corpus/jax/*.json "$shared"/corpus/jax/README.md .whl/shared/corpus/jax/ 2>/dev/null || true
    while read -r kb case; do
        [ -f "$case/case.json" ] || continue
        if [ -n "${JAX_CORPUS_CASES:-}" ]; then   # a named set instead (a second call's other cases)
            case " $JAX_CORPUS_CASES " in *" $(basename "$case") "*) ;; *) continue ;; esac
        else
            [ $((used + kb)) -le $budget ] || break
        fi
        cp -rf "$case" .whl/shared/corpus/jax/ && used=$((used + kb)) n=$((n + 1))
    done < <(du -sk "$shared"/corpus/jax/*/ | sort -n)
    # XLA:GPU-style modules with library calls or kCustom fusions (test_xla_gpu_corpus's list, ~0.3 MiB)
    (cd "$repo/tests" && python3 - "$shared/corpus" "$repo/.whl/shared/corpus" <<'PYEOF'
import shutil, sys
from pathlib import Path
from test_xla_gpu_corpus import _files
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
files = _files(src)
for f in files:
    (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(f, dst / f.relative_to(src))
print(f"XLA:GPU-style modules: {len(files)}")
PYEOF
    ) || echo "XLA:GPU-style modules not copied"
    echo "JAX corpus: $n cases, $((used >> 10)) MiB (smallest first, up to $JAX_CORPUS_MIB MiB)"
else
    echo "no $shared: the corpus tests will skip on the GPU machine"
fi

echo "in $repo/.whl:"
ls -l .whl/*.whl .whl/*.tar.xz
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
total=$(( (tree + $(du -sb .whl | cut -f1) + (1 << 20) - 1) >> 20 ))
echo "travels: $total MiB (tree + .whl; at most $MAX_MIB)"
[ "$total" -le "$MAX_MIB" ] || { echo "too large: lower JAX_CORPUS_MIB" >&2; exit 1; }
