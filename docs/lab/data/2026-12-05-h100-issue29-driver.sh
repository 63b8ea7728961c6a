#!/bin/bash
# Issue 29's rows on the GPU machine (tools/gpu/hold.sh), after the long job was stopped.
set -u
unset OUT
echo "driver29: start $(date +%T), LONGMEDIA_FLASH4=${LONGMEDIA_FLASH4:-unset}"
big=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
stock_card=72; [ "$big" -gt 130000 ] && stock_card=120
A="--formats int8 --seconds 14.4 --blocks 50 --out /tmp/lm29 --budget-s 400"
python3 -m bench.cards --cards 16 --samplers longmedia --steps 2 $A
python3 -m bench.cards --cards $stock_card --samplers stock --steps 2 $A
python3 -m bench.cards --cards 16 --samplers longmedia_sol --steps 3 $A
python3 -m bench.cards --cards 16 --samplers longmedia_sol_tau08 --steps 2 $A
python3 -m bench.schedule_average /tmp/lm29/cards.jsonl
echo "driver29: end $(date +%T)"
