#!/bin/bash
# Issue 28's long job, then issue 29's rows, one background job on the GPU machine (tools/gpu/hold.sh).
# Needs the environment of tools/gpu/bootstrap.sh (+ tools/gpu/flash4.sh). PyAV (.whl_av) arrives in a later call.
set -u
unset OUT
W=/tmp/longmedia_long_job
echo "driver: start $(date +%T), LONGMEDIA_FLASH4=${LONGMEDIA_FLASH4:-unset}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# flash-attn-4's second part arrives in the next call (tools/gpu/flash4.sh installs it into the same site); the
# checkpoint is written meanwhile. cutlass's dsl_packages goes on the path now: each stage process starts later.
export PYTHONPATH="$PYTHONPATH:$LONGMEDIA_GPU_SITE/nvidia_cutlass_dsl/dsl_packages"
python3 -m bench.long_job --prepare --blocks 50 --out $W
for i in $(seq 1 60); do
    [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && break
    echo "driver: waiting for flash-attn-4 ($i)"; sleep 3
done
if [ -f "$LONGMEDIA_GPU_SITE/.longmedia_flash4" ] && python3 tools/gpu/flash4_gate.py; then
    echo "driver: flash-attn-4 passed the gate"
else
    echo "driver: flash-attn-4 absent or failed its gate: removed, auto runs without it"
    rm -rf "$LONGMEDIA_GPU_SITE/flash_attn"
fi
echo "driver: long job DiT stages $(date +%T)"
python3 -m bench.long_job --stages sampler hires refiner --blocks 50 --out $W --stage-budget-s 900
rc=$?
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "driver: waiting for PyAV ($i)"; sleep 5
done
echo "driver: long job decode $(date +%T) (DiT stages exit $rc)"
[ $rc = 0 ] && python3 -m bench.long_job --stages decode --blocks 50 --out $W --stage-budget-s 600
python3 -m bench.long_job --table $W/long_job.jsonl > $W/long_job_table.md
echo "driver: issue 29 rows $(date +%T)"
big=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
stock_card=72; [ "$big" -gt 130000 ] && stock_card=120
A="--formats int8 --seconds 14.4 --blocks 50 --out /tmp/lm29 --budget-s 400"
python3 -m bench.cards --cards 16 --samplers longmedia --steps 2 $A
python3 -m bench.cards --cards $stock_card --samplers stock --steps 2 $A
python3 -m bench.cards --cards 16 --samplers longmedia_sol --steps 3 $A
python3 -m bench.cards --cards 16 --samplers longmedia_sol_tau08 --steps 2 $A
python3 -m bench.schedule_average /tmp/lm29/cards.jsonl
echo "driver: end $(date +%T)"
