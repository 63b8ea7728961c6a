#!/bin/bash
# What the 60 s job at 32 GiB of host RAM still lacks (issue 45; the Sampler stage is in
# docs/lab/data/2026-12-07-h100-long-job-60s-32gib.jsonl): Hi-Res whole, the Refiner and Decode & Save at Hi-Res's
# size; then, as time allows, issue 50's per-kernel profile of one full-width block (bench.block_profile, about 2
# minutes) and the 14.4 s job all RAM and at 16 GiB with ComfyUI's --fast-disk (LongMedia's RAM watch on the GPU). On a GPU machine without network (128 GiB RAM, no swap), as one background job (tools/gpu/hold.sh
# start). Each stage starts from a seeded random latent of its input's shape (bench.long_job --seeded-input; its
# rows say seeded_input): time and memory do not depend on the latent's values, and the weights are random anyway.
# A stage runs whole: `--passes` continues from the latents its earlier passes saved on the same machine.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job_32gib_end.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmje/r32/long_job_32.jsonl /tmp/lmje/*.md /tmp/lmje/lm/cards.jsonl /tmp/lmje/block_profile.jsonl
#   command 3, after copying [".whl_av"] (the decode, after Hi-Res and the Refiner, waits up to 5 minutes for a real
#   PyAV), and later commands:
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh poll 560 /tmp/lmje/r32/long_job_32.jsonl /tmp/lmje/*.md /tmp/lmje/lm/cards.jsonl /tmp/lmje/block_profile.jsonl
#
# Every stage: INT8, 50 blocks, 1344x768, 60 s in 10 s segments, the 16 GiB card (ballast), flash-attn-4 past its
# gate, 1 step at cfg 1 for Hi-Res and the Refiner (bench/long_job/job.py). On an H100 with all RAM Hi-Res and the
# Refiner took about 290 s each, the decode about 273 s; at 32 GiB a Hi-Res call took 1.13x.
set -u
W=/tmp/lmje M=/tmp/longmedia_models WHO="the 60 s job's end at 32 GiB"
. tools/gpu/long_job_begin.sh
python3 -m bench.disk_read $M/full_h3_int8_50blocks.safetensors 2>&1 | tail -2
python3 -c "from bench.cards.host_balloon import make_cgroup, remove_cgroup
folder, why = make_cgroup(32, 'longmedia_probe')
print('cgroup v2 memory.max here:', why)
folder and remove_cgroup(folder)"   # whether --host-ram-limit cgroup can run on this machine
FLASH4_WHO="$WHO" . tools/gpu/flash4_ready.sh
stage() {  # stage NAME [ARGS]: one stage under 32 GiB in $W/r32, its rows kept, then the table
    local name=$1
    shift
    echo "$name at 32 GiB $* $(date +%T)"
    python3 -m bench.long_job --stage "$name" --blocks 50 --out $W/r32 --models $M --host-ram-gb 32 \
        --stage-budget-s 900 --seeded-input "$@"
    local rc=$?
    cp -f $W/r32/long_job.jsonl $W/r32/long_job_32.jsonl   # rows are appended, stage after stage
    python3 -m bench.long_job --table $W/r32/long_job.jsonl > $W/long_job_table_32.md
    tail -6 $W/long_job_table_32.md
    return $rc
}
stage hires
stage refiner
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "$WHO: waiting for PyAV ($i)"; sleep 5
done
stage decode
echo "block profile $(date +%T)"
python3 -m bench.block_profile --out $W/block_profile.md --jsonl $W/block_profile.jsonl 2>&1 | tail -40
A="--cards 16 --formats int8 --seconds 14.4 --blocks 50 --steps 2 --models $M --out $W/lm"
row() {  # row RAM [COMFY ARG]: the 14.4 s job, one LongMedia row, then the table
    echo "14.4 s job at $1 GiB ${2:-} $(date +%T)"
    python3 -m bench.cards $A --samplers longmedia --host-ram-gb "$1" --budget-s 300 ${2:+--comfy-arg=$2}
    python3 -m bench.cards --host-table $W/lm/cards.jsonl > $W/host_table.md 2>&1
    cat $W/host_table.md
}
row all
row 16 --fast-disk
python3 -m bench.disk_read $M/full_h3_int8_50blocks.safetensors 2>&1 | tail -2
echo "$WHO: end $(date +%T)"
