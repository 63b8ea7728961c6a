"""End to end in real ComfyUI (PromptExecutor) under simulated 8/12/16/24 GiB cards: stock vs LongMedia auto.

On a GPU machine without network, after tools/gpu/bootstrap.sh:

    python -m bench.cards --smoke                      # 2 blocks, 1 step, one card: proves the script runs
    python -m bench.cards --blocks 2 --steps 2         # the table: 4 cards x 4 lengths x bf16/int8 x 2 samplers
    python -m bench.cards --cards 16 --formats int8 --seconds 14.4 --blocks 50 --steps 1   # full depth
    python -m bench.cards --cards 16 --formats int8 --seconds 14.4 --blocks 50 --extras-only \
        --models /tmp/lm50                             # issue 14's extras alone (~5 min, extras.py)

The model is a full-width random-weight H3 (`python -m longmedia.testing.full_h3`, drawn on the GPU)
with `--blocks` DiT blocks, loaded through UNETLoader. Each card runs in its own child process that
starts ComfyUI in main.py's order (Dynamic VRAM on). `--simulate ballast` (default): a ballast process
first takes all device memory but the card, so torch and comfy-aimdo both meet the card's real limit.
`--simulate reserve`: ComfyUI gets `--reserve-vram <H200 total - card>` (also comfy-aimdo's headroom)
and torch `set_per_process_memory_fraction(card / total)`; comfy-aimdo's own allocations are then not
hard-capped (the first GPU run went 2.6 GiB past a 16 GiB card that way). Every row is one prompt through ComfyUI's
`PromptExecutor`: UNETLoader -> MiniMaxH3SigmaShift -> CFGGuider (cfg 1: one model call per step) ->
SamplerCustomAdvanced (stock) or LongMediaBenchSampler (LongMedia's `run_sampler`, PlanRequest() =
auto, the card's DeviceProfile; see bench/cards/nodes.py). Models are unloaded between rows.
Process peak = this process's device memory from NVML, sampled every 4 ms (comfy-aimdo's VBAR pages and
cast buffers included); torch peak = torch.cuda.max_memory_allocated. Rows go to OUT/cards.jsonl as
they finish; the table is printed at the end (and by `--table OUT/cards.jsonl`; `--compare OUT/cards.jsonl ...`
prints the card x job grid with LongMedia and stock side by side, bench/cards/tables.py).

`--extras` (`--extras-only`: nothing else) adds issue 14's checks on the 16 GiB card, INT8, each a row
with `"extra": true`, a `label`, `check` (pass / fail) and `detail`, printed as a second table "extras":
injected OOM per phase (normal and low_vram, on the `--oom-blocks` model at 5 s), three seed-only
reruns (same boundary snapshot and plan), an interrupt mid step 1 then a rerun (memory back, checksum
equal to the fresh run), the 14.4 s job segmented into 3 passes (segment 3's s/step within 5 % of
segment 1's, rows like for like), attention_mode sol / scheduled_sol; see bench/cards/extras.py and
bench/cards/checks.py. `--extras-which` runs a subset. A LongMedia row refused before any GPU work with a
segment length (LongMediaInputError) is followed by the same job segmented as advised (`longmedia_advised`);
a card's child that dies mid-row is restarted past that row, and a rerun into the same `--out` resumes.

Modules: `entry` (arguments, the parent: checkpoints, ballast, one child per card), `child` (one card's
process: ComfyUI in main.py's order, then its rows), `comfy_process` (that start-up, the NVML sampler, and
`child_env`: the one place a ComfyUI checkout is put on a child's import path), `prompts`, `nodes` (the bench's
own ComfyUI nodes), `measure`, `rows` (`Cell`, `CardFields`, cards.jsonl), `extras` + `checks` + `faults`
(issue 14's extras), `probes` (the controls: the product's observers and weight accesses, composed), `tables`;
issue 45's host RAM: `host_balloon` (`--host-ram-gb 48 32 ...`: the RAM balloon or a cgroup per limit),
`host_memory` (each row's RSS split, pinned and MemAvailable extremes, disk reads per model call) and `host_table`
(`--host-table OUT/cards.jsonl`).
"""
