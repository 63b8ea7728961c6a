"""The card bench's --extras: issue 14's checks on the 16 GiB card, INT8, in the card's child process.

In this order (each extra writes its rows; an extra that fails writes its row with the error and the next runs):

1. injected OOM in each phase (before_block_0, qkv, attention, mlp, final_output, prefetch_transport), in
   normal mode and in low_vram (attention existing), on the `--oom-blocks` model (default: `--blocks`) at 5 s,
   1 step: reported phase == injected, advice fitting the phase, and the next row starts with memory back
   (torch allocated, process NVML) after ComfyUI's own OOM clean-up and the prompt worker's gc;
2. three seed-only reruns at full depth (`--extras-seconds`, default 5 s: the plan is what they check, and
   a 5 s step costs a fifth of a 14.4 s one), planned after the residency boundary as the product plans
   (seed 1 from unloaded models, seeds 2 and 3 find the previous run's model loaded, as a user's rerun
   does): same boundary snapshot and plan;
3. an interrupt (ComfyUI's Cancel) mid step 1 of seed 1's prompt, memory read before and after (model
   loaded, no prompt running), then the same prompt again: its checksum equals seed 1's fresh run;
4. the 14.4 s job segmented as Setup would (segment_seconds 5, context 5 frames: 3 passes of 124
   frames), at least 2 steps: segment 3's s/step (warm model call) within 5 % of segment 1's, rows like for
   like (the context guide's extra rows priced by the block-time fit; passes 2 and 3 must also agree);
5. attention_mode sol and scheduled_sol on the 14.4 s job: they complete.

The checks are pure functions in checks.py (unit tests: tests/core/test_cards_checks.py); the
faults are injected by the bench sampler node (faults.py, tests/comfyui/test_cards_faults.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from longmedia.h3.lattice import frames_for_seconds

from . import checks
from .checks import EXTRAS
from .faults import PHASES

JOB_SECONDS = 14.4
OOM_SECONDS = 5.0
SEGMENT_SECONDS, CONTEXT_FRAMES = 5.0, 5   # 14.4 s = 362 frames = 3 passes of 124 frames
INTERRUPT_AFTER_CALLS = 60                 # ComfyUI ops / LongMedia chunks call the interrupt check: mid step 1
INTERRUPT_LADDER = (INTERRUPT_AFTER_CALLS, 15, 4)  # earlier checks when the prompt made fewer than the last
OOM_MODES = ("normal", "low_vram")


@dataclass
class Bench:
    """What the card's child hands the extras: its arguments, the row base and its run / memory functions."""

    a: object
    card: float
    base: dict
    run: Callable[..., dict]          # run(row, prompt, prompt_id, unload=True) -> row, measured
    reading: Callable[[], dict]       # memory with no prompt running, after the prompt worker's clean-up
    write: Callable[[dict], None]
    steps_at: list
    prompt: Callable[..., dict]

    def row(self, label: str, seconds: float, blocks: int | None = None, **extra) -> dict:
        return {**self.base, "extra": True, "format": "int8", "seconds": seconds, "frames": frames_for_seconds(seconds),
                "sampler": "longmedia", "label": label, "blocks": blocks or self.a.blocks,
                "steps": self.a.extras_steps, **extra}

    def unet(self, blocks: int | None = None) -> str:
        return f"full_h3_int8_{blocks or self.a.blocks}blocks.safetensors"

    def job(self, seed: int, steps: int | None = None, seconds: float | None = None, unet: str | None = None,
            attention: str = "auto", memory_mode: str = "auto", **inputs) -> dict:
        return self.prompt(unet or self.unet(), seconds or self.a.extras_seconds, steps or self.a.extras_steps,
                           42 + seed, "longmedia",
                           self.card, attention, self.a.simulate, memory_mode, **inputs)

    def out_of_time(self) -> bool:
        return time.time() > self.a.deadline - 20


def _guarded(bench: Bench, label: str, fn: Callable[[], None]) -> None:
    """Run one extra; when it raises, its row records the error and the next extra runs."""
    if bench.out_of_time():
        bench.write({**bench.row(label, JOB_SECONDS), "result": "not run (bench budget spent)", "check": "fail",
                     "detail": "bench budget spent before this extra"})
        return
    try:
        fn()
    except Exception as error:  # noqa: BLE001  named: one extra's failure is its row; the next extra runs
        bench.write({**bench.row(label, JOB_SECONDS), "result": "error", "check": "fail",
                     "error": f"{type(error).__name__}: {error}"[:600], "detail": f"the extra raised {error!r}"[:400]})


def run_extras(bench: Bench) -> None:
    """The extras named in `--extras-which` (all by default), in EXTRAS' order; the interrupt's rerun is compared
    with seed 1's fresh run, so naming `interrupt` runs `seeds` too."""
    state: dict = {}
    which = set(getattr(bench.a, "extras_which", None) or EXTRAS)
    if "interrupt" in which:
        which.add("seeds")
    if "oom" in which:
        _guarded(bench, "injected OOM", lambda: oom_rows(bench))
    if "seeds" in which:
        _guarded(bench, "seed-only reruns", lambda: seed_reruns(bench, state))
    if "interrupt" in which:
        _guarded(bench, "interrupt and rerun", lambda: interrupt_rerun(bench, state))
    if "segmented" in which:
        _guarded(bench, "segmented 3 passes", lambda: segmented(bench))
    for attention in ("sol", "scheduled_sol"):
        if attention in which:
            _guarded(bench, attention, lambda attention=attention: attention_row(bench, attention))


def _back(start: dict, now: dict) -> bool:
    """Memory at `now` back to `start` (two prompt-free readings): torch allocated, and the process's NVML bytes
    less comfy-aimdo's own (its VBAR pages and cast buffers, which it keeps and hands out again; both raw
    readings stay in the row)."""
    torch_ok = now["torch_allocated"] - start["torch_allocated"] <= checks.TORCH_BACK_TOLERANCE
    if start.get("process") is None or now.get("process") is None:
        return torch_ok
    grown = (now["process"] - (now.get("aimdo_usage") or 0)) - (start["process"] - (start.get("aimdo_usage") or 0))
    return torch_ok and grown <= checks.PROCESS_BACK_TOLERANCE


def oom_rows(bench: Bench) -> None:
    blocks = bench.a.oom_blocks
    unet = bench.unet(blocks)
    pending: list[tuple[dict, str, bool]] = []
    for mode in getattr(bench.a, "oom_modes", None) or OOM_MODES:
        for phase in PHASES:
            label = f"OOM {phase} ({mode}, {blocks} blocks, {OOM_SECONDS:g} s)"
            row = bench.row(label, OOM_SECONDS, blocks, injected_phase=phase, requested_mode=mode, steps=1)
            if bench.out_of_time():
                bench.write({**row, "result": "not run (bench budget spent)", "check": "fail", "detail": "-"})
                continue
            start = bench.reading()  # models unloaded by the previous OOM (ComfyUI's handler) and the run below
            row["memory_at_start"] = start
            if pending:  # the previous OOM row is judged by where this row starts
                _write_oom(bench, *pending.pop(), now=start)
            bench.run(row, bench.job(0, steps=1, seconds=OOM_SECONDS, unet=unet, attention="existing",
                                     memory_mode=mode, inject_oom=phase), f"oom-{mode}-{phase}")
            pending.append((row, phase, mode != "normal"))
    if pending:
        _write_oom(bench, *pending.pop(), now=bench.reading())


def _write_oom(bench: Bench, row: dict, phase: str, streamed: bool, *, now: dict) -> None:
    """Judge an OOM row once the next row's start (`now`) is known: memory back to this row's own start."""
    row["memory_at_next_start"] = now
    row.update(checks.check_oom(row, phase, streamed, _back(row["memory_at_start"], now)), label=row["label"])
    bench.write(row)


def seed_reruns(bench: Bench, state: dict) -> None:
    rows = []
    for seed in (1, 2, 3):
        row = bench.row(f"auto seed {seed}" + (" (after unloading)" if seed == 1 else " (model left loaded)"),
                        bench.a.extras_seconds, seed=seed)
        bench.run(row, bench.job(seed, plan_after_boundary=True), f"seed-{seed}", unload=seed == 1)
        row.update(check="pass" if row.get("result") == "ok" else "fail", detail="run for the seed check")
        bench.write(row)
        rows.append(row)
    state["fresh"] = rows[0]
    bench.write({**bench.row("seed reruns", bench.a.extras_seconds), "result": "-", **checks.check_seed_reruns(rows)})


def interrupt_rerun(bench: Bench, state: dict) -> None:
    # A shallow model makes few interrupt checks per step (the H200's 2-block, 5 s normal-mode prompt made fewer
    # than 60 and finished): a prompt the Cancel never reached is run again with an earlier check, down the ladder.
    for calls in INTERRUPT_LADDER:
        idle = bench.reading()  # the model of the previous prompt still loaded, no prompt running
        interrupted = bench.row(f"interrupt at check {calls}, then rerun", bench.a.extras_seconds, seed=1)
        bench.run(interrupted, bench.job(1, plan_after_boundary=True, interrupt_after_calls=calls),
                  "interrupted", unload=False)
        interrupted["interrupt_call"] = calls
        if interrupted.get("result") != "ok":
            break
    after = bench.reading()
    rerun = bench.row("rerun after the interrupt", bench.a.extras_seconds, seed=1)
    bench.run(rerun, bench.job(1, plan_after_boundary=True), "rerun", unload=False)
    fresh = state.get("fresh")
    result = checks.check_interrupt(interrupted, idle, after, rerun, fresh)
    bench.write({**interrupted, **result, "label": interrupted["label"], "memory_idle": idle,
                 "memory_after_interrupt": after, "rerun": {k: rerun.get(k) for k in (
                     "result", "stats", "s_per_step", "plan_json", "error")},
                 "fresh_stats": (fresh or {}).get("stats")})


def segmented(bench: Bench) -> None:
    steps = max(2, bench.a.extras_steps)
    row = bench.row(f"segmented: {JOB_SECONDS:g} s as {SEGMENT_SECONDS:g} s segments, {CONTEXT_FRAMES} context "
                    "frames", JOB_SECONDS, steps=steps)
    bench.run(row, bench.job(0, steps=steps, seconds=JOB_SECONDS, plan_after_boundary=True, job_seconds=JOB_SECONDS,
                             segment_seconds=SEGMENT_SECONDS, context_frames=CONTEXT_FRAMES), "segmented",
              unload=False)
    bench.write({**row, **checks.check_segmented(row), "label": row["label"]})


def attention_row(bench: Bench, attention: str) -> None:
    row = bench.row(attention, JOB_SECONDS)
    bench.run(row, bench.job(0, seconds=JOB_SECONDS, attention=attention), attention)
    ok = row.get("result") == "ok"
    bench.write({**row, "check": "pass" if ok else "fail",
                 "detail": f"completes: {row.get('attention_backend')}" if ok else row.get("error", "")[:300]})
