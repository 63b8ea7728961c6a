#!/usr/bin/env bash
# Rebuild the two ignored folders you copy to a GPU machine without network: .whl/ (wheels the GPU image lacks) and
# .comfy_src/ (ComfyUI's run-time source). Run here, from the repo root, with network to PyPI:
#
#     COMFYUI_SRC=/tmp/comfyui bash tools/gpu/build_carry.sh
#     COMFYUI_SRC=/tmp/comfyui KITCHEN_BENCH=0.2.40 bash tools/gpu/build_carry.sh   # + .whl_kitchen (33 MiB; see kitchen_site.sh)
#
# Both folders must be ignored (.git/info/exclude: /.whl/ and /.comfy_src/). Copy them into the repository's
# root on the GPU machine, then run there:
#     . tools/gpu/bootstrap.sh || exit 1; PYTHONPATH=$LONGMEDIA_COMFYUI_ROOT:$PYTHONPATH python3 tools/gpu/probe_aimdo.py
# Sizes as built for ComfyUI 0.33.0 (2026-08-15 snapshot): .whl 26.4 MiB, .comfy_src 12.4 MiB.
set -euo pipefail
root="$(pwd)"
src="${COMFYUI_SRC:-/tmp/comfyui}"
whl="$root/.whl"
[ -f "$src/main.py" ] || { echo "COMFYUI_SRC=$src is not a ComfyUI checkout" >&2; exit 1; }
for p in /.whl/ /.comfy_src/; do
    grep -qxF "$p" "$root/.git/info/exclude" 2>/dev/null || echo "$p" >> "$root/.git/info/exclude"
done

# --- wheels: cp312 manylinux x86_64, no deps (the GPU image: Python 3.12, torch 2.11 cu130, triton 3.6,
# torchvision 0.26, torchaudio 2.11, numpy, transformers, aiohttp, yarl, pillow, scipy, psutil, ... are there)
rm -rf "$whl" && mkdir -p "$whl"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$1" "${@:2}"; }
# ComfyUI requirements.txt entries the image lacks (frontend/templates/docs left out: 39 MB, only main.py's server needs them;
# av left out: 35 MB, tools/gpu/stubs/av stands in for its imports; kornia, spandrel, PyOpenGL, comfy-angle: not imported on these paths)
dl "$whl" comfy-aimdo==0.4.13 torchsde==0.2.6 trampoline==0.1.2 simpleeval==1.0.8 blake3==1.0.11 \
   alembic==1.20.1 mako==1.4.3 annotated-types==0.8.0 typing-inspection==0.4.5 \
   pydantic==2.14.4 pydantic-core==2.50.5 typing-extensions==4.16.0
# SQLAlchemy's pure-Python wheel (2.0 MB) instead of the compiled one (4.7 MB)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform any \
    -d "$whl" sqlalchemy==2.1.9

# comfy-kitchen: drop the HIP/ROCm library (59-158 MB) and move the CUDA one (0.2.31: 176 MB, 47 MB deflated
# in a wheel, 21 MB as xz) out of the wheel; bootstrap.sh puts it back after the install, checked by sha256.
repack_kitchen() {  # VERSION DEST_FOLDER
    local version="$1" dest="$2" tmp
    tmp="$(mktemp -d)"
    dl "$tmp" "comfy-kitchen==$version"
    python3 - "$tmp" "$dest" "$version" <<'PY'
import glob, hashlib, lzma, os, sys, zipfile
tmp, whl, version = sys.argv[1:4]
src = glob.glob(os.path.join(tmp, f"comfy_kitchen-{version}-*.whl"))[0]
drop = {"comfy_kitchen/backends/hip/_C.abi3.so", "comfy_kitchen/backends/cuda/_C.abi3.so"}
dst = os.path.join(whl, os.path.basename(src))
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zo:
    record_name = next(n for n in zi.namelist() if n.endswith(".dist-info/RECORD"))
    so = zi.read("comfy_kitchen/backends/cuda/_C.abi3.so")
    for info in zi.infolist():
        if info.filename in drop or info.filename == record_name:
            continue
        zo.writestr(info, zi.read(info.filename), compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    lines = [l for l in zi.read(record_name).decode().splitlines() if l.split(",")[0] not in drop]
    zo.writestr(record_name, "\n".join(lines) + "\n")
digest = hashlib.sha256(so).hexdigest()
with lzma.open(os.path.join(whl, f"comfy_kitchen-{version}.cuda_C.abi3.so.xz"), "wb", preset=6) as f:
    f.write(so)
with open(os.path.join(whl, f"comfy_kitchen-{version}.cuda_C.abi3.so.sha256"), "w") as f:
    f.write(f"{digest}  comfy_kitchen/backends/cuda/_C.abi3.so\n")
print(f"comfy-kitchen {version} repacked: {os.path.getsize(dst)} bytes; CUDA library {len(so)} bytes, sha256 {digest}")
PY
    rm -rf "$tmp"
}
repack_kitchen 0.2.31 "$whl"
# a newer comfy-kitchen (sol_attn, sol_attn_chunked, int8_attention: >= 0.2.36) for bench/attention.py's kitchen
# rows, in its own folder (tools/gpu/kitchen_site.sh installs it; it travels without .whl when one transfer holds 64 MiB)
if [ -n "${KITCHEN_BENCH:-}" ]; then
    rm -rf "$root/.whl_kitchen" && mkdir -p "$root/.whl_kitchen"
    grep -qxF /.whl_kitchen/ "$root/.git/info/exclude" || echo /.whl_kitchen/ >> "$root/.git/info/exclude"
    repack_kitchen "$KITCHEN_BENCH" "$root/.whl_kitchen"
fi

# --- ComfyUI source: the python tree without tests, docs, blueprints, API nodes, models, and the
# tokenizer data the MiniMax H3 path does not use (qwen25_tokenizer stays: the H3 text encoder's)
rm -rf "$root/.comfy_src" && mkdir -p "$root/.comfy_src"
(cd "$src" && tar cf - --exclude=.git --exclude=./tests --exclude=./tests-unit --exclude=./blueprints \
    --exclude=./comfy_api_nodes --exclude=./script_examples --exclude='*.md' --exclude=./openapi.yaml \
    --exclude=__pycache__ --exclude=./input --exclude=./output --exclude=./custom_nodes --exclude='./models/*/*' \
    --exclude=./comfy/text_encoders/qwen35_tokenizer --exclude=./comfy/text_encoders/t5_tokenizer \
    --exclude=./comfy/text_encoders/t5_pile_tokenizer --exclude=./comfy/text_encoders/ace_lyrics_tokenizer \
    --exclude=./comfy/text_encoders/hydit_clip_tokenizer --exclude=./comfy/sd1_tokenizer .) \
    | (cd "$root/.comfy_src" && tar xf -)
mkdir -p "$root/.comfy_src/custom_nodes" "$root/.comfy_src/input" "$root/.comfy_src/output"
du -sh --apparent-size "$whl" "$root/.comfy_src"
# the same tree as one xz tarball, for transfers that also hold .whl_kitchen (64 MiB in one transfer):
# copy [".whl", ".comfy_src.txz", ".whl_kitchen"]; bootstrap.sh unpacks it into /tmp/comfy_src
grep -qxF /.comfy_src.txz/ "$root/.git/info/exclude" || echo /.comfy_src.txz/ >> "$root/.git/info/exclude"
rm -rf "$root/.comfy_src.txz" && mkdir -p "$root/.comfy_src.txz"
tar cJf "$root/.comfy_src.txz/comfy_src.tar.xz" -C "$root/.comfy_src" .
du -sh --apparent-size "$root/.comfy_src.txz"


# --- PyAV (real video and audio files for LongMedia Decode & Save; ComfyUI's own dependency), in its own folder:
# copied alone in a later command on the same machine (bootstrap.sh installs it into the same /tmp/site)
grep -qxF /.whl_av/ "$root/.git/info/exclude" || echo /.whl_av/ >> "$root/.git/info/exclude"
rm -rf "$root/.whl_av" && mkdir -p "$root/.whl_av"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
    -d "$root/.whl_av" av==18.1.0
du -sh --apparent-size "$root/.whl_av"
