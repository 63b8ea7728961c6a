#!/bin/bash
# Issue 29's first-prompt control pair on a GPU machine without network, as one background job (tools/gpu/hold.sh start; no
# flash-attn-4 needed):
#
#   command 1, after copying [".whl", ".comfy_src.txz"]:
#     . tools/gpu/bootstrap.sh || exit 1; bash tools/gpu/hold.sh start 'bash tools/gpu/run_first_prompt_control.sh'; bash tools/gpu/hold.sh poll 540 /tmp/lmfp/cards.jsonl
#   later commands, nothing to copy:  bash tools/gpu/hold.sh poll 570 /tmp/lmfp/cards.jsonl
#
# Arguments, if any, replace the three rows (`stock stock#2` alone: the pair, about 130 s less).
#
# One card process, every weight resident (72 GiB on an H100 80GB, 120 GiB on an H200), three prompts in this
# order: stock, stock#2 (stock again at the same inputs after ComfyUI's node cache is freed, as its "free memory"
# request does: bench.cards.prompts.execute) and longmedia_existing (LongMedia normal + existing, the third
# prompt). Two steps each, as the rows whose checksums docs/lab/2026-12-04-full-depth-step-times.md compares
# (first prompt -408311.47, later -408477.32), each row's CUDA kernels named (--kernels), each latent saved; then
# bench/latent_diff.py compares stock#2 and LongMedia with stock's first prompt. About 470 s on an H100 (the
# checkpoint's write about 60 s, each row about 130 s).
set -u
unset OUT
W=/tmp/lmfp
echo "first-prompt control: start $(date +%T)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=72; [ "$total" -gt 130000 ] && card=120
ROWS=("$@"); [ ${#ROWS[@]} -eq 0 ] && ROWS=(stock 'stock#2' longmedia_existing)
python3 -m bench.cards --cards $card --formats int8 --seconds 14.4 --blocks 50 --steps 2 \
    --samplers "${ROWS[@]}" --kernels --out "$W" --latents "$W/lat" --budget-s 600
L="$W/lat/${card}gib_int8_14.4s"
python3 bench/latent_diff.py "${L}_${ROWS[0]}.pt" $(for r in "${ROWS[@]:1}"; do echo "${L}_$r.pt"; done) --tol 1
echo "first-prompt control: end $(date +%T)"
