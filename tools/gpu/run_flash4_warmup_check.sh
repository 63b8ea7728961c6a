#!/bin/bash
# Issue 29's flash-attn-4 warm-up on a GPU machine without network, as one background job (tools/gpu/hold.sh start): two
# LongMedia exact rows (auto, which picks flash4 where it passes its gate), each the first prompt of its own
# process. The first runs the attention speed timing (flash4 compiles there, at the probe's shape); the second reads
# the probe from disk, so before this change its first model call paid flash4's compile (4.2-4.6 s at 50 blocks on
# an H100). Now the Sampler's warm-up compiles it at the planned shapes (the row's warmup_s) and the report's first
# step should equal its steady step. 8 blocks keep the rows short; the compile does not depend on depth. Then
# layer 4 (tests/gpu) on the same machine, flash4 installed. About 330 s on an H100 after the install (its second
# part waits for command 2): the checkpoint 13 s, the rows about 75 and 60 s, layer 4 70 s.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_flash4_warmup_check.sh'
#   command 2, after copying [".flash4_b"]:  . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmf4w/cards.jsonl
#   later commands, nothing to copy:        bash tools/gpu/hold.sh poll 570 /tmp/lmf4w/cards.jsonl /tmp/lmf4w/tests/gpu_tests.xml
set -u
unset OUT
W=/tmp/lmf4w
echo "flash4 warm-up check: start $(date +%T)"
FLASH4_WHO="flash4 warm-up check" . tools/gpu/flash4_ready.sh
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=72; [ "$total" -gt 130000 ] && card=120
A="--cards $card --formats int8 --seconds 14.4 --blocks 8 --steps 3 --budget-s 300"
# each row its own --out: a card process skips the cells its rows file already holds (bench/cards/child.py)
python3 -m bench.cards --samplers longmedia $A --out $W/probe
python3 -m bench.cards --samplers longmedia $A --out $W/disk
cat "$W/probe/cards.jsonl" "$W/disk/cards.jsonl" > "$W/cards.jsonl"
python3 -m bench.first_row_gap "$W/cards.jsonl"   # probe_s, warm-up, step 1 over the steady step, per row
echo "layer 4: start $(date +%T)"
mkdir -p "$W/tests" && OUT="$W/tests" bash tools/gpu/run_tests.sh -rs
echo "flash4 warm-up check: end $(date +%T)"
