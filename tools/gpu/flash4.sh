# LongMedia: install flash-attn-4 on a GPU machine without network, from parts copied over in two transfers.
#
# Source it after tools/gpu/bootstrap.sh, from the repo root, in every command that follows a part's copy
# (tools/gpu/build_flash4_carry.sh builds .flash4_a and .flash4_b and says how to carry them):
#
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh
#
# Each run copies the parts it finds to /tmp/flash4_parts (kept until the machine is reset). Once every part
# named in MANIFEST is there, each checked by sha256, the archive (nvidia-cutlass-dsl's CUDA 13 libraries) is
# unpacked into $LONGMEDIA_GPU_SITE after the small wheels are installed there, PYTHONPATH gains cutlass's
# dsl_packages, and `import flash_attn.cute` is tried and reported. LONGMEDIA_FLASH4 ends as "installed", "waiting" (a part is still to come) or "failed".

_lm_flash4() {
    local root parts site manifest missing
    root="$(pwd)"
    parts="${FLASH4_PARTS:-/tmp/flash4_parts}"   # kept while the machine stays warm
    site="${LONGMEDIA_GPU_SITE:-/tmp/site}"
    mkdir -p "$parts"
    for d in "$root/.flash4_a" "$root/.flash4_b"; do
        [ -d "$d" ] && cp -f "$d"/* "$parts"/
    done
    manifest="$parts/MANIFEST"
    if [ -f "$site/.longmedia_flash4" ]; then
        LONGMEDIA_FLASH4=installed
    elif [ ! -f "$manifest" ]; then
        echo "flash4: no part carried (carry .flash4_a, then .flash4_b)" >&2
        LONGMEDIA_FLASH4=failed
    else
        missing=$(python3 - "$parts" <<'PY'
import hashlib, os, sys
parts = sys.argv[1]
for line in open(os.path.join(parts, "MANIFEST")):
    kind, name, sha = line.split()
    if kind != "part":
        continue
    path = os.path.join(parts, name)
    if not os.path.exists(path) or hashlib.sha256(open(path, "rb").read()).hexdigest() != sha:
        print(name)
PY
)
        if [ -n "$missing" ]; then
            echo "flash4: waiting for $(echo "$missing" | tr '\n' ' ')(carry the other .flash4_ folder next)"
            LONGMEDIA_FLASH4=waiting
        # the wheels first: pip --target --upgrade replaces a top-level folder it installs (nvidia_cutlass_dsl,
        # which libs-base shares with the CUDA 13 libraries), so the archive is unpacked into it after them
        elif cat "$parts"/cu13.tar.xz.part* > "$parts/cu13.tar.xz" \
            && [ "$(sha256sum "$parts/cu13.tar.xz" | cut -d' ' -f1)" = "$(awk '$1 == "archive" {print $3}' "$manifest")" ] \
            && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                   --target "$site" "$parts"/*.whl \
            && python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" \
                   "$parts/cu13.tar.xz" "$site"; then
            rm -f "$parts/cu13.tar.xz"
            touch "$site/.longmedia_flash4"
            LONGMEDIA_FLASH4=installed
        else
            echo "flash4: assembling or installing the parts failed" >&2
            LONGMEDIA_FLASH4=failed
        fi
    fi
    if [ "$LONGMEDIA_FLASH4" = installed ]; then
        # nvidia-cutlass-dsl puts its `cutlass` package on sys.path from a .pth file, which Python reads in site
        # folders only; $site is on PYTHONPATH, so its dsl_packages goes there too (child processes inherit it)
        case ":$PYTHONPATH:" in
            *":$site/nvidia_cutlass_dsl/dsl_packages:"*) ;;
            *) export PYTHONPATH="$PYTHONPATH:$site/nvidia_cutlass_dsl/dsl_packages" ;;
        esac
        python3 -c "import flash_attn.cute as f; print('flash4: flash_attn.cute imports from', f.__file__)" \
            || LONGMEDIA_FLASH4=failed
    fi
    export LONGMEDIA_FLASH4
    echo "flash4: $LONGMEDIA_FLASH4"
}
_lm_flash4
