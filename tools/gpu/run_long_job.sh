#!/bin/bash
# Issue 28's whole 60 s job on a GPU machine without network, as one background job (tools/gpu/hold.sh start), with
# flash-attn-4 and PyAV arriving in later commands:
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_long_job.sh'
#   command 2, after copying [".flash4_b"]:  . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540
#   command 3, after copying [".whl_av"]:    . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh poll 560
#   later commands, nothing to copy:        bash tools/gpu/hold.sh poll 570 /tmp/longmedia_long_job/long_job.jsonl \
#                                     /tmp/longmedia_long_job/long_job_plan.json /tmp/longmedia_long_job/long_job_table.md
#
# The checkpoint is written while flash-attn-4's second part travels; flash-attn-4 runs only past its gate
# (tools/gpu/flash4_gate.py), else it is removed and auto picks among the others. The DiT stages run whole, in
# order, each its own process; the decode waits for a real PyAV, then writes the two VAE files (about 20 s) and
# loads them through ComfyUI's VAELoader. About 1,350 s of GPU time on an H100 (measured: checkpoint 52 s,
# DiT stages 925 s with flash-attn-4, decode 273 s).
set -u
unset OUT
W=/tmp/longmedia_long_job
echo "long job: start $(date +%T), LONGMEDIA_FLASH4=${LONGMEDIA_FLASH4:-unset}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m bench.long_job --prepare --blocks 50 --out $W || exit 1
FLASH4_WHO="long job" . tools/gpu/flash4_ready.sh
echo "long job: DiT stages $(date +%T)"
python3 -m bench.long_job --stages sampler hires refiner --blocks 50 --out $W --stage-budget-s 900
rc=$?
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "long job: waiting for PyAV ($i)"; sleep 5
done
echo "long job: decode $(date +%T) (DiT stages exit $rc)"
[ $rc = 0 ] && python3 -m bench.long_job --stages decode --blocks 50 --out $W --stage-budget-s 600
rc2=$?
python3 -m bench.long_job --table $W/long_job.jsonl > $W/long_job_table.md
echo "long job: end $(date +%T)"
[ $rc = 0 ] && exit $rc2
exit $rc
