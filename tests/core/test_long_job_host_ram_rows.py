"""The 60 s job's Sampler stage under 32 GiB of host RAM on an H100 (docs/lab/data/2026-12-07-h100-long-job-60s-32gib
.jsonl; tools/gpu/run_long_job_host_ram.sh), read back: the figures the docs quote, and the plan's host-RAM
arithmetic against what the stage measured."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from longmedia.h3.profiles import DeviceProfile, pinned_ram_budget
from longmedia.job.geometry import build_geometry
from longmedia.planning.host_ram import pass_latent_bytes, plan_host_ram, stage_latent_bytes
from longmedia.units import GIB

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "lab" / "data"
ROWS = [json.loads(line) for line in (DATA / "2026-12-07-h100-long-job-60s-32gib.jsonl").read_text().splitlines()]
ALL_RAM = [json.loads(line) for line in (DATA / "2026-12-06-h100-long-job-60s.jsonl").read_text().splitlines()]
PLAN = json.loads((DATA / "2026-12-07-h100-long-job-60s-32gib-plan.json").read_text())
CHECKPOINT = 47_012_852_744   # the stage's model (its safetensors header), 43.78 GiB


def _passes(rows) -> dict[int, list[float]]:
    return {r["segment"]: r["call_s"] for r in rows if r.get("kind") == "pass" and r["stage"] == "sampler"}


def _stage(rows) -> dict:
    return next(r for r in rows if r.get("kind") == "stage" and r["stage"] == "sampler")


def _low_vram_median(rows) -> float:
    return statistics.median(s for i in range(1, 6) for s in _passes(rows)[i])


def test_the_stage_completed_under_32_gib_and_the_figures_the_docs_quote():
    stage = _stage(ROWS)
    assert stage["result"] == "ok" and stage["host_ram_gib"] == 32.0 and stage["host_ram_limit"] == "balloon"
    assert stage["process_peak_bytes"] < 16 * GIB and len(_passes(ROWS)) == 7
    assert round(stage["wall_s"], 2) == 423.45 and round(_stage(ALL_RAM)["wall_s"], 2) == 279.35
    fast, slow = _low_vram_median(ALL_RAM), _low_vram_median(ROWS)
    assert (round(fast, 1), round(slow, 1), round(slow / fast, 2)) == (22.6, 28.3, 1.25)
    assert round(stage["disk_read_per_call_bytes"] / GIB, 2) == 18.48 and stage["model_calls"] == 14
    assert round(stage["mem_available_min_bytes"] / GIB, 2) == 1.77
    perf = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert "28.3 s a model call against 22.6 s" in perf and "1.25x" in perf and "--host-ram-gb 32" in perf


def test_the_plan_of_the_row_s_machine_follows_the_stage():
    """RSS within 10 %, disk read per model call within 15 % (the plan of the machine the balloon ran on: RAM
    available when the stage started, ComfyUI's pinned limit of 128 GiB of total RAM)."""
    stage = _stage(ROWS)
    machine = dataclasses.replace(DeviceProfile.card(16, 128), ram_available_bytes=stage["mem_available_start_bytes"],
                                  pinned_budget_bytes=pinned_ram_budget(126 * GIB, "linux"))
    g = build_geometry(1344, 768, seconds=60, segment_seconds=10, context_frames=22, text_tokens=128)
    hr = plan_host_ram(machine, CHECKPOINT, CHECKPOINT // 50, stage_latent_bytes(g), own_alloc_bytes=pass_latent_bytes(g),
                       overlapped=True)
    assert abs(hr.rss_bytes - stage["host_rss_peak_bytes"]) <= 0.10 * stage["host_rss_peak_bytes"]
    measured = stage["disk_read_per_call_bytes"]
    assert abs(hr.disk_bytes_per_call - measured) <= 0.15 * measured
    # the headroom goal: missed here as in the 14.4 s rows (ComfyUI pins down to its own floor)
    assert stage["mem_available_min_bytes"] < hr.headroom_bytes


def test_a_real_32_gb_machine_pins_less_than_the_balloon_machine_did():
    """The rows' plan (a real 32 GB machine: ComfyUI's pinned limit from 32 GB of total RAM) pins 16 GiB where the
    balloon machine pinned 28: it streams more per call, and says it fits."""
    hr = PLAN["sampler"]["host_ram"]
    assert hr["fits"] and hr["streams_from_disk"] and hr["pin_budget_bytes"] == 16 * GIB
    assert _stage(ROWS)["pinned_peak_bytes"] > 27 * GIB
    assert hr["disk_bytes_per_call"] > _stage(ROWS)["disk_read_per_call_bytes"]


HIRES_32 = [json.loads(line) for line in
            (DATA / "2026-12-07-h100-long-job-hires-32gib-passes.jsonl").read_text().splitlines()]


def test_hires_at_32_gib_the_figures_the_lab_note_quotes():
    """Hi-Res at 32 GiB (passes 0-5 of 7; the machine went back during pass 6): 53.80 s a call, median of passes 1-5,
    against 47.78 s with all RAM (1.13x); within the 16 GiB card and under the 32 GiB limit."""
    calls = {r["segment"]: r["s_per_step"] for r in HIRES_32 if r["stage"] == "hires"}
    assert sorted(calls) == [0, 1, 2, 3, 4, 5]
    ours = statistics.median(calls[i] for i in range(1, 6))
    basis = statistics.median(r["s_per_step"] for r in ALL_RAM
                              if r.get("kind") == "pass" and r["stage"] == "hires" and 1 <= r["segment"] <= 5)
    assert round(ours, 2) == 53.80 and round(basis, 2) == 47.78 and round(ours / basis, 2) == 1.13
    assert max(r["process_peak_bytes"] for r in HIRES_32) < 16 * GIB
    assert round(max(r["host_rss_peak_bytes"] for r in HIRES_32) / GIB, 2) == 29.61 < 32
    note = (ROOT / "docs" / "lab" / "2026-12-07-long-job-host-ram.md").read_text()
    assert "53.80 s (median of passes 1-5) against 47.78 s" in note and "1.13x" in note


LAST_32 = [json.loads(line) for line in
           (DATA / "2026-12-08-h100-long-job-refiner-decode-32gib.jsonl").read_text().splitlines()]


def test_the_refiner_and_decode_rows_at_32_gib_the_figures_the_lab_note_quotes():
    """The Refiner's code and Decode & Save at 32 GiB, both at the Sampler's size (the seeded-input bug the note
    names): 30.18 s a call (median of passes 1-5) against the all-RAM Sampler's 22.61 s, 1.33x; the last pass 15.07
    s against 2.33 s; the decode completes."""
    calls = {r["segment"]: r["call_s"] for r in LAST_32 if r.get("kind") == "pass" and r["stage"] == "refiner"}
    assert sorted(calls) == list(range(7)) and all(len(c) == 1 for c in calls.values())
    ours = statistics.median(calls[i][0] for i in range(1, 6))
    basis = statistics.median(s for i in range(1, 6) for s in _passes(ALL_RAM)[i])
    assert round(ours, 2) == 30.18 and round(basis, 2) == 22.61 and round(ours / basis, 2) == 1.33
    assert round(calls[6][0], 2) == 15.07 and round(statistics.median(_passes(ALL_RAM)[6]), 2) == 2.33
    stages = {r["stage"]: r for r in LAST_32 if r.get("kind") == "stage"}
    assert all(r["result"] == "ok" and r["seeded_input"] and r["host_ram_gib"] == 32.0 for r in stages.values())
    refiner, decode = stages["refiner"], stages["decode"]
    assert refiner["process_peak_bytes"] < 16 * GIB and refiner["host_rss_peak_bytes"] < 32 * GIB
    assert round(refiner["mem_available_min_bytes"] / GIB, 2) == 1.73
    assert round(refiner["disk_read_per_call_bytes"] / GIB, 2) == 23.73
    assert round(decode["wall_s"], 2) == 159.92 and round(decode["mem_available_min_bytes"] / GIB, 2) == 24.44
    note = (ROOT / "docs" / "lab" / "2026-12-08-long-job-32gib-refiner-decode.md").read_text()
    assert "30.18 s (median of the low_vram passes 1-5) against 22.61 s" in note and "**1.33x**" in note
