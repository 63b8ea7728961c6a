#!/bin/bash
# 2026-12-06 third session, second machine (the first was lost with scheduled_sol's first step done): issue 29's
# scheduled_sol row on the 16 GiB ballast beside the exact row at the same seed and process position.
# command 1 after copying [.whl .comfy_src.txz .flash4_a .gpu_batch]; command 2 [.flash4_b]
set -u
unset OUT
export PYTHONPATH="$PYTHONPATH:$LONGMEDIA_GPU_SITE/nvidia_cutlass_dsl/dsl_packages"
A="--formats int8 --seconds 14.4 --blocks 50 --out /tmp/lm29 --latents /tmp/lm29/lat --budget-s 300"
for i in $(seq 1 60); do
    [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && break
    echo "driver29: waiting for flash-attn-4 ($i)"; sleep 3
done
if [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && python3 -m tools.gpu.flash4_gate; then
    echo "driver29: flash-attn-4 passed the gate"
else
    echo "driver29: flash-attn-4 absent or failed its gate: removed"; rm -rf "$LONGMEDIA_GPU_SITE/flash_attn"
fi
echo "driver29: start $(date +%T)"
L=/tmp/lm29/lat
python3 -m bench.cards --cards 16 --samplers longmedia_scheduled_sol --steps 3 $A
python3 -m bench.cards --cards 16 --samplers longmedia --steps 3 $A
python3 bench/latent_diff.py $L/16gib_int8_14.4s_longmedia.pt $L/16gib_int8_14.4s_longmedia_scheduled_sol.pt --tol 1
python3 -m bench.schedule_average /tmp/lm29/cards.jsonl
echo "driver29: end $(date +%T)"
