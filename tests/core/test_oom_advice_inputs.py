"""Every OOM advice names something a user can set (issue 30): the control it points at and every input name in
its text are inputs of the LongMedia nodes (their schemas, tests/data/longmedia_object_info.json, which
tests/comfyui/test_workflows_api.py checks against a live server), or a ComfyUI launch flag that exists
(tests/comfyui/test_launch_flags.py checks them against the checkout's cli_args.py). Walked over every phase, in
normal and streamed modes, at every chunk size the advice distinguishes, with and without fragmentation."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from longmedia.execution.chunks import ChunkSizes
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.planning.host_ram import plan_host_ram
from longmedia.planning.policy import pinning
from longmedia.report.memory import MemorySnapshot
from longmedia.report.oom import PHASES, PREFETCH_OFF_FLAG, OOMContext, pressure_point
from longmedia.units import GIB

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FLAGS = {PREFETCH_OFF_FLAG, "--disable-pinned-memory"}   # ComfyUI's own; checked in tests/comfyui
NOT_INPUTS = {"expandable_segments"}   # a value of PYTORCH_CUDA_ALLOC_CONF, named with its variable


def _names(tree) -> set[str]:
    """Every input name in a schema's input dict (dynamic options and Autogrow names included), and every value
    a combo offers (low_vram is a value of memory_mode)."""
    out: set[str] = set()
    if isinstance(tree, dict):
        for section in ("required", "optional"):
            for name, spec in tree.get(section, {}).items():
                out.add(name)
                out |= {v for v in spec[0] if isinstance(v, str)} if isinstance(spec[0], list) else set()
                out |= _names(spec[1] if isinstance(spec, list) and len(spec) > 1 else {})
        for option in tree.get("options", []):       # a DynamicCombo's options; a COMBO's are its values
            out |= _names(option.get("inputs", {})) | {option["key"]} if isinstance(option, dict) else {option}
        template = tree.get("template")
        if isinstance(template, dict):
            out |= _names(template.get("input", {})) | set(template.get("names", []))
    return out


INPUTS = set().union(*(_names(node["input"]) for node in json.loads(
    (ROOT / "tests" / "data" / "longmedia_object_info.json").read_text(encoding="utf-8")).values()))

# (device, allocated, reserved, free, total)
READINGS = {"calm": MemorySnapshot("cuda:0", 10 * GIB, 10 * GIB + GIB // 4, GIB, 16 * GIB),
            "fragmented": MemorySnapshot("cuda:0", 8 * GIB, 14 * GIB, GIB // 2, 16 * GIB)}
CHUNKS = [ChunkSizes(), ChunkSizes(16384, 0, 16384), ChunkSizes(512, 0, 512), ChunkSizes(512, 0, 512, 8),
          ChunkSizes(0, 0, 4096), ChunkSizes(4096, 0, 0)]
SPANS = [(("text", 256), ("video", 30000)), (("text", 256), ("ref_img", 20000), ("video", 30000))]
CASES = [(phase, reading, chunks, spans) for phase, reading, chunks, spans
         in itertools.product(PHASES, READINGS, CHUNKS, SPANS)]


def _advice(phase, reading, chunks, spans) -> tuple[str, str]:
    ctx = OOMContext(chunks=chunks, heads=56, seq_len=sum(n for _, n in spans), row_spans=spans,
                     memory_mode="normal" if chunks.is_stock else "low_vram", late_block_guard_target_mb=256)
    return pressure_point(phase, READINGS[reading], ctx)


def test_the_schema_names_are_read():
    assert {"segment_seconds", "memory_mode", "mlp_chunk_tokens", "reference_budget", "ref_audio_1",
            "first_frame", "late_block_guard_target_mb"} <= INPUTS


@pytest.mark.parametrize("phase, reading, chunks, spans", CASES)
def test_every_oom_advice_names_inputs_that_exist(phase, reading, chunks, spans):
    control, text = _advice(phase, reading, chunks, spans)
    for part in control.split(" / "):
        assert part in INPUTS or part in LAUNCH_FLAGS, (control, text)
    for word in re.findall(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", text):
        assert word in INPUTS or word in NOT_INPUTS, (word, text)
    for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", text):
        assert flag in LAUNCH_FLAGS, (flag, text)
    assert "shorter segments" not in text and "turn block prefetch off" not in text


def test_the_guard_release_advice_says_what_it_costs():
    """Released weight pages are not faulted back in during the run: they stream through the cast buffers."""
    _, text = _advice("final_output", "calm", ChunkSizes(16384, 0, 16384), SPANS[0])
    assert "releases resident weight pages" in text and "cast buffers" in text and "slower" in text
    assert "faulted back" not in text


def test_the_pinning_decision_names_a_launch_flag_and_the_pin_budget():
    """Under dynamic VRAM the decision is the host-RAM plan's pin budget; with pinned memory off it names ComfyUI's
    own flag."""
    device = DeviceProfile.card(16, 32)
    model = ModelProfile.preset("h3-int8")
    streamed = 28 * GIB
    on = pinning(model, device, streamed, plan_host_ram(device, streamed, model.block_weight_bytes, 0,
                                                         own_alloc_bytes=0))
    assert on.mode == "partial" and f"pin budget of {on.pinned_bytes / GIB:.2f} GiB" in on.reason
    off = pinning(model, device, streamed, plan_host_ram(device, streamed, model.block_weight_bytes, 0,
                                                          own_alloc_bytes=0, pinned_memory=False))
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", off.reason))
    assert off.mode == "none" and off.pinned_bytes == 0 and flags and flags <= LAUNCH_FLAGS
