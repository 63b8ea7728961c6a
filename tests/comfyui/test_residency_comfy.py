"""The residency boundary against the real ComfyUI modules, in-process on the CPU."""

from __future__ import annotations

import pytest

from longmedia.comfy.patching.residency import STEPS, load_comfy_modules, residency_boundary
from longmedia.report.memory import MemorySnapshot

# every function the boundary may call, by module attribute: all must exist in the checkout under test
EXPECTED_APIS = {
    "model_management": ("synchronize", "reset_cast_buffers", "cleanup_models_gc", "cleanup_models",
                         "free_memory", "soft_empty_cache"),
    "model_prefetch": ("cleanup_prefetch_queues",),
    "aimdo_vbar": ("vbars_reset_watermark_limits", "vbars_analyze"),
    "aimdo_control": ("get_total_vram_usage",),
}


@pytest.fixture(scope="module")
def modules(comfy_inprocess):
    import comfy.model_management

    assert comfy.model_management.cpu_mode(), "the in-process ComfyUI must run with --cpu here"
    return load_comfy_modules()


def test_real_comfyui_has_every_api_the_boundary_calls(modules):
    for attr, functions in EXPECTED_APIS.items():
        module = getattr(modules, attr)
        assert module is not None, f"{attr} did not import"
        for name in functions:
            assert callable(getattr(module, name, None)), f"{module.__name__}.{name} is missing"
    assert modules.aimdo_enabled is False  # --cpu: ComfyUI never switches comfy-aimdo on


def test_three_consecutive_boundaries_on_cpu_give_identical_snapshots(modules):
    reports = [residency_boundary(device="cpu", comfy=modules) for _ in range(3)]
    snapshots = {r.before for r in reports} | {r.after for r in reports}
    assert snapshots == {MemorySnapshot("cpu", None, None, None, None)}
    for report in reports:
        assert report.skipped == STEPS and report.done == ()
    assert reports[0] == reports[1] == reports[2]


def test_real_functions_run_when_the_device_is_an_accelerator(modules):
    # ComfyUI is in CPU mode, so its synchronize / soft_empty_cache are no-ops: this runs every real call
    calls = []

    def reader(device):
        calls.append(str(device))
        return MemorySnapshot(str(device), 1 << 20, 3 << 20, 5 << 30, 8 << 30)

    report = residency_boundary(device="cuda:0", reader=reader, comfy=modules)
    assert report.done == tuple(s for s in STEPS if s not in ("reset_vbar_watermarks", "release_other_models"))
    assert report.skipped == ("reset_vbar_watermarks", "release_other_models")
    assert all(a.detail.startswith("comfy.") for a in report.actions if a.done)
    assert calls == ["cuda:0", "cuda:0"]
