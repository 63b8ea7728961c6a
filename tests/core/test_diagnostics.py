"""The OOM fact report: conversion of torch OOMs per phase, the single pressure point, memory readers."""

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.report.memory import HostMemory, MemorySnapshot, read_memory
from longmedia.report.oom import (
    PHASES,
    LongMediaOOM,
    OOMContext,
    UnknownPhaseError,
    phase,
    pressure_point,
)
from longmedia.units import GIB

READ = MemorySnapshot("cuda:0", total_bytes=16 * GIB, free_bytes=GIB // 10, allocated_bytes=14 * GIB,
                      reserved_bytes=14 * GIB + GIB // 4, aimdo_vram_usage_bytes=15 * GIB,
                      vbar_resident_bytes=5 * GIB, pinned_ram_bytes=25 * GIB)
STREAMED = OOMContext(attention_backend="sdpa_flash", memory_mode="low_vram",
                      chunks=ChunkSizes(4096, 0, 8192), heads=56, seq_len=73642,
                      row_spans=(("text", 256), ("audio", 810), ("video", 72576)), late_block_guard_target_mb=2500)


def _raise_in(name, exc, context=STREAMED, reader=lambda: READ, block_index=7):
    with pytest.raises(LongMediaOOM) as info:
        with phase(name, context=context, reader=reader, block_index=block_index):
            raise exc
    return info.value


def test_torch_oom_becomes_longmedia_oom_with_the_report():
    err = _raise_in("mlp", torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert isinstance(err, torch.OutOfMemoryError) and isinstance(err, torch.cuda.OutOfMemoryError)
    r = err.report
    assert (r.phase, r.block_index, r.readings, r.context) == ("mlp", 7, READ, STREAMED)
    assert r.pressure_point == "mlp_chunk_tokens" and "8192 to 4096" in r.next_step
    text = str(err)
    for part in ("phase mlp, block 7", "0.10 GiB free of 16.00 GiB", "reserved 14.25 GiB", "pinned RAM 25.00 GiB",
                 "73642 packed rows", "attention sdpa_flash", "change next: mlp_chunk_tokens"):
        assert part in text, part
    assert "Tried to allocate" in r.error and isinstance(err.__cause__, torch.OutOfMemoryError)


@pytest.mark.parametrize("name, context, point", [
    ("qkv", STREAMED, "sol_qkv_chunk_tokens"),
    ("attention", OOMContext(chunks=ChunkSizes(), heads=56), "memory_mode"),
    ("attention", OOMContext(chunks=ChunkSizes(512, 0, 512), heads=56), "memory_mode"),
    ("attention", OOMContext(chunks=ChunkSizes(512, 0, 512, 2), heads=56), "segment_seconds"),
    ("mlp", OOMContext(chunks=ChunkSizes()), "mlp_chunk_tokens"),
    ("mlp", OOMContext(chunks=ChunkSizes(512, 0, 512)), "segment_seconds"),
    ("final_output", STREAMED, "late_block_guard_target_mb"),
    ("final_output", OOMContext(chunks=ChunkSizes()), "memory_mode"),  # normal mode: no block guard runs
    ("before_block_0", STREAMED, "segment_seconds"),
    ("before_block_0", OOMContext(seq_len=1000, row_spans=(("ref_img", 600), ("video", 400))), "reference_budget"),
])
def test_one_pressure_point_per_phase(name, context, point):
    assert pressure_point(name, READ, context)[0] == point


def test_prefetch_transport_is_a_residency_problem_not_attention():
    err = _raise_in("prefetch_transport", torch.OutOfMemoryError("CUDA out of memory"))
    point, step = err.report.pressure_point, err.report.next_step
    # the one thing that turns ComfyUI's block prefetch off is its launch flag (no offload streams, no queue)
    assert point == "--disable-async-offload" and "block prefetch" in step
    assert "attention settings are not the cause" in step
    # even when the cache is fragmented, transport stays the pressure point
    fragmented = MemorySnapshot("cuda:0", 8 * GIB, 14 * GIB, GIB, 16 * GIB)
    assert pressure_point("prefetch_transport", fragmented, STREAMED)[0] == "--disable-async-offload"


def test_fragmentation_points_at_the_allocator():
    fragmented = MemorySnapshot("cuda:0", 8 * GIB, 14 * GIB, GIB, 16 * GIB)
    point, step = pressure_point("mlp", fragmented, STREAMED)
    assert point == "step_boundary_cleanup_mb" and "expandable_segments" in step


def test_fragmentation_advice_raises_the_step_boundary_threshold():
    """The clean-up runs when free < step_boundary_cleanup_mb: the advice must raise it (lowering it made the
    guard fire less), to a value at which it would have run at the failure (1 GiB free + 6 GiB idle)."""
    from longmedia.execution.guards import Guards, GuardSettings

    fragmented = MemorySnapshot("cuda:0", 8 * GIB, 14 * GIB, GIB, 16 * GIB)
    step = pressure_point("mlp", fragmented, STREAMED)[1]
    assert "raise step_boundary_cleanup_mb to at least 7168 MB" in step and "lower" not in step
    fired = Guards(GuardSettings(step_boundary_cleanup_mb=7168), lambda: 7 * GIB - 1, lambda: None).on_step_end(0)
    assert fired is not None and fired.kind == "step_boundary"


def test_runtime_errors_that_are_ooms_are_converted_others_pass():
    err = _raise_in("attention", RuntimeError("CUDA error: out of memory"))
    assert err.report.phase == "attention"
    with pytest.raises(RuntimeError, match="shape mismatch") as info:
        with phase("qkv", reader=lambda: READ):
            raise RuntimeError("shape mismatch")
    assert not isinstance(info.value, LongMediaOOM)
    with pytest.raises(KeyError):
        with phase("qkv", reader=lambda: READ):
            raise KeyError("x")


def test_an_existing_report_is_not_wrapped_twice():
    inner = _raise_in("mlp", torch.OutOfMemoryError("oom"))
    with pytest.raises(LongMediaOOM) as info:
        with phase("final_output", reader=lambda: READ):
            raise inner
    assert info.value is inner and info.value.report.phase == "mlp"


def test_unknown_phase_is_refused():
    with pytest.raises(UnknownPhaseError, match="before_block_0"):
        with phase("decode"):
            pass
    assert len(PHASES) == 8


def test_context_from_a_plan():
    g = build_geometry(1344, 768, seconds=10)
    p = plan(ModelProfile.preset("h3-int8"), DeviceProfile.card(16), g, attention_resolver=default_attention_path)
    ctx = OOMContext.from_plan(p)
    assert (ctx.seq_len, ctx.memory_mode, ctx.heads, ctx.chunks) == (g.seq_len, "normal", 56, p.chunks)
    assert ctx.late_block_guard_target_mb == p.guards.late_block_guard_target_mb
    assert pressure_point("attention", READ, ctx)[0] == "memory_mode"


def test_default_reader_on_this_machine():
    """torch's facts where this machine has CUDA (None elsewhere); the host's readers are each called and passed
    through to their own field, never to a neighbour's."""
    import random

    rng = random.Random(136)
    aimdo, vbar, pinned = (rng.randrange(1, 64 * GIB) for _ in range(3))
    reclaim = rng.randrange(1, 64 * GIB)
    host = HostMemory(aimdo_usage=lambda: aimdo, vbar_reclaimable=lambda device: reclaim,
                      vbar_resident=lambda: vbar, pinned_ram=lambda: pinned)
    r = read_memory(host=host)
    assert isinstance(r, MemorySnapshot)
    assert (r.aimdo_vram_usage_bytes, r.aimdo_vbar_reclaimable_bytes, r.vbar_resident_bytes,
            r.pinned_ram_bytes) == (aimdo, reclaim, vbar, pinned)
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        assert r.total_bytes == total and 0 <= r.free_bytes <= total
        assert 0 <= r.allocated_bytes <= r.reserved_bytes and r.cached_bytes >= 0
    else:
        assert (r.total_bytes, r.free_bytes, r.allocated_bytes, r.reserved_bytes) == (None,) * 4
        assert r.cached_bytes is None
    bare = read_memory()
    assert (bare.aimdo_vram_usage_bytes, bare.vbar_resident_bytes, bare.pinned_ram_bytes) == (None, None, None)


def test_vbar_residency_fact_is_read_from_comfy_aimdo(monkeypatch):
    """The OOM report's "resident weights" used to read n/a always (no caller filled it): it is the sum of
    every loaded model's VBAR `loaded_size()`, counted once per VBAR, and n/a without dynamic VRAM."""
    import sys
    import types

    from longmedia.comfy.host import memory as memory_facts

    class VBAR:
        def __init__(self, n):
            self.n = n

        def loaded_size(self):
            return self.n

    shared = VBAR(3 * GIB)
    model = types.SimpleNamespace(dynamic_vbars={"cuda:0": shared})
    other = types.SimpleNamespace(dynamic_vbars={"cuda:0": VBAR(GIB)})
    loaded = [types.SimpleNamespace(model=types.SimpleNamespace(model=m)) for m in (model, model, other)]
    mm = types.SimpleNamespace(current_loaded_models=loaded, TOTAL_PINNED_MEMORY=5)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    monkeypatch.setitem(sys.modules, "comfy.memory_management", types.SimpleNamespace(aimdo_enabled=True))
    assert memory_facts.vbar_resident_bytes() == 4 * GIB
    readings = memory_facts.comfy_reading()()
    assert readings.vbar_resident_bytes == 4 * GIB and readings.pinned_ram_bytes == 5
    monkeypatch.setitem(sys.modules, "comfy.memory_management", types.SimpleNamespace(aimdo_enabled=False))
    assert memory_facts.vbar_resident_bytes() is None


def test_report_sets_predicted_beside_measured_like_for_like():
    """torch's allocated peak excludes comfy-aimdo's VBAR weights and the bytes outside torch's count (cast buffers,
    pool slack): it is set beside the plan's torch bytes without them; the device's memory in use beside the whole
    prediction plus what was in use when the plan read the device (the CUDA context is not in the budget)."""
    from longmedia.planning.types import MemoryBreakdown
    from longmedia.report.run_report import PredictedPeaks, RunReport, StepRecord

    # torch need 5 GiB (1 GiB of it the block's weights), 1 GiB outside torch, 4 GiB of elastic weights
    memory = MemoryBreakdown(block_activation_bytes=3 * GIB, held_outside_bytes=GIB // 2, workspace_bytes=GIB // 2,
                             pre_block_bytes=0, final_bytes=0, min_weight_bytes=GIB, resident_weight_bytes=5 * GIB,
                             model_weight_bytes=20 * GIB, outside_torch_bytes=GIB)
    assert (memory.torch_need_bytes, memory.predicted_peak_bytes) == (5 * GIB, 10 * GIB)
    dynamic, classic = PredictedPeaks.of(memory, True, GIB // 2), PredictedPeaks.of(memory, False)
    assert (dynamic.torch_bytes, dynamic.device_bytes, dynamic.in_use_at_plan_bytes) == (4 * GIB, 10 * GIB, GIB // 2)
    assert (classic.torch_bytes, classic.device_bytes) == (9 * GIB, 10 * GIB)
    steps = (StepRecord(0, 1.0, 1.0, 3 * GIB, 11 * GIB), StepRecord(1, 0.5, 1.0, 4 * GIB, 12 * GIB))
    planned = plan(ModelProfile.preset("h3-int8"), DeviceProfile.card(16), build_geometry(1344, 768, seconds=10),
                   attention_resolver=default_attention_path)
    assert PredictedPeaks.of_plan(planned).in_use_at_plan_bytes == planned.in_use_at_plan_bytes > 0
    report = RunReport(plan=planned, attention_backend="sdpa", streamed_blocks=(),
                       boundaries=(), steps=steps, block_peak_bytes=(), guard_events=(), preview="ok",
                       predicted=dynamic)
    torch_line, device_line = report.peak_lines()
    assert torch_line.startswith("torch allocator peak: predicted 4.00 GiB") and "measured 4.00 GiB" in torch_line
    assert "VBAR" in torch_line
    assert device_line.startswith("device memory in use: predicted at most 10.50 GiB (0.50 GiB in use when the plan "
                                  "read the device + the pass's predicted peak 10.00 GiB")
    assert "measured 12.00 GiB" in device_line
    assert report.to_dict()["measured_device_bytes"] == 12 * GIB
    assert not any(line.startswith("predicted peak") for line in report.summary_lines())
