"""Block prefetch where weights come from disk (issue 45): with host RAM short of the weights, ComfyUI's prefetch
reads and copies block i+1 while block i computes, so it stays on even on a 16 GB card with INT8 weights, where
with every weight in RAM the plan keeps it off (the seed's rule for that card)."""

from __future__ import annotations

import dataclasses

import pytest

from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.planner import plan
from longmedia.planning.policy import prefetch_decision
from longmedia.units import GIB


def _machine(ram_available_gib: float, pinned_gib: float) -> DeviceProfile:
    d = DeviceProfile.card(16, 128)
    return dataclasses.replace(d, ram_available_bytes=int(ram_available_gib * GIB),
                               pinned_budget_bytes=int(pinned_gib * GIB))


@pytest.fixture(scope="module")
def geometry():
    return build_geometry(1344, 768, seconds=14.4)


def test_a_16gb_card_with_int8_weights_in_ram_keeps_prefetch_off(geometry):
    p = plan(ModelProfile.preset("h3-int8"), _machine(120, 120), geometry)
    assert p.memory_mode != "normal" and not p.prefetch
    assert p.host_ram.disk_bytes_per_call == 0


@pytest.mark.parametrize("ram_gib", [32, 16])
def test_where_weights_come_from_disk_prefetch_is_on_and_counted(geometry, ram_gib):
    p = plan(ModelProfile.preset("h3-int8"), _machine(ram_gib, 16), geometry)
    assert p.host_ram.disk_bytes_per_call > 0
    assert p.prefetch
    assert any("come from disk every model call" in r for r in p.reasons)
    assert not any("nothing reserves room for the next block" in r for r in p.reasons)
    # the second block is in the pass's VRAM: the same pass without prefetch needs less
    off = plan(ModelProfile.preset("h3-int8"), _machine(120, 120), geometry)
    assert p.memory.activation_need_bytes > off.memory.activation_need_bytes


def test_the_rule_itself():
    m, d = ModelProfile.preset("h3-int8"), DeviceProfile.card(16, 32)
    assert prefetch_decision(m, d, False, 0)[0] is False
    on, why = prefetch_decision(m, d, False, 8 * GIB)
    assert on and "8.00 GiB" in why
    assert prefetch_decision(m, dataclasses.replace(d, dynamic_vram=False), False, 8 * GIB)[0] is False


def test_the_disk_share_reproduces_the_measured_rows():
    """docs/lab/data/2026-12-07-h100-prefetch-host-ram-cards.jsonl: all RAM 33.55 s/step; 32 GiB 36.39 (8.46 s of
    reads a call), 16 GiB 46.54 (16.05 s), both with prefetch; the control at 32 GiB, prefetch off, 40.01 (8.02 s)."""
    from longmedia.planning.host_ram import disk_step_share

    base = 33.55
    for read_s, overlapped, measured in ((8.46, True, 36.39), (16.05, True, 46.54), (8.02, False, 40.01)):
        assert base + disk_step_share(read_s, overlapped) * read_s == pytest.approx(measured, abs=0.05)
    assert disk_step_share(2.0, True) == disk_step_share(8.46, True)   # the nearer row outside the measured range
    assert disk_step_share(30.0, True) == disk_step_share(16.05, True)
