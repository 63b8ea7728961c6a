# LongMedia: set up ComfyUI + comfy-aimdo/comfy-kitchen on a GPU machine without network.
#
# Source it first in a device command, from the repo root (where `run` starts):
#
#     . tools/gpu/bootstrap.sh || exit 1; PYTHONPATH=$LONGMEDIA_COMFYUI_ROOT:$PYTHONPATH python3 tools/gpu/probe_aimdo.py
#
# with .whl/ and .comfy_src/ copied into it. What it does:
#   1. pip-installs every carried wheel in .whl/ into /tmp/site (--no-index --no-deps);
#   2. restores comfy-kitchen's CUDA extension (.whl/comfy_kitchen-*.cuda_C.abi3.so.xz,
#      checked against its .sha256) into /tmp/site/comfy_kitchen/backends/cuda/_C.abi3.so.
#      The carried comfy-kitchen wheel is repacked without its HIP and CUDA shared
#      libraries (installable as is: comfy-kitchen then falls back to its eager/triton
#      backends); xz brings the 176 MB CUDA library to 21 MB where the wheel's deflate
#      gave 47 MB, which keeps everything within a 64 MiB transfer;
#   3. exports PYTHONPATH=/tmp/site:<repo>/tools/gpu/stubs (the stubs folder holds an
#      import-only `av` stand-in, last on the path so a real PyAV would win),
#      LONGMEDIA_COMFYUI_ROOT=<repo>/.comfy_src and LONGMEDIA_GPU_SITE=/tmp/site;
#   4. prints the versions that matter.
# A later command on the same machine may bring .whl_av/ (PyAV) alone: it is installed into the same /tmp/site.
# ComfyUI's own folder is NOT put on PYTHONPATH (its top-level `nodes`, `utils`, `app`
# would shadow other packages); the probe's own command line puts it there for that process, the card bench
# and tests/gpu start their ComfyUI child processes with bench.cards.comfy_process.child_env().
# Rebuild .whl/.comfy_src as tools/gpu/README.md says.

_lm_gpu_bootstrap() {
    local root site so_xz so_sha dest comfy reuse=0
    root="$(pwd)"
    site=/tmp/site
    comfy="$root/.comfy_src"
    if [ -f "$site/.longmedia_bootstrap" ] && [ -d /tmp/comfy_src ]; then
        # a later command on the same machine (not reset since): the earlier install is still there. Installing again, even
        # when the command still finds .whl and .comfy_src.txz (the machine keeps them until it is reset), would replace packages
        # under a run held from that command (tools/gpu/hold.sh); a command may also come without .whl, to leave room for
        # other parts (tools/gpu/flash4.sh's, .whl_av)
        [ -d "$comfy" ] || comfy=/tmp/comfy_src
        echo "bootstrap: reusing $site and $comfy from an earlier command on this machine"
        reuse=1
    elif [ ! -d "$comfy" ] && [ -f "$root/.comfy_src.txz/comfy_src.tar.xz" ]; then
        # .comfy_src.txz/comfy_src.tar.xz (2.6 MiB instead of 12.4) leaves room in a 64 MiB transfer for other parts
        comfy=/tmp/comfy_src
        rm -rf "$comfy" && mkdir -p "$comfy" && tar xJf "$root/.comfy_src.txz/comfy_src.tar.xz" -C "$comfy" \
            || { echo "bootstrap: unpacking .comfy_src.txz failed" >&2; return 1; }
    fi
    if [ "$reuse" != 1 ] && { [ ! -d "$root/.whl" ] || [ ! -d "$comfy" ]; }; then
        echo "bootstrap: run from the repo root with [\".whl\", \".comfy_src\"] or [\".whl\", \".comfy_src.txz\"] (missing in $root)" >&2
        return 1
    fi
    [ "$reuse" = 1 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$root"/.whl/*.whl || { echo "bootstrap: pip install of .whl/*.whl failed" >&2; return 1; }

    # .whl_av (optional, PyAV's 36 MB wheel): real video and audio file I/O, where the av stub only imports; it
    # travels alone in a later transfer (no room beside .whl) and goes into the same site, ahead of the stub
    if [ -d "$root/.whl_av" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "$root"/.whl_av/*.whl || { echo "bootstrap: pip install of .whl_av failed" >&2; return 1; }
    fi

    so_xz="$([ "$reuse" = 1 ] || ls "$root"/.whl/comfy_kitchen-*.cuda_C.abi3.so.xz 2>/dev/null | head -n 1)"
    if [ -n "$so_xz" ]; then
        so_sha="${so_xz%.xz}.sha256"
        dest="$site/comfy_kitchen/backends/cuda/_C.abi3.so"
        python3 - "$so_xz" "$dest" "$so_sha" <<'PY' || { echo "bootstrap: restoring comfy-kitchen's CUDA extension failed" >&2; return 1; }
import hashlib, lzma, os, sys
src, dest, sha_file = sys.argv[1:4]
data = lzma.open(src).read()
digest = hashlib.sha256(data).hexdigest()
if os.path.exists(sha_file):
    want = open(sha_file).read().split()[0]
    if digest != want:
        sys.exit(f"sha256 mismatch for {src}: {digest} != {want}")
os.makedirs(os.path.dirname(dest), exist_ok=True)
with open(dest + ".tmp", "wb") as f:
    f.write(data)
os.replace(dest + ".tmp", dest)
print(f"bootstrap: comfy-kitchen CUDA extension restored ({len(data) / 2**20:.0f} MiB, sha256 ok)")
PY
    fi

    touch "$site/.longmedia_bootstrap"   # a later command on this machine may come without .whl (see above)
    export LONGMEDIA_GPU_SITE="$site"
    export LONGMEDIA_COMFYUI_ROOT="$comfy"
    export PYTHONPATH="$site:$root/tools/gpu/stubs${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
    python3 - <<'PY'
import importlib, platform, sys
def ver(name):
    try:
        m = importlib.import_module(name)
        v = getattr(m, "__version__", None)
        if v is None:
            from importlib.metadata import version
            v = version(name.replace("_", "-"))
        return str(v) + (" (stub)" if getattr(m, "LONGMEDIA_STUB", False) else "")
    except Exception as e:
        return f"MISSING ({type(e).__name__}: {e})"
import torch
print(f"bootstrap: python {platform.python_version()} at {sys.executable}")
print(f"bootstrap: torch {torch.__version__} cuda {torch.version.cuda} available={torch.cuda.is_available()}"
      + (f" device={torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
print("bootstrap: " + ", ".join(f"{n} {ver(n)}" for n in (
    "triton", "torchvision", "torchaudio", "comfy_aimdo", "comfy_kitchen", "torchsde",
    "sqlalchemy", "pydantic", "av")))
PY
    echo "bootstrap: LONGMEDIA_COMFYUI_ROOT=$LONGMEDIA_COMFYUI_ROOT PYTHONPATH=$PYTHONPATH"
}
_lm_gpu_bootstrap
