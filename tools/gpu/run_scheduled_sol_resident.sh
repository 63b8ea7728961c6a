#!/bin/bash
# scheduled_sol with every weight resident (issue 29's last rows) on a GPU machine without network, as one
# background job (tools/gpu/hold.sh start): beside the exact row at the same seed and process position and stock, all
# in one run, so that its ratio to stock comes from one machine.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_scheduled_sol_resident.sh'
#   command 2, after copying [".flash4_b"]:  . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lm29u/cards.jsonl
#   later commands, nothing to copy:        bash tools/gpu/hold.sh poll 570 /tmp/lm29u/cards.jsonl
#
# The card is 72 GiB on an H100 80GB and 120 GiB on an H200 (stock peaks at 62.79 GiB: unconstrained on both). The
# exact row runs first: a machine's first LongMedia row runs the attention speed timing before its first model call
# (docs/PERFORMANCE.md, "Where the first row's extra seconds go"), now reported as its probe_s, so scheduled_sol's
# first step is not charged with it. About 450 s of GPU time on an H100 (the checkpoint's write about 60 s, the
# three rows about 110, 90 and 115 s with their processes' starts).
set -u
unset OUT
W=/tmp/lm29u
echo "issue 29 rows: start $(date +%T), LONGMEDIA_FLASH4=${LONGMEDIA_FLASH4:-unset}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
FLASH4_WHO="issue 29 rows" . tools/gpu/flash4_ready.sh
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=72; [ "$total" -gt 130000 ] && card=120
A="--cards $card --formats int8 --seconds 14.4 --blocks 50 --out $W --latents $W/lat --budget-s 300"
python3 -m bench.cards --samplers longmedia --steps 3 $A
python3 -m bench.cards --samplers longmedia_scheduled_sol --steps 3 $A
python3 -m bench.cards --samplers stock --steps 2 $A
python3 bench/latent_diff.py "$W/lat/${card}gib_int8_14.4s_longmedia.pt" \
    "$W/lat/${card}gib_int8_14.4s_longmedia_scheduled_sol.pt" --tol 1
python3 -m bench.schedule_average "$W/cards.jsonl"
python3 -m bench.first_row_gap "$W/cards.jsonl"
echo "issue 29 rows: end $(date +%T)"
