"""The card bench's extras checks (bench/cards/checks.py) on real plans, boundary lines and OOM reports."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from bench.cards import checks
from longmedia.execution.chunks import ChunkSizes
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.report.memory import MemorySnapshot
from longmedia.report.oom import OOMContext, report_for
from longmedia.units import GIB

MIB = 2 ** 20


def _plan(free_shift: int = 0, ram_shift: int = 0, request: PlanRequest | None = None) -> dict:
    card = DeviceProfile.card(16, 64)
    card = dataclasses.replace(card, vram_free_bytes=card.vram_free_bytes + free_shift,
                               ram_available_bytes=card.ram_available_bytes + ram_shift)
    p = plan(ModelProfile.preset("h3-int8"), card, build_geometry(1344, 768, seconds=14.4), request,
             attention_resolver=default_attention_path)
    return json.loads(json.dumps(p.to_dict(), sort_keys=True, default=str))


def _snapshot(free: int, reclaimable: int | None, allocated: int = 300 * MIB, usage: int | None = None) -> str:
    return repr(MemorySnapshot("cuda:0", allocated, allocated + 20 * MIB, free, 16 * GIB, usage, reclaimable))


STEPS = ("synchronize: done (comfy.model_management.synchronize)",
         "release_other_models: done (comfy.model_management.free_memory)")


def _seed_row(label: str, plan_dict: dict, free_after: int, reclaimable: int | None, steps=STEPS) -> dict:
    boundary = (f"before: {_snapshot(free_after - 5 * MIB, reclaimable)}", *steps,
                f"after: {_snapshot(free_after, reclaimable)}")
    return {"label": label, "result": "ok", "plan_json": json.dumps(plan_dict, sort_keys=True),
            "boundaries": [list(boundary)]}


def test_snapshot_lines_parse_back_to_their_fields():
    got = checks.parse_snapshot(_snapshot(3 * GIB, None, usage=7))
    assert got == {"device": "cuda:0", "allocated_bytes": 300 * MIB, "reserved_bytes": 320 * MIB,
                   "free_bytes": 3 * GIB, "total_bytes": 16 * GIB, "aimdo_vram_usage_bytes": 7,
                   "aimdo_vbar_reclaimable_bytes": None, "vbar_resident_bytes": None, "pinned_ram_bytes": None}


def test_three_equal_reruns_pass_with_resident_weights_counted_as_available():
    p = _plan()
    rows = [_seed_row("auto seed 1", p, 14 * GIB, 0),
            _seed_row("auto seed 2", _plan(ram_shift=-300 * MIB), 9 * GIB, 5 * GIB),  # weights left resident
            _seed_row("auto seed 3", _plan(free_shift=3 * MIB), 9 * GIB + 3 * MIB, 5 * GIB)]
    out = checks.check_seed_reruns(rows)
    assert out["check"] == "pass", out["detail"]
    assert out["detail"].startswith("same plan and boundary")


def test_a_rerun_with_another_plan_fails_and_names_what_differs():
    rows = [_seed_row("auto seed 1", _plan(), 14 * GIB, 0), _seed_row("auto seed 2", _plan(), 14 * GIB, 0),
            _seed_row("auto seed 3", _plan(request=PlanRequest(memory_mode="ultra_low_vram")), 14 * GIB, 0)]
    out = checks.check_seed_reruns(rows)
    assert out["check"] == "fail" and "auto seed 3" in out["detail"] and "memory_mode" in out["detail"]


def test_a_rerun_whose_boundary_left_less_available_fails():
    p = _plan()
    rows = [_seed_row("auto seed 1", p, 14 * GIB, 0), _seed_row("auto seed 2", p, 9 * GIB, 0),  # not reclaimable
            _seed_row("auto seed 3", p, 14 * GIB, 0, steps=STEPS[:1])]
    out = checks.check_seed_reruns(rows)
    assert out["check"] == "fail"
    assert "after_plannable_bytes of auto seed 2: -5120 MiB" in out["detail"]
    assert "boundary steps of auto seed 3: release_other_models" in out["detail"]


def test_a_failed_rerun_fails_the_check():
    p = _plan()
    rows = [_seed_row("auto seed 1", p, 14 * GIB, 0), {"label": "auto seed 2", "result": "OOM", "error": "x"},
            _seed_row("auto seed 3", p, 14 * GIB, 0)]
    assert checks.check_seed_reruns(rows)["check"] == "fail"


def test_plan_differences_tolerate_small_byte_drift_only():
    diff, tolerated = checks.differences({"a": {"free_bytes": 10 * GIB}, "mode": "low_vram", "why": "1.20 GiB free"},
                                         {"a": {"free_bytes": 10 * GIB + MIB}, "mode": "low_vram",
                                          "why": "1.21 GiB free"})
    assert not diff and len(tolerated) == 2
    diff, _ = checks.differences({"a": {"free_bytes": 10 * GIB}}, {"a": {"free_bytes": 11 * GIB}})
    assert diff == [f"a.free_bytes: {10 * GIB} -> {11 * GIB}"]
    diff, _ = checks.differences({"chunks": {"mlp_chunk_tokens": 4096}}, {"chunks": {"mlp_chunk_tokens": 2048}})
    assert diff  # small integers are decisions, never tolerated


def _interrupted(**kw):
    return {"result": "interrupted", "steps_done": 0, "interrupt_call": 60, **kw}


IDLE = {"torch_allocated": 400 * MIB, "process": 9 * GIB, "aimdo_usage": 7 * GIB}


def test_interrupt_check_passes_when_memory_is_back_and_checksums_match():
    after = {"torch_allocated": 410 * MIB, "process": 10 * GIB, "aimdo_usage": 8 * GIB}  # more weights resident
    ok = {"result": "ok", "stats": {"checksum": 12.5}}
    out = checks.check_interrupt(_interrupted(), IDLE, after, ok, dict(ok))
    assert out["check"] == "pass", out["detail"]
    assert "rerun checksum == fresh" in out["detail"]


@pytest.mark.parametrize("case,needle", [
    ("error", "not interrupted"),
    ("late", "after 1 finished steps"),
    ("leak", "torch allocated +1024 MiB"),
    ("checksum", "!= fresh"),
])
def test_interrupt_check_fails_for_each_broken_promise(case, needle):
    interrupted = {"error": _interrupted(result="error"), "late": _interrupted(steps_done=1)}.get(case, _interrupted())
    after = dict(IDLE, torch_allocated=IDLE["torch_allocated"] + (GIB if case == "leak" else 0))
    rerun = {"result": "ok", "stats": {"checksum": 1.0 if case == "checksum" else 2.0}}
    out = checks.check_interrupt(interrupted, IDLE, after, rerun, {"result": "ok", "stats": {"checksum": 2.0}})
    assert out["check"] == "fail" and needle in out["detail"], out["detail"]


def _segmented_report(calls: list[list[float]]) -> dict:
    segments = []
    for i, c in enumerate(calls):
        segments.append({"index": i, "seconds_per_step": sum(c) / len(c), "pass_frames": 124,
                         "context_frames": 5 if i else 0, "peak_bytes": 5 * GIB,
                         "run": {"plan": {"memory_mode": "low_vram", "geometry": {"seq_len": 40000 + 10 * i}},
                                 "steps": [{"seconds": s} for s in c]}})
    return {"segments": segments, "step_time_ratio": 1.0}


@pytest.mark.parametrize("third,ok", [(10.4, True), (9.6, True), (10.6, False), (9.4, False)])
def test_segmented_check_compares_warm_steps_of_segment_3_and_1(third, ok):
    rep = _segmented_report([[30.0, 10.0], [12.0, 10.0], [12.0, third]])  # first steps carry the warm-up
    out = checks.check_segmented({"result": "ok", "segments": checks.segment_summary(rep)})
    assert (out["check"] == "pass") is ok, out["detail"]
    assert out["step_time_ratio"] == pytest.approx(third / 10.0)
    assert "40000 / 40010 / 40020" in out["detail"]


def _passes(rows: list[int], warm: list[float]) -> list[dict]:
    return [{"seq_len": r, "call_seconds": [5 * w, w], "seconds_per_step": w, "memory_mode": "normal"}
            for r, w in zip(rows, warm)]


@pytest.mark.parametrize("warm,ok,needle", [
    ([0.25, 0.267, 0.267], True, "drift 3:1 0.98"),            # the H200's 2-block run: +5.4 % rows, 1.068x time
    ([0.25, 0.267, 0.290], False, "drift 3:2 1.086 is past 5 %"),  # pass 3 slower than pass 2 on the same rows
    ([0.25, 0.300, 0.300], False, "drift 3:1 1.10"),            # slower than the context guide's rows explain
])
def test_segmented_check_takes_the_context_guide_s_rows_into_account(warm, ok, needle):
    expected = checks.expected_ratio(37838, 39868)
    assert 1.0 < expected < 1.1 and checks.expected_ratio(40000, 40000) == 1.0
    out = checks.check_segmented({"result": "ok", "segments": _passes([37838, 39872, 39868], warm)})
    assert (out["check"] == "pass") is ok and needle in out["detail"], out["detail"]
    assert out["expected_ratio"] == pytest.approx(expected)


def test_segmented_check_fails_without_three_passes():
    rep = _segmented_report([[10.0, 10.0], [10.0, 10.0]])
    assert checks.check_segmented({"result": "ok", "segments": checks.segment_summary(rep)})["check"] == "fail"
    assert checks.check_segmented({"result": "OOM", "error": "x"})["check"] == "fail"


def _oom_message(phase: str, chunks: ChunkSizes, block: int | None) -> str:
    """What ComfyUI's execution_error carries for a LongMediaOOM (`_cards_measure.measure`'s text)."""
    ctx = OOMContext(attention_backend="existing", memory_mode="normal" if chunks.is_stock else "low_vram",
                     chunks=chunks, heads=56, seq_len=40000, row_spans=(("text", 128), ("video", 39000)))
    readings = MemorySnapshot("cuda:0", 9 * GIB, 10 * GIB, 2 * GIB, 140 * GIB)
    report = report_for(phase, torch.OutOfMemoryError("CUDA out of memory"), context=ctx, reader=lambda: readings,
                        block_index=block)
    tips = "This error means you ran out of memory on your GPU."
    return f"longmedia.report.oom.LongMediaOOM: {report.summary()}\n{tips}"


STREAMED = ChunkSizes(qkv_chunk_tokens=8192, mlp_chunk_tokens=4096, heads_per_group=0)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("phase", checks.OOM_PHASES)
def test_the_product_s_oom_report_parses_and_its_advice_fits_the_phase(phase, streamed):
    block = 1 if phase in ("qkv", "attention", "mlp") else None
    message = _oom_message(phase, STREAMED if streamed else ChunkSizes(), block)
    row = {"result": "OOM", "error": message[:600], "error_full": message}
    out = checks.check_oom(row, phase, streamed, memory_back=True)
    assert out["check"] == "pass", out["detail"]
    assert out["reported_phase"] == phase and out["reported_block"] == block


def test_an_oom_reported_in_another_phase_or_with_memory_left_fails():
    message = _oom_message("before_block_0", ChunkSizes(), None)
    row = {"result": "OOM", "error_full": message}
    out = checks.check_oom(row, "mlp", False, memory_back=True)
    assert out["check"] == "fail" and "reported phase before_block_0 != injected mlp" in out["detail"]
    assert "is not mlp's" in out["detail"]
    assert checks.check_oom(dict(row), "before_block_0", False, memory_back=False)["check"] == "fail"
    assert checks.check_oom({"result": "ok"}, "qkv", False, memory_back=True)["check"] == "fail"
    assert checks.parse_oom("RuntimeError: CUDA out of memory") is None


def test_extras_table_lists_every_checked_row():
    rows = [{"label": "sol", "format": "int8", "blocks": 50, "result": "ok", "s_per_step": 12.345, "check": "pass",
             "detail": "completes | sol"}, {"label": "no check", "result": "ok"}]
    text = checks.extras_table(rows)
    assert "| sol | int8 / 50 | ok | 12.35 | pass | completes / sol |" in text
    assert "no check" not in text
