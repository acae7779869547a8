#!/usr/bin/env bash
# Fetch, on this (CPU) machine, the wheels that the lent GPU machine lacks, into .whl/ at the
# repository root, for CPython 3.12 on manylinux x86-64 (the GPU image's Python). The GPU machine
# reaches no package registry, so the wheels travel with the working tree (`carry: [".whl"]`).
#
#   bench/device/prepare_wheels.sh [EXTRA==VERSION ...]
#
# Why these: the GPU image has numpy, click, ml-dtypes, cuda-bindings, jax and pytest, but no
# lark, and an llvmlite of its own whose LLVM may differ from the one we pin and test with.
# Extra requirements on the command line are fetched too (with --no-deps: name their needs).
# Re-running replaces older versions of the same packages: two versions of one package in
# .whl/ would stop the install on the GPU machine.
set -euo pipefail

PINNED=("lark==1.3.1" "llvmlite==0.50.0")

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$repo"

# .whl/ must never be committed, and it travels only when named in `carry`.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d "$tmp" "${PINNED[@]}" "$@"

mkdir -p .whl
for wheel in "$tmp"/*.whl; do
    name=$(basename "$wheel")
    dist=${name%%-*}                      # distribution name as the wheel spells it
    find .whl -maxdepth 1 -iname "${dist}-*.whl" ! -name "$name" -print -delete | sed 's/^/removed older /'
    mv -f "$wheel" .whl/
done

echo "wheels in $repo/.whl:"
ls -l .whl/*.whl
total=$(du -sm .whl | cut -f1)
echo "total ${total} MiB (the working tree that travels, wheels included, must stay under 64 MiB)"
