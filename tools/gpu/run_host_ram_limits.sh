#!/bin/bash
# Host RAM rows not yet measured (issue 45): 16 GiB with LongMedia's read-ahead now that ComfyUI's block prefetch
# stays on where weights stream from disk, 24 and 48 GiB, and ComfyUI's --fast-disk / --disable-pinned-memory, as
# one background job (tools/gpu/hold.sh start) on a GPU machine without network (128 GiB RAM, no swap; each RAM
# limit held by bench/cards/host_balloon.py).
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_host_ram_limits.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmh3/*.md /tmp/lmh3/cards.jsonl
#   later commands, nothing to copy: bash tools/gpu/hold.sh poll 570 /tmp/lmh3/*.md /tmp/lmh3/cards.jsonl
#
# Every row: INT8, 50 blocks, 14.4 s, 2 steps at cfg 1, the 16 GiB card (ballast), flash-attn-4. In order, most
# needed first: all RAM (the ratios' basis); 16 GiB with one block read ahead, without, with two; 24 and 48 GiB;
# 16 GiB with --fast-disk; 32 GiB with --disable-pinned-memory and with --fast-disk; then tests/gpu's Sampler file.
# Rows go to $W/lm/cards.jsonl as each ends (copied to $W/cards.jsonl), the table to $W/host_table.md.
set -u
unset OUT
W=/tmp/lmh3 M=/tmp/lmhost_models WHO="host RAM limits"
. tools/gpu/full_depth_start.sh
A="--cards 16 --formats int8 --seconds 14.4 --blocks 50 --steps 2 --models $M --out $W/lm"
row() {  # row SAMPLER RAM BUDGET [COMFY ARG]: one row, then the table
    echo "row $1 at $2 GiB ${4:-} $(date +%T)"
    python3 -m bench.cards $A --samplers "$1" --host-ram-gb "$2" --budget-s "$3" ${4:+--comfy-arg=$4}
    python3 -m bench.cards --host-table $W/lm/cards.jsonl > $W/host_table.md 2>&1
    cp -f $W/lm/cards.jsonl $W/cards.jsonl
    cat $W/host_table.md
}
row longmedia all 300
row longmedia_read_ahead1 16 300
row longmedia 16 300
row longmedia 24 300
row longmedia 48 300
row longmedia 16 300 --fast-disk
row longmedia 32 300 --disable-pinned-memory
row longmedia_read_ahead 16 300
row longmedia 32 300 --fast-disk
echo "layer 4, the Sampler under Dynamic VRAM $(date +%T)"
OUT=$W bash tools/gpu/run_tests.sh tests/gpu/test_sampler_dynamic_vram.py > $W/layer4.log 2>&1
tail -15 $W/layer4.log
echo "host RAM limits: end $(date +%T)"
