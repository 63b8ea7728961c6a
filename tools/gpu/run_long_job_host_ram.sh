#!/bin/bash
# Issue 45's 60 s job under host RAM limits, each stage its own process beside a RAM balloon, on a GPU machine
# without network (128 GiB RAM, no swap), as one background job (tools/gpu/hold.sh start). In order, most needed
# first: layer 4's residency files; on a card other than an H100, the all-RAM basis (the Sampler's passes 0 and 1;
# on an H100 the basis is the all-RAM run in docs/lab/data/2026-12-06-h100-long-job-60s-table.md); the Sampler
# stage at 32 GiB; the 14.4 s job at 16 GiB with ComfyUI's --fast-disk (killed before LongMedia watched RAM at
# each block); the Sampler stage at 16 GiB; then Hi-Res, the Refiner and Decode & Save at 32 GiB (the job end to end).
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job_host_ram.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmlj32/r*/long_job_*.jsonl /tmp/lmlj32/*.md /tmp/lmlj32/layer4.log
#   command 3, after copying [".whl_av"] (the decode waits up to 5 minutes for a real PyAV), and later commands:
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh poll 560 /tmp/lmlj32/r*/long_job_*.jsonl /tmp/lmlj32/*.md /tmp/lmlj32/fast/fast_disk_cards.jsonl /tmp/lmlj32/all/all_long_job.jsonl
#
# Every stage: INT8, 50 blocks, 1344x768, 60 s in 10 s segments, the 16 GiB card (ballast), flash-attn-4 past its
# gate, 2 / 1 / 1 steps at cfg 1 (bench/long_job/job.py). With all RAM on an H100 the DiT stages took 275-282 s
# each, the decode about 273 s.
set -u
W=/tmp/lmlj32 M=/tmp/longmedia_models WHO="long job at 32 GiB"
. tools/gpu/long_job_begin.sh
FLASH4_WHO="long job at 32 GiB" . tools/gpu/flash4_ready.sh
echo "layer 4, residency $(date +%T)"
OUT=$W bash tools/gpu/run_tests.sh tests/gpu/test_sampler_dynamic_vram.py tests/gpu/test_int8_lora_dynamic_vram.py \
    tests/gpu/test_executor_full_width.py > $W/layer4.log 2>&1
tail -6 $W/layer4.log
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
    echo "all-RAM basis on this card, the Sampler's passes 0 and 1 $(date +%T)"
    python3 -m bench.long_job --stage sampler --passes 0 2 --blocks 50 --out $W/all --models $M --stage-budget-s 300
    cp -f $W/all/long_job.jsonl $W/all/all_long_job.jsonl
fi
stage() {  # stage NAME RAM: one whole stage under that host RAM, in $W/<RAM>, then its table
    echo "$1 at $2 GiB $(date +%T)"
    python3 -m bench.long_job --stages $1 --blocks 50 --out $W/r$2 --models $M --host-ram-gb $2 --stage-budget-s 900
    local rc=$?
    cp -f $W/r$2/long_job.jsonl $W/r$2/long_job_$2.jsonl
    python3 -m bench.long_job --table $W/r$2/long_job.jsonl > $W/long_job_table_$2.md
    tail -4 $W/long_job_table_$2.md
    return $rc
}
stage sampler 32 && s32=ok
echo "14.4 s job at 16 GiB with --fast-disk (the RAM watch) $(date +%T)"
python3 -m bench.cards --cards 16 --formats int8 --seconds 14.4 --blocks 50 --steps 2 --models $M --out $W/fast \
    --samplers longmedia --host-ram-gb 16 --budget-s 300 --comfy-arg=--fast-disk
cp -f $W/fast/cards.jsonl $W/fast/fast_disk_cards.jsonl
python3 -m bench.cards --host-table $W/fast/cards.jsonl > $W/fast_disk_table.md 2>&1; cat $W/fast_disk_table.md
stage sampler 16
[ "${s32:-}" = ok ] && stage hires 32 && stage refiner 32 && {
    for i in $(seq 1 60); do
        python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
        echo "long job at 32 GiB: waiting for PyAV ($i)"; sleep 5
    done
    stage decode 32
}
echo "long job host RAM: end $(date +%T)"
