#!/bin/bash
# As run (the machine was lost after the decode, during scheduled_sol's first row). 2026-12-06 third session: too little device time for the whole chain (two refused starts). The 60 s job's decode
# and save through the VAE files under the 16 GiB ballast (issue 28), then issue 29's scheduled_sol rows beside the
# exact rows at the same seed and process position, then stock on the same machine.
# command 1 after copying [.whl .comfy_src.txz .flash4_a .gpu_batch]; command 2 [.whl_av]; command 3 [.flash4_b]
set -u
bash .gpu_batch/run_decode60.sh; rc=$?   # that file is docs/lab/data/2026-12-06-h100-decode-60s-driver.sh
unset OUT
for i in $(seq 1 60); do
    [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && break
    echo "driver29: waiting for flash-attn-4 ($i)"; sleep 3
done
export PYTHONPATH="$PYTHONPATH:$LONGMEDIA_GPU_SITE/nvidia_cutlass_dsl/dsl_packages"
if [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && python3 -m tools.gpu.flash4_gate; then
    echo "driver29: flash-attn-4 passed the gate"
else
    echo "driver29: flash-attn-4 absent or failed its gate: removed"; rm -rf "$LONGMEDIA_GPU_SITE/flash_attn"
fi
echo "driver29: start $(date +%T)"
big=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=72; [ "$big" -gt 130000 ] && card=120
A="--formats int8 --seconds 14.4 --blocks 50 --out /tmp/lm29 --latents /tmp/lm29/lat --budget-s 300"
L=/tmp/lm29/lat
python3 -m bench.cards --cards 16 --samplers longmedia_scheduled_sol --steps 3 $A
python3 -m bench.cards --cards 16 --samplers longmedia --steps 3 $A
python3 bench/latent_diff.py $L/16gib_int8_14.4s_longmedia.pt $L/16gib_int8_14.4s_longmedia_scheduled_sol.pt --tol 1
python3 -m bench.cards --cards $card --samplers longmedia_scheduled_sol --steps 3 $A
python3 -m bench.cards --cards $card --samplers longmedia --steps 3 $A
python3 bench/latent_diff.py $L/${card}gib_int8_14.4s_longmedia.pt $L/${card}gib_int8_14.4s_longmedia_scheduled_sol.pt --tol 1
python3 -m bench.cards --cards $card --samplers stock --steps 2 $A
python3 -m bench.schedule_average /tmp/lm29/cards.jsonl
echo "driver29: end $(date +%T)"
exit $rc
