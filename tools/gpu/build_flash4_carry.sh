#!/usr/bin/env bash
# Build the two ignored folders that carry flash-attn-4 (issue 29) to a GPU machine without network, in two transfers:
#
#     bash tools/gpu/build_flash4_carry.sh          # here, from the repo root, with network to PyPI
#
# flash-attn-4 (CuTe DSL) needs nvidia-cutlass-dsl's CUDA 13 libraries (the GPU image has torch 2.11 cu130): a
# 92 MB wheel, about 63 MB as tar.xz of its files, more than one 64 MiB transfer holds beside .whl and
# .comfy_src.txz. So the tar.xz is cut in two halves:
#   .flash4_a/  the first half                                                          (about 30 MiB)
#   .flash4_b/  the second half and the small wheels (flash-attn-4, nvidia-cutlass-dsl and its base and core
#               libs, cuda-bindings, quack-kernels, apache-tvm-ffi, torch-c-dlpack-ext, einops)  (about 45 MiB)
# each with MANIFEST (the whole archive's sha256 and each part's). On the device (tools/gpu/flash4.sh):
#   first copy .whl, .comfy_src.txz and .flash4_a to the machine, then run
#       . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; ...
#   then copy .flash4_b to the same machine (before it is reset) and run the same line again.
# The second command needs no .whl: bootstrap.sh reuses the install the first left in /tmp/site.
set -euo pipefail
root="$(pwd)"
cutlass=4.8.1
for p in /.flash4_a/ /.flash4_b/; do
    grep -qxF "$p" "$root/.git/info/exclude" 2>/dev/null || echo "$p" >> "$root/.git/info/exclude"
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
dl() { python3 -m pip download -q --pre --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
           "${plat[@]}" -d "$1" "${@:2}"; }
mkdir -p "$tmp/small" "$tmp/libs"
# nvidia-cutlass-dsl is a metadata shim since 4.4: the `cutlass` DSL is in libs-core, its MLIR in libs-base and the
# CUDA build's libraries in libs-cu13. cuda-bindings at CUDA 13.0, the image's driver (580); protobuf and
# typing-extensions are in the image
dl "$tmp/small" flash-attn-4==4.0.0b40 "nvidia-cutlass-dsl==$cutlass" "nvidia-cutlass-dsl-libs-base==$cutlass" \
   "nvidia-cutlass-dsl-libs-core==$cutlass" cuda-bindings==13.0.3 cuda-pathfinder==1.9.1 \
   quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 einops==0.8.1
dl "$tmp/libs" "nvidia-cutlass-dsl-libs-cu13==$cutlass"
mkdir -p "$tmp/tree"
python3 -m zipfile -e "$tmp"/libs/*.whl "$tmp/tree"
tar -C "$tmp/tree" -cf - . | xz -T0 -9 > "$tmp/cu13.tar.xz"
size=$(stat -c %s "$tmp/cu13.tar.xz")
half=$(( (size + 1) / 2 ))
split -b "$half" -d -a 2 "$tmp/cu13.tar.xz" "$tmp/cu13.tar.xz.part"
rm -rf "$root/.flash4_a" "$root/.flash4_b"
mkdir -p "$root/.flash4_a" "$root/.flash4_b"
mv "$tmp/cu13.tar.xz.part00" "$root/.flash4_a/"
mv "$tmp/cu13.tar.xz.part01" "$root/.flash4_b/"
mv "$tmp"/small/*.whl "$root/.flash4_b/"
whole=$(sha256sum "$tmp/cu13.tar.xz" | cut -d' ' -f1)
for d in "$root/.flash4_a" "$root/.flash4_b"; do
    {
        echo "archive cu13.tar.xz $whole"
        for part in "$root"/.flash4_a/cu13.tar.xz.part* "$root"/.flash4_b/cu13.tar.xz.part*; do
            echo "part $(basename "$part") $(sha256sum "$part" | cut -d' ' -f1)"
        done
    } > "$d/MANIFEST"
done
du -sh "$root/.flash4_a" "$root/.flash4_b"
