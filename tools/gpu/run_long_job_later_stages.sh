#!/bin/bash
# The 60 s job's Hi-Res, Decode & Save and Refiner stages under 32 GiB of host RAM (issue 45: the job end to end at
# 32 GiB, its Sampler stage in docs/lab/data/2026-12-07-h100-long-job-60s-32gib.jsonl), then an all-RAM basis on
# this machine (Hi-Res passes 0 and 1; first on a card other than an H100) and the Sampler's first two passes at 16 GiB, on a GPU machine without network
# (128 GiB RAM, no swap), as one background job (tools/gpu/hold.sh start). Hi-Res starts from a seeded random latent
# of the Sampler's output shape (bench.long_job --seeded-input; its rows say seeded_input): time and memory do not
# depend on the latent's values, and the weights are random anyway.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job_later_stages.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmls/r*/long_job_*.jsonl /tmp/lmls/*.md /tmp/lmls/all/long_job_all.jsonl
#   command 3, after copying [".whl_av"] (the decode waits up to 5 minutes for a real PyAV), and later commands:
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh poll 560 /tmp/lmls/r*/long_job_*.jsonl /tmp/lmls/*.md /tmp/lmls/all/long_job_all.jsonl
#
# Every stage: INT8, 50 blocks, 1344x768, 60 s in 10 s segments, the 16 GiB card (ballast), flash-attn-4 past its
# gate, 1 step at cfg 1 for Hi-Res and the Refiner (bench/long_job/job.py). With all RAM on an H100 these DiT stages
# took 290 s each, the decode about 273 s.
set -u
W=/tmp/lmls M=/tmp/longmedia_models WHO="later stages at 32 GiB"
. tools/gpu/long_job_begin.sh
python3 -m bench.disk_read $M/full_h3_int8_50blocks.safetensors 2>&1 | tail -2
FLASH4_WHO="later stages at 32 GiB" . tools/gpu/flash4_ready.sh
basis() {  # the all-RAM basis on this machine: Hi-Res passes 0 and 1
    echo "all-RAM basis on this machine: Hi-Res passes 0 and 1 $(date +%T)"
    python3 -m bench.long_job --stage hires --passes 0 2 --blocks 50 --out $W/all --models $M --seeded-input \
        --stage-budget-s 300
    cp -f $W/all/long_job.jsonl $W/all/long_job_all.jsonl
}
# on an H100 the all-RAM rows of docs/lab/data/2026-12-06-h100-long-job-60s.jsonl are a basis; elsewhere it comes first
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 || { basis; based=yes; }
stage() {  # stage NAME RAM [ARGS]: one whole stage under that host RAM, in $W/r<RAM>, then its table
    local name=$1 ram=$2
    shift 2
    echo "$name at $ram GiB $(date +%T)"
    python3 -m bench.long_job --stages $name --blocks 50 --out $W/r$ram --models $M --host-ram-gb $ram \
        --stage-budget-s 900 --seeded-input "$@"
    local rc=$?
    cp -f $W/r$ram/long_job.jsonl $W/r$ram/long_job_$ram.jsonl
    python3 -m bench.long_job --table $W/r$ram/long_job.jsonl > $W/long_job_table_$ram.md
    tail -4 $W/long_job_table_$ram.md
    return $rc
}
# Decode & Save before the Refiner (it decodes a seeded latent of Hi-Res's output shape, the Refiner's): the
# Refiner's passes have Hi-Res's rows and weights, the decode's host RAM is its own
stage hires 32 && {
    for i in $(seq 1 60); do
        python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
        echo "later stages: waiting for PyAV ($i)"; sleep 5
    done
    stage decode 32
    stage refiner 32
}
[ "${based:-}" = yes ] || basis
echo "the Sampler's passes 0 and 1 at 16 GiB $(date +%T)"
python3 -m bench.long_job --stage sampler --passes 0 2 --blocks 50 --out $W/r16 --models $M --host-ram-gb 16 \
    --stage-budget-s 400
cp -f $W/r16/long_job.jsonl $W/r16/long_job_16.jsonl
python3 -m bench.disk_read $M/full_h3_int8_50blocks.safetensors 2>&1 | tail -2
echo "later stages: end $(date +%T)"
