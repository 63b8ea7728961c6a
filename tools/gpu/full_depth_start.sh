#!/bin/bash
# Sourced by the full-depth row drivers (run_host_ram_prefetch.sh, run_host_ram_limits.sh, run_turbo_rows.sh) with W (their output
# folder), M (the checkpoint folder) and WHO (their name) set: makes W, prints the GPU and the host's RAM, writes
# the 50-block INT8 checkpoint to M while flash-attn-4's second part arrives, then waits for flash-attn-4. Sets big:
# the card, in GiB, on which stock holds every weight resident (72 on an H100, 120 on an H200).
mkdir -p "$W"
echo "$WHO: start $(date +%T)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
grep -E "MemTotal|MemAvailable|SwapTotal" /proc/meminfo
python3 -m longmedia.testing.full_h3 "$M" --blocks 50 --variant int8
FLASH4_WHO="$WHO" . tools/gpu/flash4_ready.sh
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
big=72; [ "$total" -gt 130000 ] && big=120
