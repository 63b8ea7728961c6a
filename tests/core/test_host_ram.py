"""The host-RAM plan (issue 45): weights mmapped and pinned as RAM allows under dynamic VRAM, the rest streamed from
disk every model call; the need is the process, the latents and the headroom. One function (`plan_host_ram`) gives
the CLI's, Setup's and the Sampler's verdict."""

from __future__ import annotations

import dataclasses
import json

import pytest

from longmedia.cli import main
from longmedia.h3.profiles import COMFYUI_HELD_BYTES, DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.job.setup_plan import SetupRequest, plan_setup
from longmedia.planning.host_ram import (
    PIN_BUDGET_FLOOR_BYTES,
    PROCESS_HOST_BYTES,
    STREAM_PREFETCH_BLOCKS,
    pass_latent_bytes,
    plan_host_ram,
    stage_latent_bytes,
)
from longmedia.planning.types import PlanRequest
from longmedia.units import GIB

CHECKPOINT = int(43.8 * GIB)      # the measured run's full-depth INT8 checkpoint, 50 blocks, none VRAM-resident
# host RAM available -> (s/step, process RSS GiB), 14.4 s job on a 16 GiB card, a balloon holding the rest
MEASURED = {None: (34.62, 47.1), 32: (41.09, 29.7), 24: (43.43, 21.5), 16: (47.44, 13.6)}


def _machine(available_gib: float | None, pinned_budget_gib: float = 230.0, **kw) -> DeviceProfile:
    d = DeviceProfile.card(16, 256, **kw)
    avail = d.ram_available_bytes if available_gib is None else int(available_gib * GIB)
    return dataclasses.replace(d, ram_available_bytes=avail, pinned_budget_bytes=int(pinned_budget_gib * GIB))


def _measured_plan(available_gib: float | None):
    g = build_geometry(1344, 768, seconds=14.4)
    return plan_host_ram(_machine(available_gib), CHECKPOINT, CHECKPOINT // 50, stage_latent_bytes(g),
                         own_alloc_bytes=pass_latent_bytes(g))


@pytest.mark.parametrize("available", [None, 32, 24, 16])
def test_the_pin_arithmetic_reproduces_the_measured_rows(available):
    """The pin cache filled all but ~2.3 GiB of what was available: the predicted RSS (process + latents + pins)
    is within 10 % of the measured one in every row (the plan's headroom: ComfyUI's 2 GiB floor and LongMedia's own
    allocation; no read-ahead window by default)."""
    hr = _measured_plan(available)
    rss = MEASURED[available][1] * GIB
    assert hr.fits and abs(hr.rss_bytes - rss) <= 0.10 * rss, (hr.rss_bytes / GIB, rss / GIB)
    if available is None:
        assert hr.verdict == "fits in RAM: every weight pinned" and not hr.streams_from_disk
        assert hr.prefetch_blocks == 0 and hr.prefetch_window_bytes == 0
    else:
        assert hr.streams_from_disk and hr.page_cache_bytes == 0
        assert hr.rss_bytes == hr.ram_available_bytes - hr.headroom_bytes      # the pins fill what is left
        assert hr.prefetch_blocks == 0 and hr.prefetch_window_bytes == 0   # read-ahead is off by default
        assert hr.headroom_bytes == PIN_BUDGET_FLOOR_BYTES + hr.own_alloc_bytes
        assert hr.disk_bytes_per_call == CHECKPOINT - hr.pinned_bytes
        assert hr.verdict.startswith(f"fits in RAM: {hr.pinned_bytes / GIB:.2f} GiB pinned, 0.00 GiB from the page "
                                     "cache, streams ")


def test_less_ram_pins_less_and_streams_more():
    plans = [_measured_plan(a) for a in (32, 24, 16)]
    assert [p.pinned_bytes for p in plans] == sorted((p.pinned_bytes for p in plans), reverse=True)
    assert [p.disk_bytes_per_call for p in plans] == sorted(p.disk_bytes_per_call for p in plans)
    # 8 GiB less RAM: 8 GiB fewer pins, 8 GiB more from disk every model call
    assert plans[0].pinned_bytes - plans[1].pinned_bytes == 8 * GIB
    assert plans[1].disk_bytes_per_call - plans[0].disk_bytes_per_call == 8 * GIB


def test_asked_for_read_ahead_keeps_its_window_inside_comfyuis_floor_or_beyond_it_when_larger():
    g = build_geometry(1344, 768, seconds=14.4)
    for block in (CHECKPOINT // 50, 3 * GIB // 2):
        hr = plan_host_ram(_machine(32), CHECKPOINT, block, stage_latent_bytes(g),
                           own_alloc_bytes=pass_latent_bytes(g), read_ahead=True)
        assert hr.prefetch_blocks == STREAM_PREFETCH_BLOCKS and hr.prefetch_window_bytes == 2 * block
        assert hr.headroom_bytes == max(PIN_BUDGET_FLOOR_BYTES, 2 * block) + hr.own_alloc_bytes


def test_fits_edge_is_the_need_beside_the_weights():
    probe = plan_host_ram(_machine(64), CHECKPOINT, GIB, 2 * GIB, own_alloc_bytes=GIB)
    need = probe.process_bytes + probe.latent_bytes + PIN_BUDGET_FLOOR_BYTES + GIB
    exact = plan_host_ram(_machine(need / GIB), CHECKPOINT, GIB, 2 * GIB, own_alloc_bytes=GIB)
    assert exact.need_bytes == need and exact.fits and exact.pinned_bytes == 0
    assert exact.disk_bytes_per_call == CHECKPOINT
    short = plan_host_ram(_machine((need - 1) / GIB), CHECKPOINT, GIB, 2 * GIB, own_alloc_bytes=GIB)
    assert not short.fits
    assert short.verdict == (f"DOES NOT FIT (RAM): needs {need / GIB:.2f} GiB beside the weights, "
                             f"{(need - 1) / GIB:.2f} GiB available")


def test_the_pinned_budget_caps_the_pins():
    hr = plan_host_ram(_machine(40, pinned_budget_gib=10), CHECKPOINT, GIB, 0, own_alloc_bytes=0)
    assert hr.pinned_bytes == 10 * GIB
    # the rest (33.8 GiB) does not fit beside the pins and the headroom: the page cache keeps nothing useful
    assert hr.page_cache_bytes == 0 and hr.disk_bytes_per_call == CHECKPOINT - 10 * GIB
    roomy = plan_host_ram(_machine(128, pinned_budget_gib=10), CHECKPOINT, GIB, 0, own_alloc_bytes=0)
    assert roomy.page_cache_bytes == CHECKPOINT - 10 * GIB and not roomy.streams_from_disk
    assert roomy.verdict.endswith("from the page cache, nothing from disk")


def test_pinned_memory_off_reads_from_the_page_cache_or_the_disk():
    small = plan_host_ram(_machine(32), CHECKPOINT, GIB, 0, own_alloc_bytes=0, pinned_memory=False)
    assert small.pin_budget_bytes == 0 and small.page_cache_bytes == 0 and small.disk_bytes_per_call == CHECKPOINT
    big = plan_host_ram(_machine(64), CHECKPOINT, GIB, 0, own_alloc_bytes=0, pinned_memory=False)
    assert big.pin_budget_bytes == 0 and big.page_cache_bytes == CHECKPOINT and big.disk_bytes_per_call == 0
    assert big.prefetch_blocks == 0


def test_without_dynamic_vram_the_streamed_weights_are_a_need():
    d = _machine(32, dynamic_vram=False)
    hr = plan_host_ram(d, 20 * GIB, GIB, GIB, own_alloc_bytes=0)
    assert hr.need_bytes == PROCESS_HOST_BYTES + GIB + PIN_BUDGET_FLOOR_BYTES + 20 * GIB and hr.fits
    assert hr.disk_bytes_per_call == 0 and hr.prefetch_blocks == 0 and "dynamic VRAM off" in hr.verdict
    over = plan_host_ram(d, CHECKPOINT, GIB, GIB, own_alloc_bytes=0)
    assert not over.fits and "with the 43.80 GiB of streamed weights" in over.verdict
    # the same weights under dynamic VRAM: no need, they stream
    assert plan_host_ram(_machine(32), CHECKPOINT, GIB, GIB, own_alloc_bytes=0).fits


def test_disk_seconds_follow_the_disk_speed():
    fast = plan_host_ram(_machine(16), CHECKPOINT, GIB, 0, own_alloc_bytes=0, disk_gbps=2.0)
    slow = plan_host_ram(_machine(16), CHECKPOINT, GIB, 0, own_alloc_bytes=0, disk_gbps=0.5)
    assert slow.disk_seconds_per_call == pytest.approx(4 * fast.disk_seconds_per_call)
    assert fast.disk_seconds_per_call == pytest.approx(fast.disk_bytes_per_call / 2e9)
    assert "at 0.5 GB/s" in slow.verdict and "to_dict" and slow.to_dict()["disk_seconds_per_call"] > 0


# --- the CLI's goals --------------------------------------------------------------------------------------------

def _cli(capsys, *args) -> tuple[int, str]:
    rc = main(["plan", *args])
    return rc, capsys.readouterr().out


def test_a_32_gb_machine_runs_the_60_s_job_and_the_cli_prints_the_disk_cost(capsys):
    rc, out = _cli(capsys, "--vram-gb", "16", "--ram-gb", "32", "--seconds", "60", "--segment-seconds", "10")
    head = out.splitlines()[:2]
    assert rc == 0 and head[0].startswith("LongMedia whole-job plan: FITS")
    assert head[1].startswith("host RAM (main pass): fits in RAM: ") and "from disk per model call (about " in head[1]


def test_a_16_gb_machine_fits_and_streams(capsys):
    rc, out = _cli(capsys, "--vram-gb", "16", "--ram-gb", "16", "--seconds", "60", "--segment-seconds", "10")
    assert rc == 0 and "streams" in out.splitlines()[1] and "DOES NOT FIT" not in out
    assert "text encoding" in out and "Qwen3-VL-32B nvfp4" in out


def test_the_readme_example_fits(capsys):
    assert _cli(capsys, "--vram-gb", "12", "--ram-gb", "32", "--seconds", "10")[0] == 0


def test_disk_and_pinned_memory_flags_reach_the_plan(capsys):
    base = ("--ram-gb", "16", "--json")
    _, out = _cli(capsys, *base)
    d = json.loads(out)
    _, out = _cli(capsys, *base, "--disk-gbps", "0.5")
    slow = json.loads(out)
    _, out = _cli(capsys, *base, "--no-pinned-memory")
    unpinned = json.loads(out)
    assert d["host_ram"]["disk_gbps"] == 2.0 and slow["host_ram"]["disk_gbps"] == 0.5
    assert slow["host_ram"]["disk_seconds_per_call"] == pytest.approx(4 * d["host_ram"]["disk_seconds_per_call"])
    assert unpinned["host_ram"]["pin_budget_bytes"] == 0 and d["host_ram"]["pin_budget_bytes"] > 0
    assert unpinned["pinning"]["pinned_bytes"] == 0


def test_the_json_carries_the_whole_job_verdict_at_the_top(capsys):
    rc, out = _cli(capsys, "--ram-gb", "4", "--json")
    d = json.loads(out)
    assert rc == 3 and d["fits"] is False and d["pass_fits"] is True
    assert d["verdict"] == d["whole_job"]["verdict"] and d["verdict"].startswith("DOES NOT FIT")
    assert d["host_ram"]["fits"] is False and d["host_ram"]["verdict"].startswith("DOES NOT FIT (RAM)")
    rc, out = _cli(capsys, "--ram-gb", "16", "--json")
    d = json.loads(out)
    assert rc == 0 and d["fits"] is True and d["verdict"].startswith("FITS")


def test_help_states_the_disk_default_and_its_basis(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 2.0 GB/s, a mid" in text and "NVMe SSD's sustained read; SATA SSDs read about 0.5)" in text
    assert "--no-pinned-memory" in text and "--disable-pinned-memory" in text


# --- one verdict: the CLI, Setup and the Sampler ----------------------------------------------------------------

# (card GB, RAM GB, seconds): 16, 32 and 64 GB machines that fit (streaming from disk, or every weight pinned), an
# 8 GB card whose main pass fits no memory mode (VRAM), and an 8 GB machine whose decode does not fit (RAM)
MACHINES = [(16, 16, 10.0), (16, 32, 10.0), (16, 64, 10.0), (8, 16, 20.0), (8, 32, 20.0), (8, 64, 20.0),
            (16, 8, 10.0)]


@pytest.mark.parametrize("vram, ram, seconds", MACHINES)
def test_cli_setup_and_sampler_give_one_whole_job_verdict(vram, ram, seconds, capsys):
    """The same machine (DeviceProfile.card(vram, ram) as ComfyUI sees the card) and job: the CLI's JSON, Setup's
    preflight (comfy/setup.machine_check, in plan_job's words)
    and the Sampler's report (comfy/passes/sampler.whole_job over pass_plan.plan_pass's plan, at the CLI's 20 steps
    and cfg 1) give one whole-job verdict: all three call plan_job. Setup refuses where host RAM is short; a card
    short of VRAM alone is a warning there (the Sampler plans the checkpoint it gets)."""
    import types

    import torch

    from longmedia.comfy import setup
    from longmedia.comfy.passes import pass_plan
    from longmedia.comfy.passes import sampler as comfy_sampler
    from longmedia.errors import LongMediaInputError
    from longmedia.planning.patches import PatchBytes

    device = DeviceProfile.card(vram, ram, host_held_bytes=COMFYUI_HELD_BYTES)
    rc, out = _cli(capsys, "--vram-gb", str(vram), "--ram-gb", str(ram), "--seconds", str(seconds), "--json")
    cli = json.loads(out)["whole_job"]

    setup_plan = plan_setup(SetupRequest(1344, 768, seconds, prompt_tokens=256,
                                         ram_available_bytes=device.ram_available_bytes))
    try:
        notes, refusal = setup.machine_check(setup_plan, device), None
    except LongMediaInputError as error:
        notes, refusal = (), error

    checked = pass_plan.CheckedPass(ModelProfile.preset("h3-int8"), setup_plan.geometry, (), PlanRequest(), ())
    guider = types.SimpleNamespace(cfg=1.0)
    sampler = comfy_sampler.whole_job(pass_plan.plan_pass(checked, device), torch.linspace(1, 0, 21), guider,
                                      PatchBytes())

    assert cli["headline"] == list(sampler.headline()) and cli["verdict"] == sampler.verdict
    assert cli["fits"] == sampler.fits == (rc == 0)
    assert (refusal is None) == sampler.fits_ram        # Setup refuses where host RAM is short, not VRAM alone
    if sampler.fits:
        assert notes[0].endswith("; ".join(sampler.headline()) + "; the verdict python -m longmedia plan prints and "
                                 "the Sampler reports")
        assert sampler.main_host_ram.streams_from_disk == (ram < 64)
    elif refusal is None:                               # VRAM alone: a warning with the shortfalls
        assert notes[0].startswith("WARNING: ") and sampler.verdict in notes[0]
        assert all(s in notes[0] for s in sampler.shortfalls()) and "ultra_low_vram" in notes[0]
    else:
        text = str(refusal)
        assert sampler.verdict in text and sampler.shortfalls() and all(s in text for s in sampler.shortfalls())
    assert ((vram, ram) in ((8, 16), (8, 32), (8, 64), (16, 8))) != sampler.fits      # VRAM, then RAM
    assert ((vram, ram) == (16, 8)) == (refusal is not None)


def test_the_readme_machine_table_is_what_the_cli_prints(capsys):
    """README's "What your machine needs": every cell's figures are on the host RAM line of
    `python -m longmedia plan --vram-gb CARD --ram-gb RAM --seconds 10`."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## What your machine needs"):text.index("## What a clip costs")]
    rams = [int(r) for r in re.findall(r"\| (\d+) GB RAM \(`--ram-gb \d+`\)", section)]
    rows = re.findall(r"^\| (\d+) GB \(`--vram-gb \d+`\) \|(.*)\|$", section, re.M)
    assert rams == [16, 32, 64] and [int(r[0]) for r in rows] == [8, 12, 16, 24]
    for card, cells in rows:
        for ram, cell in zip(rams, cells.split("|")):
            rc, out = _cli(capsys, "--vram-gb", card, "--ram-gb", str(ram), "--seconds", "10", "--json")
            verdict = json.loads(out)["host_ram"]["verdict"]
            assert rc == 0 and verdict.startswith("fits in RAM"), (card, ram, verdict)
            figures = re.findall(r"\d+\.\d+ GiB|about \d+\.\d s", cell)
            assert all(f in verdict for f in figures), (card, ram, cell, verdict)
            for words in ("every weight pinned", "nothing from disk", "from the page cache"):
                if words in cell:
                    assert words in verdict, (card, ram, cell, verdict)
            assert ("from disk per model call" in verdict) == ("GiB from disk" in cell), (card, ram, cell, verdict)


def test_under_dynamic_vram_every_weight_travels_through_the_pin_cache():
    """ComfyUI pins every weight it casts, resident or not (43.75 of 43.78 GiB pinned with RAM to spare, H100,
    docs/lab/2026-12-07-host-ram.md): the pass's host-RAM plan counts the whole model, not only the weights the VRAM
    plan streams; without dynamic VRAM only the streamed ones stay in RAM."""
    from longmedia.h3.profiles import ModelProfile
    from longmedia.planning.planner import pass_host_ram
    from longmedia.planning.types import PlanRequest

    m = ModelProfile.preset("h3-int8")
    g = build_geometry(1344, 768, seconds=14.4)
    streamed = m.weight_bytes // 3
    dyn = pass_host_ram(m, DeviceProfile.card(16, 32), g, streamed, PlanRequest())
    classic = pass_host_ram(m, DeviceProfile.card(16, 32, dynamic_vram=False), g, streamed, PlanRequest())
    assert dyn.weights_host_bytes == m.weight_bytes and classic.weights_host_bytes == streamed
