# LongMedia: a newer comfy-kitchen (>= 0.2.36: sol_attn, sol_attn_chunked, int8_attention) on a GPU
# machine, for bench/attention.py's kitchen rows and tests/gpu's kitchen-backend tests. Source it from the repo
# root with .whl_kitchen/ copied into it (built here by `KITCHEN_BENCH=0.2.40 bash tools/gpu/build_carry.sh`; 33 MiB,
# too much to travel beside .whl and .comfy_src in one call):
#
#     . tools/gpu/kitchen_site.sh || exit 1; python3 -m bench.attention --kitchen
#
# It installs the wheel into /tmp/site_kitchen, restores its CUDA library (checked by sha256) and puts the
# site first on PYTHONPATH. ComfyUI is not needed for these rows.

_lm_kitchen_site() {
    local root site so_xz
    root="$(pwd)"
    site=/tmp/site_kitchen
    [ -d "$root/.whl_kitchen" ] || { echo "kitchen_site: copy .whl_kitchen/ into the repo root (missing in $root)" >&2; return 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$root"/.whl_kitchen/*.whl || { echo "kitchen_site: pip install failed" >&2; return 1; }
    so_xz="$(ls "$root"/.whl_kitchen/comfy_kitchen-*.cuda_C.abi3.so.xz | head -n 1)"
    python3 - "$so_xz" "$site/comfy_kitchen/backends/cuda/_C.abi3.so" "${so_xz%.xz}.sha256" <<'PY' || return 1
import hashlib, lzma, os, sys
src, dest, sha_file = sys.argv[1:4]
data = lzma.open(src).read()
if hashlib.sha256(data).hexdigest() != open(sha_file).read().split()[0]:
    sys.exit(f"kitchen_site: sha256 mismatch for {src}")
os.makedirs(os.path.dirname(dest), exist_ok=True)
with open(dest, "wb") as f:
    f.write(data)
print(f"kitchen_site: CUDA library restored ({len(data) / 2**20:.0f} MiB, sha256 ok)")
PY
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
    python3 -c "import comfy_kitchen, torch; print('kitchen_site: comfy_kitchen', getattr(comfy_kitchen, '__version__', '?'), 'torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda')"
}
_lm_kitchen_site
