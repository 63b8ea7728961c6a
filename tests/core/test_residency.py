"""The residency boundary against fake ComfyUI namespaces, with and without each API."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from longmedia.comfy.patching.residency import (
    STEPS,
    BoundaryReport,
    ComfyModules,
    ResidencyBoundaryError,
    host_memory,
    residency_boundary,
)
from longmedia.report.memory import MemorySnapshot, ReadingFailed, read_memory

CUDA = "cuda:0"


class FakePatcher:
    """A ModelPatcher stand-in: clones share `model`."""

    def __init__(self, model):
        self.model = model

    def is_clone(self, other):
        return self.model is getattr(other, "model", None)


SAMPLED = FakePatcher(object())
LOADED = [SimpleNamespace(model=SAMPLED), SimpleNamespace(model=FakePatcher(SAMPLED.model)),
          SimpleNamespace(model=FakePatcher(object())), SimpleNamespace(model=None)]
KEEP = {"keep": SAMPLED, "memory_required": 6 << 30}


class FakeDevice:
    """A device whose allocator cache shrinks on empty_cache; every API call is logged."""

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.allocated = rng.randrange(1 << 30, 4 << 30)
        self.cached = rng.randrange(1 << 28, 2 << 30)
        self.total = 24 << 30
        self.calls: list[str] = []

    def snapshot(self, device) -> MemorySnapshot:
        reserved = self.allocated + self.cached
        return MemorySnapshot(str(device), self.allocated, reserved, self.total - reserved, self.total)

    def log(self, name: str, effect=None):
        def call(*args):
            self.calls.append(name)
            if effect is not None:
                effect()
        return call

    def empty(self):
        self.cached = 0


def full_comfy(dev: FakeDevice, *, aimdo_enabled: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        model_management=SimpleNamespace(
            synchronize=dev.log("mm.synchronize"), reset_cast_buffers=dev.log("mm.reset_cast_buffers"),
            cleanup_models_gc=dev.log("mm.cleanup_models_gc"), cleanup_models=dev.log("mm.cleanup_models"),
            free_memory=dev.log("mm.free_memory"), current_loaded_models=LOADED,
            soft_empty_cache=dev.log("mm.soft_empty_cache", dev.empty)),
        model_prefetch=SimpleNamespace(cleanup_prefetch_queues=dev.log("prefetch.cleanup_prefetch_queues")),
        memory_management=SimpleNamespace(aimdo_enabled=aimdo_enabled),
        aimdo_vbar=SimpleNamespace(vbars_reset_watermark_limits=dev.log("vbar.vbars_reset_watermark_limits")),
        aimdo_control=SimpleNamespace(),
        torch_cuda=SimpleNamespace(synchronize=dev.log("torch.synchronize"),
                                   empty_cache=dev.log("torch.empty_cache", dev.empty)),
    )


def test_full_comfy_runs_every_step_in_order_and_snapshots():
    dev = FakeDevice(0)
    cached = dev.cached
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=full_comfy(dev))
    assert isinstance(report, BoundaryReport)
    assert report.done == STEPS and report.skipped == ()
    assert dev.calls == ["mm.synchronize", "prefetch.cleanup_prefetch_queues", "mm.reset_cast_buffers",
                         "vbar.vbars_reset_watermark_limits", "mm.cleanup_models_gc", "mm.cleanup_models",
                         "mm.free_memory", "mm.soft_empty_cache"]
    assert report.before.cached_bytes == cached and report.after.cached_bytes == 0
    assert report.released_reserved_bytes == cached
    assert report.after.allocated_bytes == report.before.allocated_bytes
    assert report.lines[2] == "reset_cast_buffers: done (comfy.model_management.reset_cast_buffers)"


@pytest.mark.parametrize("missing", ["synchronize", "reset_cast_buffers", "cleanup_models_gc", "cleanup_models",
                                     "free_memory", "soft_empty_cache"])
def test_each_missing_model_management_function_is_a_skipped_or_torch_step(missing):
    dev = FakeDevice(1)
    comfy = full_comfy(dev)
    delattr(comfy.model_management, missing)
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    by_name = {a.name: a for a in report.actions}
    assert tuple(by_name) == STEPS
    if missing in ("synchronize", "soft_empty_cache"):
        step = "synchronize" if missing == "synchronize" else "empty_cache"
        assert by_name[step].done
        assert by_name[step].detail.startswith("torch.cuda.")
        assert f"comfy.model_management.{missing} is absent" in by_name[step].detail
        assert ("torch.synchronize" if missing == "synchronize" else "torch.empty_cache") in dev.calls
    else:
        skipped = [a for a in report.actions if not a.done]
        assert len(skipped) == 1
        assert skipped[0].line.endswith(f"skipped: comfy.model_management.{missing} is absent in this install")
    assert f"mm.{missing}" not in dev.calls
    assert report.after.cached_bytes == 0


def test_without_comfy_aimdo_the_watermark_step_is_skipped():
    dev = FakeDevice(2)
    comfy = full_comfy(dev)
    comfy.aimdo_vbar = None
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert report.skipped == ("reset_vbar_watermarks",)
    assert "comfy_aimdo.model_vbar is not importable" in report.actions[3].line


def test_aimdo_installed_but_off_skips_the_watermark_step():
    dev = FakeDevice(3)
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=full_comfy(dev, aimdo_enabled=False))
    assert report.skipped == ("reset_vbar_watermarks",)
    assert "aimdo_enabled is off" in report.actions[3].detail
    assert "vbar.vbars_reset_watermark_limits" not in dev.calls


def test_old_comfyui_without_prefetch_module_or_memory_management():
    dev = FakeDevice(4)
    comfy = full_comfy(dev)
    del comfy.model_prefetch, comfy.memory_management
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert set(report.skipped) == {"cleanup_prefetch_queues", "reset_vbar_watermarks"}
    assert "comfy.model_prefetch is not importable" in report.actions[1].detail


def test_no_comfy_at_all_uses_torch_for_sync_and_cache_and_skips_the_rest():
    dev = FakeDevice(5)
    comfy = SimpleNamespace(torch_cuda=full_comfy(dev).torch_cuda)
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert report.done == ("synchronize", "empty_cache")
    assert dev.calls == ["torch.synchronize", "torch.empty_cache"]
    assert len(report.actions) == len(STEPS)
    assert report.after.cached_bytes == 0


def test_cpu_does_nothing_but_reports():
    dev = FakeDevice(6)
    comfy = full_comfy(dev)
    report = residency_boundary(device="cpu", comfy=comfy)
    assert dev.calls == []
    assert report.done == () and report.skipped == STEPS
    assert all("no accelerator memory" in a.detail for a in report.actions)
    assert report.before == report.after == MemorySnapshot("cpu", None, None, None, None)


def test_a_failing_present_function_names_the_step():
    dev = FakeDevice(7)
    comfy = full_comfy(dev)

    def broken():
        raise RuntimeError("stream destroyed")

    comfy.model_management.reset_cast_buffers = broken
    with pytest.raises(ResidencyBoundaryError, match="'reset_cast_buffers'.*reset_cast_buffers\\(\\) raised "
                                                     "RuntimeError: stream destroyed"):
        residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)


def test_reports_are_frozen_and_modules_normalise():
    dev = FakeDevice(8)
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=full_comfy(dev))
    with pytest.raises(AttributeError):
        report.actions = ()
    modules = ComfyModules.of(SimpleNamespace(memory_management=SimpleNamespace(aimdo_enabled=True)))
    assert modules.aimdo_enabled and modules.model_management is None
    assert ComfyModules.of(modules) is modules


def test_read_memory_on_cpu_is_all_unknown():
    snap = read_memory("cpu", host_memory(ComfyModules()))
    assert snap == MemorySnapshot("cpu", None, None, None, None)
    assert snap.cached_bytes is None


def test_other_models_are_released_through_comfy_free_memory_keeping_the_sampled_one():
    """The boundary used to collect only dead models: other models ComfyUI keeps loaded stayed resident and
    counted as used when the plan read the device. They are released through ComfyUI's free_memory until the
    pass's need is free; the model about to be sampled (and its clones) is passed as keep_loaded."""
    dev = FakeDevice(9)
    seen = []
    comfy = full_comfy(dev)
    comfy.model_management.free_memory = lambda need, device, keep_loaded: seen.append((need, str(device),
                                                                                          keep_loaded))
    report = residency_boundary(device=CUDA, reader=dev.snapshot, comfy=comfy, **KEEP)
    assert "release_other_models" in report.done
    (need, device, keep_loaded), = seen
    assert need == 6 << 30 and device == CUDA and keep_loaded == LOADED[:2]
    unasked = residency_boundary(device=CUDA, reader=dev.snapshot, comfy=comfy)
    assert "release_other_models" in unasked.skipped and len(seen) == 1


def test_the_boundary_runs_comfyuis_v039_order():
    """cleanup_prefetch_queues (aborts a malloc graph in flight) -> reset_cast_buffers -> the VBAR watermark reset,
    whatever else is present; the report lists the steps in the order they ran."""
    dev = FakeDevice(10)
    residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=full_comfy(dev))
    first3 = [c for c in dev.calls if c in ("prefetch.cleanup_prefetch_queues", "mm.reset_cast_buffers",
                                            "vbar.vbars_reset_watermark_limits")]
    assert first3 == ["prefetch.cleanup_prefetch_queues", "mm.reset_cast_buffers", "vbar.vbars_reset_watermark_limits"]
    assert STEPS.index("cleanup_prefetch_queues") < STEPS.index("reset_cast_buffers") < STEPS.index(
        "reset_vbar_watermarks")


def aimdo_module(name: str, source: str):
    """A module named like comfy-aimdo's (`comfy_aimdo.*`) whose functions run in it, as the real ones do."""
    import types

    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


RAISING_VBAR = aimdo_module("comfy_aimdo.fake_model_vbar", """
def vbars_reset_watermark_limits():
    raise RuntimeError("vbar_set_watermark failed: -22")

def vbars_analyze(device=None):
    raise RuntimeError("comfy-aimdo device %s is not initialized" % device)
""")
RAISING_CONTROL = aimdo_module("comfy_aimdo.fake_control", """
def get_total_vram_usage():
    raise RuntimeError("comfy-aimdo is not initialized")
""")


def test_a_raising_aimdo_watermark_reset_is_a_recorded_failure_not_a_crash():
    dev = FakeDevice(11)
    comfy = full_comfy(dev)
    comfy.aimdo_vbar = RAISING_VBAR
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert report.failed == ("reset_vbar_watermarks",)
    assert "reset_vbar_watermarks" not in report.done and "reset_vbar_watermarks" not in report.skipped
    line = next(x for x in report.lines if x.startswith("reset_vbar_watermarks"))
    assert line.startswith("reset_vbar_watermarks: failed: comfy_aimdo.model_vbar.vbars_reset_watermark_limits()")
    assert "vbar_set_watermark failed: -22" in line
    assert dev.calls[-4:] == ["mm.cleanup_models_gc", "mm.cleanup_models", "mm.free_memory", "mm.soft_empty_cache"]


def test_a_comfyui_step_that_fails_inside_aimdo_is_recorded_and_others_still_raise():
    """ComfyUI's free_memory unloads dynamic models through comfy-aimdo's ModelVBAR.free_memory (0.6+ raises):
    recorded. The same RuntimeError raised by ComfyUI's own code stays a ResidencyBoundaryError."""
    dev = FakeDevice(12)
    comfy = full_comfy(dev)
    vbar = aimdo_module("comfy_aimdo.fake_vbar_object", """
def free_memory(size):
    raise RuntimeError("vbar_free_memory: page %d pinned" % size)
""")
    comfy.model_management.free_memory = lambda need, device, keep_loaded: vbar.free_memory(need)
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert report.failed == ("release_other_models",)
    assert f"page {6 << 30} pinned" in report.lines[STEPS.index("release_other_models")]
    assert report.after.cached_bytes == 0 and "mm.soft_empty_cache" in dev.calls

    def comfy_own(need, device, keep_loaded):
        raise RuntimeError("CUDA error: an illegal memory access")

    comfy.model_management.free_memory = comfy_own
    with pytest.raises(ResidencyBoundaryError, match="release_other_models"):
        residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)


def test_failed_empty_inside_aimdo_still_empties_torchs_cache_and_keeps_the_failure():
    dev = FakeDevice(13)
    comfy = full_comfy(dev)
    raising = aimdo_module("comfy_aimdo.fake_empty", "def soft_empty_cache():\n    raise RuntimeError('unpin: -5')\n")
    comfy.model_management.soft_empty_cache = raising.soft_empty_cache
    report = residency_boundary(device=CUDA, reader=dev.snapshot, **KEEP, comfy=comfy)
    assert report.failed == ("empty_cache",) and "torch.empty_cache" in dev.calls
    assert report.after.cached_bytes == 0 and "unpin: -5" in report.lines[-1]


def test_raising_aimdo_readings_are_unknown_and_reported():
    import torch

    modules = ComfyModules(memory_management=SimpleNamespace(aimdo_enabled=True), aimdo_control=RAISING_CONTROL,
                           aimdo_vbar=RAISING_VBAR)
    snap = read_memory("cpu", host_memory(modules))
    assert snap.aimdo_vram_usage_bytes is None and snap.aimdo_vbar_reclaimable_bytes is None
    failures = snap.failures
    assert len(failures) == 2 and "not initialized" in failures[0] and "device" in failures[1]
    reclaim = host_memory(modules).vbar_reclaimable
    with pytest.raises(ReadingFailed, match="device 3"):
        reclaim(torch.device("cuda", 3))
    dev = FakeDevice(14)

    def reader(device):
        snap = dev.snapshot(device)
        return MemorySnapshot(snap.device, snap.allocated_bytes, snap.reserved_bytes, snap.free_bytes,
                              snap.total_bytes, failures=(failures[0],))

    report = residency_boundary(device=CUDA, reader=reader, **KEEP, comfy=full_comfy(dev))
    assert report.failed == ("read_memory_before", "read_memory_after")
    assert report.done == STEPS and "not initialized" in report.lines[0]
