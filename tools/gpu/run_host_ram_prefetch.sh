#!/bin/bash
# Host RAM rows with ComfyUI's block prefetch on where weights come from disk (issue 45), the LoRA rows (issue 46),
# and the GPU layer's files this change touches, as one background job (tools/gpu/hold.sh start) on a GPU machine
# without network (128 GiB RAM, no swap; each RAM limit held by bench/cards/host_balloon.py).
#
#   command 1, after copying [".whl", ".comfy_src.txz", ".flash4_a"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh start 'bash tools/gpu/run_host_ram_prefetch.sh'; bash tools/gpu/hold.sh poll 20
#   command 2 (at once: flash4_ready.sh waits 3 minutes for it), after copying [".flash4_b"]:
#     . tools/gpu/bootstrap.sh || exit 1; . tools/gpu/flash4.sh; bash tools/gpu/hold.sh poll 540 /tmp/lmh2/*.md
#   later commands, nothing to copy: bash tools/gpu/hold.sh poll 570 /tmp/lmh2/*.md; cp /tmp/lmh2/*/cards.jsonl ... to $OUT
#
# In order, most needed first: tests/gpu's files for the cast and the Sampler under Dynamic VRAM; INT8, 50 blocks,
# 14.4 s, 2 steps at cfg 1, the 16 GiB card (ballast): LongMedia at host RAM all, 32 and 16 GiB; the control at 32
# GiB with ComfyUI's block prefetch forced off (the plan before this change); LongMedia with a random rank-64 LoRA on
# every block linear, all RAM; stock with that LoRA, every weight resident on a 72 GiB card (120 on an H200); the
# latents compared; LongMedia at 24 and 48 GiB; the rest of tests/gpu. Rows go to $W/<set>/cards.jsonl as each
# ends; the tables to $W/host_table.md and $W/lora_latents.md.
set -u
unset OUT
W=/tmp/lmh2 M=/tmp/lmhost_models WHO="prefetch rows"
. tools/gpu/full_depth_start.sh
A="--formats int8 --seconds 14.4 --blocks 50 --steps 2 --models $M"
echo "layer 4, the change's files $(date +%T)"
OUT=$W bash tools/gpu/run_tests.sh tests/gpu/test_int8_lora_dynamic_vram.py tests/gpu/test_sampler_dynamic_vram.py \
    tests/gpu/test_executor_full_width.py > $W/layer4_change.log 2>&1
tail -25 $W/layer4_change.log
host_table() {
    python3 -m bench.cards --host-table $W/lm/cards.jsonl $W/lora/cards.jsonl > $W/host_table.md 2>&1
}
echo "host RAM rows $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb all 32 16 --out $W/lm $A --budget-s 700
host_table
python3 -m bench.cards --cards 16 --samplers longmedia_prefetch_off --host-ram-gb 32 --out $W/lm $A --budget-s 300
host_table; cat $W/host_table.md
echo "LoRA rows $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb all --lora-rank 64 --out $W/lora $A \
    --latents $W/lat_lora --budget-s 300
python3 -m bench.cards --cards $big --samplers stock --lora-rank 64 --out $W/lora $A --latents $W/lat_lora --budget-s 400
python3 bench/latent_diff.py $W/lat_lora/${big}gib_int8_14.4s_stock.pt $W/lat_lora/16gib_int8_14.4s_longmedia.pt \
    --tol 10 > $W/lora_latents.md 2>&1
cat $W/lora_latents.md
host_table; cat $W/host_table.md
echo "24 GiB $(date +%T)"
python3 -m bench.cards --cards 16 --samplers longmedia --host-ram-gb 24 --out $W/lm $A --budget-s 300
host_table; cat $W/host_table.md
echo "layer 4, the rest $(date +%T)"
OUT=$W bash tools/gpu/run_tests.sh tests/gpu/test_kernels_compiled.py tests/gpu/test_kitchen_backends_compiled.py \
    tests/gpu/test_speed_timing_and_warmup.py tests/gpu/test_block_sparse_gpu.py > $W/layer4_rest.log 2>&1
tail -15 $W/layer4_rest.log
echo "prefetch rows: end $(date +%T)"
