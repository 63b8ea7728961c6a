#!/bin/bash
# Issue 45's host-RAM rows on a GPU machine without network, as one background job (tools/gpu/hold.sh start): what
# a user with 16/24/32/48 GiB of RAM gets on a 16 GiB card, on a 128 GiB machine without swap, each limit held by a
# RAM balloon (bench/cards/host_balloon.py: MemAvailable down to the limit), exact auto with flash-attn-4 as in the
# earlier full-depth rows.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_host_ram.sh'; bash tools/gpu/hold.sh poll 20 /tmp/lmhost/host_table.md
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmhost/host_table.md
#   later commands, nothing to copy:
#     bash tools/gpu/hold.sh poll 570 /tmp/lmhost/host_table.md; for d in lm stock pinned_off fast_disk; do cp /tmp/lmhost/$d/cards.jsonl $OUT/$d.jsonl 2>/dev/null; done
#
# INT8, 50 blocks, 14.4 s, 2 steps (cfg 1: one model call a step), 16 GiB card (ballast), most needed first, so
# that a run cut short still has the rows that matter: LongMedia at host RAM all, 32 and 16 GiB; stock with every
# weight resident on a 72 GiB card (120 on an H200: stock runs out of memory on the 16 GiB card); LongMedia at 32 GiB
# with its disk read-ahead off (the control of that change); LongMedia at 24 and 48 GiB; at 32 GiB with ComfyUI's
# --disable-pinned-memory, then with --fast-disk. Each row's card process starts cold (the checkpoint's page cache
# dropped). Then `python -m bench.cards --host-table` over every row.
#
# Expected GPU time on an H100: about 1,500 s (the checkpoint's write about 60 s; nine full-depth rows about
# 100-160 s each with their process's start, more for the low-RAM rows that read weights from disk every step; each
# balloon's fill up to about 30 s). A row the kernel's OOM killer ends is recorded as "host OOM" and the job goes on.
set -u
unset OUT
W=/tmp/lmhost
mkdir -p $W
M=/tmp/lmhost_models
echo "host RAM rows: start $(date +%T)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
grep -E "MemTotal|MemAvailable|SwapTotal" /proc/meminfo
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
big=72; [ "$total" -gt 130000 ] && big=120
A="--formats int8 --seconds 14.4 --blocks 50 --steps 2 --models $M"
python3 -m longmedia.testing.full_h3 $M --blocks 50 --variant int8   # while flash-attn-4's second part arrives
FLASH4_WHO="host RAM rows" . tools/gpu/flash4_ready.sh
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb all 32 16 --out $W/lm $A --budget-s 900
echo "host RAM rows: stock reference $(date +%T)"
python3 -m bench.cards --cards $big --samplers stock --host-ram-gb all --out $W/stock $A --budget-s 400
echo "host RAM rows: read-ahead control, 24 and 48 GiB $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia_read_ahead --host-ram-gb 32 --out $W/lm $A --budget-s 400
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 24 48 --out $W/lm $A --budget-s 600
host_table() {
    python3 -m bench.cards --host-table $W/lm/cards.jsonl $W/stock/cards.jsonl $W/pinned_off/cards.jsonl \
        $W/fast_disk/cards.jsonl > $W/host_table.md 2>&1
}
host_table
echo "host RAM rows: ComfyUI flags $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 32 --comfy-arg=--disable-pinned-memory \
    --out $W/pinned_off $A --budget-s 400
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 32 --comfy-arg=--fast-disk \
    --out $W/fast_disk $A --budget-s 400
host_table
cat $W/host_table.md
echo "host RAM rows: end $(date +%T)"
