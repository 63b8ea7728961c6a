"""Checking and planning one pass before it runs: every input checked (no GPU work), the pass's geometry read from
its longest model call's packed row spans, the host's attention read into the request; the exact backends' speeds
measured in a step of their own (`measure_speeds`: GPU work, after the residency boundary); the plan made for a
device profile.

`sampler.run_sampler` checks a pass here, runs the residency boundary, measures the speeds, then plans the pass from
the memory the boundary leaves (`load_device_profile`); a segmented job's forecast plans each pass here without
running it (`plan_for`: the speeds the disk cache holds, nothing timed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...attention.speeds import MeasuredSpeeds
from ...h3.geometry import Geometry
from ...h3.profiles import DeviceProfile, ModelProfile
from ...job.preflight import StagePass, check_conditioning_widths, check_pass_rows
from ...planning.patches import PatchBytes
from ...planning.planner import plan as make_plan
from ...planning.types import ExecutionPlan, PlanRequest
from ...report.memory import MemorySnapshot
from ..host.attention import host_attention
from ..host.attention_speeds import attention_speeds
from ..host.memory import dynamic_vram_active, pinned_memory_enabled, pinned_ram_bytes, vbar_reclaimable_bytes
from ..host.patches import model_patch_bytes
from ..patching.sparse_attention_node import block_sparse_evidence
from ..patching.sparse_attention_node import reconcile as reconcile_block_sparse
from . import sampler_inputs

SpeedTiming = Callable[..., MeasuredSpeeds | None]
"""`host.attention_speeds.attention_speeds`' signature: (load_device, *, attention_mode, head_dim, seq_len,
measure=True) -> the exact backends' speeds (None: nothing to order)."""


def _conditionings(guider) -> list:
    """Every entry of the guider's conditioning (positive first, then negative ...) as a one-entry CONDITIONING; at
    cfg 1 the positive only (ComfyUI skips the negative's call: `sampler_inputs.runs_negative`)."""
    conds = getattr(guider, "original_conds", {}) or {}
    others = sorted(k for k in conds if k != "positive") if sampler_inputs.runs_negative(guider) else []
    entries = [[[c.get("cross_attn"), c]] for key in ("positive", *others)
               for c in conds.get(key) or () if isinstance(c, dict) and c.get("cross_attn") is not None]
    if not entries:
        raise sampler_inputs.LongMediaInputError("guider", "no conditioning", "a guider with conditioning set",
                                         "Connect positive conditioning to the guider.")
    return entries


def longest_row_spans(guider, video, audio, keyframes: tuple | None = None):
    """(row spans, conditioning) of the guider's longest model call: each of positive and negative runs its own
    packed sequence (its own text length, guides and references), so the pass is planned for the longest (at cfg 1
    the negative makes no call and is not planned).
    keyframes: the guides to count instead of each conditioning's own (a segment's context guide), or None."""
    best = None
    for cond in _conditionings(guider):
        if keyframes is not None:
            cond = [[cond[0][0], {**cond[0][1], "minimax_keyframes": list(keyframes)}]]
        spans = sampler_inputs.stock_row_spans(video, audio, cond)
        if best is None or spans[-1][1] > best[0][-1][1]:
            best = (spans, cond)
    return best


@dataclass(frozen=True)
class CheckedPass:
    """One pass's inputs, checked before anything runs: the loaded model's profile, the pass's geometry and its
    packed row spans (its longest model call's), the request (with the host's attention read in; the speeds
    `measure_speeds` adds) and what BlockSparseAttention left on it."""

    profile: ModelProfile
    geometry: Geometry
    row_spans: tuple
    request: PlanRequest
    block_sparse: object
    patches: PatchBytes = PatchBytes()   # the model's LoRAs (`patch_facts.model_patch_bytes`)


def check_pass(guider, latent, sigmas, request: PlanRequest, keyframes: tuple | None = None,
               stage: StagePass | None = None) -> CheckedPass:
    """Check every input of one pass and read its geometry; nothing is planned or measured yet (no GPU work: the
    request keeps the attention speeds it carries, or none; `measure_speeds` times them after the boundary).

    keyframes: the H3 guides to count instead of the conditioning's own (a segment's context guide), or None.
    stage: a Hi-Res or Refiner pass (`job.preflight.StagePass`): refusals name that node's inputs.
    The pass is planned for the longest of its model calls (positive or negative: `longest_row_spans`), under the
    job's reference_budget (`request.reference_budget`; None: no job, uncapped).
    """
    model = sampler_inputs.h3_diffusion_model(guider)
    video, audio = sampler_inputs.av_latents(latent)
    sampler_inputs.check_sigmas(sigmas)
    profile = ModelProfile.from_module(model, name="loaded H3")
    check_conditioning_widths(sampler_inputs.conditioning_widths(guider), profile.dims.text_dim)
    row_spans, longest = longest_row_spans(guider, video, audio, keyframes)
    geometry = sampler_inputs.geometry_from_layout(video, audio, row_spans, sampler_inputs.text_rows(longest),
                                           request.reference_budget)
    if stage is not None:  # a Hi-Res or Refiner pass: its refusal names that node's inputs
        stage.check_rows(geometry.seq_len, geometry.width, geometry.height, geometry.frames)
    else:
        check_pass_rows(geometry.seq_len, geometry.width, geometry.height, geometry.frames, name="latent",
                        value=f"{geometry.width}x{geometry.height}, {geometry.frames} frames")
    if request.host_attention is None:  # what the user runs ComfyUI with: auto keeps it where it can run
        request = dataclasses.replace(request, host_attention=host_attention(
            getattr(guider, "model_options", None), getattr(guider.model_patcher, "model_options", None),
            diffusion_model=model))
    if request.pinned_memory and not pinned_memory_enabled():   # ComfyUI's --disable-pinned-memory: no pin cache
        request = dataclasses.replace(request, pinned_memory=False)
    evidence = block_sparse_evidence(guider.model_patcher, getattr(guider, "model_options", {}))
    patches = model_patch_bytes(guider.model_patcher, profile.dims)   # LoRAs: their RAM and one block's VRAM
    if patches.present and request.patch_host_bytes == 0:
        request = dataclasses.replace(request, patch_host_bytes=patches.host_bytes)
    return CheckedPass(profile, geometry, tuple(row_spans), request, evidence, patches)


def measure_speeds(checked: CheckedPass, load_device, timing: SpeedTiming | None = None, *,
                   measure: bool = True) -> CheckedPass:
    """The attention speed timing, a step of its own: `checked` with the exact backends' speeds on `load_device` in
    its request (timed once per device, torch and CUDA version and code, then read from the disk cache). The timing
    is GPU work (CUDA events, then the allocator's cache emptied): the Sampler runs it after the residency boundary.
    A request that carries speeds keeps them.

    timing: the timing (None: `host.attention_speeds.attention_speeds`); measure: False reads the disk cache only,
    timing nothing (a forecast's plan)."""
    if checked.request.attention_speeds is not None:
        return checked
    speeds = (attention_speeds if timing is None else timing)(
        load_device, attention_mode=checked.request.attention_mode, head_dim=checked.profile.dims.head_dim,
        seq_len=checked.geometry.seq_len, measure=measure)
    return dataclasses.replace(checked, request=dataclasses.replace(checked.request, attention_speeds=speeds))


def plan_pass(checked: CheckedPass, device: DeviceProfile) -> ExecutionPlan:
    """The plan of a checked pass on `device` (the planner's one call for the pass), with the VRAM the model's LoRAs
    take while a block is cast held (`PatchBytes.on_device`, as the CLI plans it)."""
    device = checked.patches.on_device(device, checked.profile.dims)
    return reconcile_block_sparse(make_plan(checked.profile, device, checked.geometry, checked.request),
                                  checked.block_sparse)


def plan_for(guider, latent, sigmas, request: PlanRequest,
             device_profile: DeviceProfile | Callable[[], DeviceProfile] | None = None, keyframes: tuple | None = None,
             stage: StagePass | None = None):
    """Check and plan one pass without running it (a segmented job's forecast); returns (plan, row_spans).
    Whether the plan can run is `job.preflight.check_plan_runs(plan)`. Nothing is timed: the plan orders the exact
    backends by the speeds the disk cache holds for the pass (`measure_speeds(measure=False)`), else the static rank."""
    checked = measure_speeds(check_pass(guider, latent, sigmas, request, keyframes, stage),
                             guider.model_patcher.load_device, measure=False)
    if isinstance(device_profile, DeviceProfile):
        device = device_profile
    else:
        device = device_profile() if device_profile is not None else load_device_profile(guider.model_patcher.load_device)
    return plan_pass(checked, device), list(checked.row_spans)


def with_pins_available(device: DeviceProfile) -> DeviceProfile:
    """`device` with ComfyUI's pinned weight copies counted as available host RAM: they are the weights' own cache,
    which the host-RAM plan's pin budget re-divides (as comfy-aimdo's reclaimable weight pages count as free VRAM),
    so that a second run in the same session plans as the first did instead of shrinking to what the first pinned."""
    available = device.ram_available_bytes + (pinned_ram_bytes() or 0)
    if device.ram_total_bytes:
        available = min(available, device.ram_total_bytes)
    return dataclasses.replace(device, ram_available_bytes=available)


def load_device_profile(load_device, measured: MemorySnapshot | None = None) -> DeviceProfile:
    """The load device's profile; on a CPU run (`--cpu`) the budget is the available RAM.

    measured: the residency boundary's reading after it ran (`BoundaryReport.after`): where it has the device's
    total and free memory, the plan reads those (the memory the report shows) instead of asking torch again.
    Under dynamic VRAM, weight pages comfy-aimdo can evict on demand count as free (ComfyUI's own rule for a
    dynamic model's free memory): weights an earlier run left resident do not shrink the plan.
    """
    device = DeviceProfile.detect(load_device if torch.device(load_device).type == "cuda" else None,
                                  dynamic_vram=dynamic_vram_active())
    if measured is not None and measured.total_bytes is not None and measured.free_bytes is not None:
        device = dataclasses.replace(device, vram_total_bytes=int(measured.total_bytes),
                                     vram_free_bytes=int(measured.free_bytes),
                                     allocator_reserved_bytes=max(0, int(measured.cached_bytes)))
    if torch.device(load_device).type == "cuda":
        reclaimable = vbar_reclaimable_bytes(load_device) or 0
        return dataclasses.replace(with_pins_available(device), vram_free_bytes=min(
            device.vram_total_bytes, device.vram_free_bytes + reclaimable))
    if device.usable_vram_bytes > 0:
        return device
    ram = device.ram_available_bytes
    return dataclasses.replace(device, name="cpu (available RAM as the budget)", vram_total_bytes=ram,
                               vram_free_bytes=ram, allocator_reserved_bytes=0)



__all__ = ["CheckedPass", "SpeedTiming", "check_pass", "load_device_profile", "longest_row_spans", "measure_speeds",
           "plan_for", "plan_pass"]
