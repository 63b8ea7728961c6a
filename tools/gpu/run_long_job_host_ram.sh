#!/bin/bash
# Issue 45's 60 s job at 32 GiB of host RAM, end to end (Sampler, Hi-Res, Refiner, Decode & Save, each stage its
# own process beside one RAM balloon), on a GPU machine without network (128 GiB RAM, no swap), as one background
# job (tools/gpu/hold.sh start). Layer 4's residency files run first; the all-RAM basis (the Sampler's first two
# passes) runs last, in the same machine's run.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job_host_ram.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmlj32/long_job.jsonl
#   command 3, after copying [".whl_av"] (the decode waits up to 5 minutes for a real PyAV):
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh poll 560 /tmp/lmlj32/long_job.jsonl
#   later commands, nothing to copy:
#     bash tools/gpu/hold.sh poll 570 /tmp/lmlj32/long_job.jsonl /tmp/lmlj32/*.md /tmp/lmlj32/all/all_long_job.jsonl /tmp/lmlj32/layer4.log
#
# Every stage: INT8, 50 blocks, 1344x768, 60 s in 10 s segments, the 16 GiB card (ballast), flash-attn-4 past its
# gate, 2 / 1 / 1 steps at cfg 1 (bench/long_job/job.py). The all-RAM DiT stages took 838 s on an H100
# (docs/lab/data/2026-12-06-h100-long-job-60s-table.md), the decode about 273 s.
set -u
unset OUT
W=/tmp/lmlj32 M=/tmp/longmedia_models
L="--blocks 50 --out $W --models $M --host-ram-gb 32"
mkdir -p "$W"
echo "long job at 32 GiB: start $(date +%T)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
grep -E "MemTotal|MemAvailable|SwapTotal" /proc/meminfo
python3 -m bench.long_job --prepare $L || exit 1
FLASH4_WHO="long job at 32 GiB" . tools/gpu/flash4_ready.sh
echo "layer 4, residency $(date +%T)"
OUT=$W bash tools/gpu/run_tests.sh tests/gpu/test_sampler_dynamic_vram.py tests/gpu/test_int8_lora_dynamic_vram.py \
    tests/gpu/test_executor_full_width.py > $W/layer4.log 2>&1
tail -6 $W/layer4.log
echo "DiT stages at 32 GiB $(date +%T)"
python3 -m bench.long_job --stages sampler hires refiner $L --stage-budget-s 900
rc=$?
python3 -m bench.long_job --table $W/long_job.jsonl > $W/long_job_table.md
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "long job at 32 GiB: waiting for PyAV ($i)"; sleep 5
done
echo "decode at 32 GiB $(date +%T) (DiT stages exit $rc)"
[ $rc = 0 ] && python3 -m bench.long_job --stages decode $L --stage-budget-s 600
python3 -m bench.long_job --table $W/long_job.jsonl > $W/long_job_table.md
cat $W/long_job_table.md
echo "all-RAM basis, the Sampler's passes 0 and 1 $(date +%T)"
python3 -m bench.long_job --stage sampler --passes 0 2 --blocks 50 --out $W/all --models $M --stage-budget-s 300
cp -f $W/all/long_job.jsonl $W/all/all_long_job.jsonl
python3 -m bench.long_job --table $W/all/long_job.jsonl > $W/all_table.md
cat $W/all_table.md
echo "long job at 32 GiB: end $(date +%T)"
