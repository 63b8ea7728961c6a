"""The in-process Sampler on a full-width 2-block H3 under Dynamic VRAM, in a child process (see sampler_process.py).

A child, because comfy-aimdo has to initialise before torch loads (main.py's order) and pytest has
imported torch long before. The child writes its results as JSON; these tests read them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from child_run import run_child

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.skipif(not os.environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip(),
                                reason="LONGMEDIA_COMFYUI_ROOT is not set (source tools/gpu/bootstrap.sh)")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    return run_child("sampler_process.py", tmp_path_factory, "sampler_dynamic_vram.json")


def test_comfyui_started_with_dynamic_vram_and_loaded_the_model_dynamically(child):
    assert child.get("start", {}).get("aimdo_enabled") is True, child.get("_tail")
    assert child["patcher"]["dynamic"] is True and child["patcher"]["type"] == "ModelPatcherDynamic"
    assert child["stock"]["finite"] and child["stock"]["std"] > 0.05


def test_normal_mode_equals_sampler_custom_advanced_bit_for_bit(child):
    r = child.get("normal", {})
    assert r.get("ok"), r.get("error") or child.get("_tail")
    assert r["equal_video"] and r["equal_audio"] and r["memory_mode"] == "normal" and r["streamed_blocks"] == []


@pytest.mark.parametrize("case", ["low_vram", "low_vram_groups"])
def test_streamed_modes_within_bf16_tolerance(child, case):
    r = child.get(case, {})
    assert r.get("ok"), r.get("error") or child.get("_tail")
    assert r["streamed_blocks"] == [0, 1] and r["finite"]
    assert r["rel_video"] <= 2e-2 and r["rel_audio"] <= 2e-2, r


@pytest.mark.parametrize("case", ["sol", "scheduled_sol"])
def test_sol_modes_run_under_inference_mode(child, case):
    r = child.get(case, {})
    assert r.get("ok"), r.get("traceback") or child.get("_tail")
    assert r["finite"] and r["streamed_blocks"] == [0, 1]
    assert "sol" in r["backend"], r  # Sol itself ran (the Triton kernel), not an exact fallback
    assert r["rel_video"] < 0.5  # approximate, but the same video


def test_weights_from_the_offload_cast_buffers_give_the_same_output(child):
    """Every weight through ComfyUI's cast buffers (comfy-aimdo reports no room): low_vram equals its VBAR run."""
    r = child.get("cast_buffer", {})
    assert r.get("ok"), r.get("traceback") or child.get("_tail")
    assert r["stock_equal"], r  # stock itself does not depend on where the weights sit
    assert r["streamed_blocks"] == [0, 1] and r["finite"]
    assert r["equal_vbar_run"], r


def test_a_long_job_from_the_cast_buffers_matches_stock(child):
    """~33,000 rows with every weight from ComfyUI's cast buffers: the stage's kernels outlast the next casts, which
    is where the offload-stream ordering on release matters. The unordered figures are the control (recorded)."""
    r = child.get("cast_buffer_long", {})
    assert r.get("ok"), r.get("traceback") or child.get("_tail")
    assert r["rows"] > 30_000 and r["streamed_blocks"] == [0, 1] and r["finite"]
    assert r["rel_stock"] <= 2e-2, r
