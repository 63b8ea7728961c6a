"""The residency boundary's request (`stock_pass_bytes`): planned before any plan exists, never less than a plan.

The Sampler plans a pass once, after the boundary; the boundary asks ComfyUI to free `stock_pass_bytes` first.
Asking for less than the plan then needs would leave other models resident that the plan counted as free."""

from __future__ import annotations

import pytest

from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.around_blocks import stock_pass_bytes
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest


@pytest.mark.parametrize("quant", ["bf16", "int8"])
@pytest.mark.parametrize("seconds", [2.0, 5.0, 10.0, 14.4])
@pytest.mark.parametrize("vram", [8, 16, 24, 48, 141])
@pytest.mark.parametrize("mode", ["auto", "normal", "low_vram", "ultra_low_vram"])
def test_the_boundary_asks_for_at_least_what_any_plan_predicts(quant, seconds, vram, mode):
    model = ModelProfile.preset(f"h3-{quant}")
    g = build_geometry(1344, 768, seconds=seconds)
    p = plan(model, DeviceProfile.card(vram, 256), g, PlanRequest(memory_mode=mode),
             attention_resolver=default_attention_path)
    assert stock_pass_bytes(model, g) >= p.memory.predicted_peak_bytes


def test_it_grows_with_the_pass():
    model = ModelProfile.preset("h3-int8")
    short, long = (stock_pass_bytes(model, build_geometry(1344, 768, seconds=s)) for s in (2.0, 10.0))
    assert long > short > model.weight_bytes
