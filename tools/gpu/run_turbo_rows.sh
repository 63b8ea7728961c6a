#!/bin/bash
# The turbo rows of issue 46 item 5, as one background job (tools/gpu/hold.sh start) on a GPU machine without network:
# INT8, 50 blocks, 14.4 s, 8 steps at cfg 1 (the bench's cfg), flash-attn-4 past its gate, all host RAM. In order:
# LongMedia on the 16 GiB card (ballast) with a random rank-64 LoRA on every block linear; the same without a LoRA;
# stock with that LoRA, every weight resident on a 72 GiB card (120 on an H200); the two LoRA latents compared.
# Rows go to $W/turbo/cards.jsonl as each ends, the tables to $W/*.md.
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_turbo_rows.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmtu/*.md /tmp/lmtu/turbo/cards.jsonl
#   later commands, nothing to copy: bash tools/gpu/hold.sh poll 570 /tmp/lmtu/*.md /tmp/lmtu/turbo/cards.jsonl
#
# On an H100 a 2-step row of this job took about 34 s a step on the 16 GiB card and 56 s for stock: about 330 s and
# 510 s a row at 8 steps with the model's load, about 20 minutes with the checkpoint's write.
set -u
unset OUT
W=/tmp/lmtu M=/tmp/lmhost_models WHO="turbo rows"
. tools/gpu/full_depth_start.sh
A="--formats int8 --seconds 14.4 --blocks 50 --steps 8 --models $M --out $W/turbo"
table() {
    python3 -m bench.cards --table $W/turbo/cards.jsonl > $W/turbo_table.md 2>&1
    cat $W/turbo_table.md
}
echo "LongMedia, 16 GiB card, rank-64 LoRA, 8 steps $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --lora-rank 64 $A --latents $W/lat_lora --budget-s 420
table
echo "LongMedia, 16 GiB card, no LoRA, 8 steps $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia $A --budget-s 420
table
echo "stock, ${big} GiB card, rank-64 LoRA, 8 steps $(date +%T)"
python3 -m bench.cards --cards $big --samplers stock --lora-rank 64 $A --latents $W/lat_lora --budget-s 600
table
python3 bench/latent_diff.py $W/lat_lora/${big}gib_int8_14.4s_stock.pt $W/lat_lora/16gib_int8_14.4s_longmedia.pt \
    --tol 10 > $W/lora_latents.md 2>&1
cat $W/lora_latents.md
echo "turbo rows: end $(date +%T)"
