#!/bin/bash
# The 60 s job's Sampler stage at 8 steps, cfg 1 (issue 46: the turbo schedule's whole Sampler stage at full depth),
# with all RAM, then its first two passes under 16 GiB of host RAM (issue 45), on a GPU machine without network
# (128 GiB RAM, no swap), as one background job (tools/gpu/hold.sh start). INT8, 50 blocks, 1344x768, 60 s in 10 s
# segments, the 16 GiB card (ballast), flash-attn-4 past its gate.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job_turbo_sampler.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmts/*/long_job_*.jsonl /tmp/lmts/*.md
#   later commands, nothing to copy: bash tools/gpu/hold.sh poll 570 /tmp/lmts/*/long_job_*.jsonl /tmp/lmts/*.md
#
# With all RAM on an H100 a Sampler model call of this job took 22.6 s: 7 passes x 8 calls, about 21 minutes.
set -u
W=/tmp/lmts M=/tmp/longmedia_models WHO="the 60 s turbo Sampler"
. tools/gpu/long_job_begin.sh
FLASH4_WHO="$WHO" . tools/gpu/flash4_ready.sh
run() {  # run FOLDER [ARGS]: the Sampler stage at 8 steps in $W/FOLDER, its rows kept, then the table
    local folder=$1
    shift
    echo "Sampler, 8 steps, $folder $* $(date +%T)"
    python3 -m bench.long_job --stage sampler --sampler-steps 8 --blocks 50 --out $W/$folder --models $M "$@"
    cp -f $W/$folder/long_job.jsonl $W/$folder/long_job_$folder.jsonl
    python3 -m bench.long_job --table $W/$folder/long_job.jsonl > $W/long_job_table_$folder.md
    tail -12 $W/long_job_table_$folder.md
}
run all --stage-budget-s 1500
run r16 --host-ram-gb 16 --passes 0 2 --stage-budget-s 600
echo "$WHO: end $(date +%T)"
