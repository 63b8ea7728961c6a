# Sourced by a long GPU driver (run_long_job.sh, run_scheduled_sol_resident.sh), after bootstrap.sh and flash4.sh,
# at the point where it first needs attention: waits up to 3 minutes for flash-attn-4's install (its second part
# arrives in a later command on the GPU machine), then keeps it only past its gate (tools/gpu/flash4_gate.py: LongMedia's flash4
# backend against float32 SDPA at H3's shape), else removes it so that auto picks among the other exact backends.
# FLASH4_WHO names the driver in what it prints.
export PYTHONPATH="$PYTHONPATH:$LONGMEDIA_GPU_SITE/nvidia_cutlass_dsl/dsl_packages"   # cutlass's .pth is not read here
for i in $(seq 1 60); do
    [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && break
    echo "${FLASH4_WHO:-driver}: waiting for flash-attn-4 ($i)"; sleep 3
done
if [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && python3 -m tools.gpu.flash4_gate; then
    echo "${FLASH4_WHO:-driver}: flash-attn-4 passed the gate"
else
    echo "${FLASH4_WHO:-driver}: flash-attn-4 absent or failed its gate: removed, auto runs without it"
    rm -rf "$LONGMEDIA_GPU_SITE/flash_attn"
fi
