#!/bin/bash
# Issue 45's host-RAM rows on a GPU machine without network, as one background job (tools/gpu/hold.sh start; no
# flash-attn-4 needed): what a user with 16/24/32/48 GiB of RAM gets on a 16 GiB card, on a 128 GiB machine
# without swap, each limit held by a RAM balloon (bench/cards/host_balloon.py: MemAvailable down to the limit).
#
#   call 1, carry [".whl", ".comfy_src.txz"]:
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh start 'bash tools/gpu/run_host_ram.sh'; bash tools/gpu/hold.sh poll 540 /tmp/lmhost/longmedia/cards.jsonl
#   later calls, no carry:
#     bash tools/gpu/hold.sh poll 570 /tmp/lmhost/longmedia/cards.jsonl /tmp/lmhost/stock/cards.jsonl /tmp/lmhost/host_table.md
#   (the files share a basename: the later copy wins in $OUT; the host table holds every row, and the last call
#   can copy each file under its own name: for d in longmedia stock pinned_off fast_disk; do cp /tmp/lmhost/$d/cards.jsonl $OUT/$d.jsonl; done)
#
# INT8, 50 blocks, 14.4 s, 2 steps, 16 GiB card (ballast), in this order, each into its own --out folder so that no
# row skips another: LongMedia at host RAM all, 48, 32, 24, 16 GiB (one card process each, the checkpoint's page
# cache dropped before each); stock unconstrained on a 72 GiB card (120 on an H200: the stock reference, stock
# runs out of memory on the 16 GiB card); LongMedia at 32 GiB with --disable-pinned-memory, then with --fast-disk.
# Then `python -m bench.cards --host-table` over every row. The first row is the machine's first LongMedia row:
# its first step carries the attention speed probe (probe_s in its row).
#
# Expected device time on an H100: about 1,400 s (the checkpoint's write about 60 s; eight full-depth rows about
# 100-150 s each with their process's start, more for the low-RAM rows that read weights from disk every step;
# each balloon's fill up to about 30 s; each invocation's cold read of 8 GiB a few seconds). A row the kernel's
# OOM killer ends is recorded as "host OOM" and the job goes on.
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
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb all 48 32 24 16 --out $W/longmedia $A \
    --budget-s 1500
echo "host RAM rows: stock reference $(date +%T)"
python3 -m bench.cards --cards $big --samplers stock --host-ram-gb all --out $W/stock $A --budget-s 600
echo "host RAM rows: ComfyUI flags $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 32 --comfy-arg=--disable-pinned-memory \
    --out $W/pinned_off $A --budget-s 600
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 32 --comfy-arg=--fast-disk \
    --out $W/fast_disk $A --budget-s 600
python3 -m bench.cards --host-table $W/longmedia/cards.jsonl $W/stock/cards.jsonl $W/pinned_off/cards.jsonl \
    $W/fast_disk/cards.jsonl | tee $W/host_table.md
echo "host RAM rows: end $(date +%T)"
