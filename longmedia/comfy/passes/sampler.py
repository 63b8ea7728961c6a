"""Running one pass, the Sampler's ComfyUI side: checks (`pass_plan`) -> residency boundary -> attention speed
timing (`pass_plan.measure_speeds`) -> plan -> patched copy of the guider (`clone_install`) -> ComfyUI's own
sampling -> report.

The checks do no GPU work. The residency boundary runs before the speed timing times anything and before the plan
reads the device, so what an earlier run left behind is released before free memory is measured (a seed-only
rerun plans from the same state). The guider is copied
with a cloned ModelPatcher and a cloned `model_options`, and only the copy is patched. An allocation failure
outside the streamed phases is named by the phase it happened in; the output is checked to be finite.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...execution.linear import WeightAccess
from ...execution.probes import NO_OBSERVER, Observer, ProbeReport
from ...h3.profiles import DeviceProfile
from ...job.preflight import StagePass, check_plan_runs
from ...planning.around_blocks import stock_pass_bytes
from ...planning.patches import PatchBytes
from ...planning.step_cache import EasyCacheBound
from ...planning.types import ExecutionPlan, PlanRequest
from ...planning.whole_job import JobPlan, plan_job
from ...report.memory import RamFacts, Reader
from ...report.oom import PHASES, LongMediaOOM, is_oom, report_for
from ...report.run_report import PredictedPeaks, RunReport
from ...report.segmented import SegmentedReport
from ..diagnostics_env import probes_from_env
from ..host.features import host_features
from ..host.memory import comfy_reading
from ..host.ram import host_ram_guard
from ..patching.clone_install import RunState, install_on_clone
from ..patching.residency import residency_boundary
from . import sampler_inputs
from .model_step_cache import ModelStepCache, model_step_cache
from .oom_phase import traced_phase
from .pass_plan import SpeedTiming, check_pass, load_device_profile, measure_speeds, plan_pass


@dataclass(frozen=True)
class SamplingResult:
    """What the Sampler, Hi-Res and Refiner return: the output and denoised latents and the run's report.

    plan: the pass's plan (None for a segmented job: each pass's plan is in its report);
    sigmas: the schedule a Hi-Res or Refiner pass ran (None for the Sampler)."""

    output: dict
    denoised: dict
    report: RunReport | SegmentedReport
    plan: ExecutionPlan | None = None
    sigmas: torch.Tensor | None = None


def prompt_seq_lens(guider, latent, plan: ExecutionPlan) -> tuple[int, ...]:
    """Packed rows of the positive and the negative prompt's calls (their text lengths differ, and so may the
    kernels Triton compiles for them); the plan's own length where a prompt's table cannot be read."""
    lengths = {plan.geometry.seq_len}
    video, audio = sampler_inputs.av_latents(latent)
    for name in ("positive", "negative") if sampler_inputs.runs_negative(guider) else ("positive",):
        conds = (getattr(guider, "original_conds", {}) or {}).get(name)
        if conds:
            table = sampler_inputs.stock_row_spans(video, audio, [[conds[0].get("cross_attn"), conds[0]]])
            lengths.add(int(table[-1][1]))
    return tuple(sorted(lengths))


def run_sampler(noise, guider, sampler, sigmas, latent, request: PlanRequest,
                device_profile: DeviceProfile | Callable[[], DeviceProfile] | None = None, *,
                memory_reader: Reader | None = None, observer: Observer | None = None,
                weights: WeightAccess | None = None, stage: StagePass | None = None,
                devices: str | None = None, ram_facts: RamFacts | None = None,
                read_ahead_blocks: int | None = None, speed_timing: SpeedTiming | None = None,
                whole: bool = True) -> SamplingResult:
    """Check every input, run the residency boundary, measure the attention speeds, plan from the memory measured
    after the boundary, patch a copy of `guider`, and sample exactly as SamplerCustomAdvanced does.

    device_profile: a fixed profile (a card to plan for: planned before the boundary with the speeds the disk cache
    holds and refused there if it cannot run; planned again after the timing only where it timed new speeds), a timing
    called after the boundary, or None to plan from the boundary's own reading of the load device after it ran.
    memory_reader: how the boundary reads device memory (`residency.Reader`, device -> MemorySnapshot); None reads
    torch and comfy-aimdo. Benchmarks and tests hand in their own readings here. observer: diagnostics of the
    streamed phases and held weights (`execution/probes.py`); None: the probes LONGMEDIA_PROBES names, usually none.
    weights: how the streamed phases hold their weights; None: ComfyUI's cast context (`block_patch.comfy_weights`).
    stage: a Hi-Res or Refiner pass (`job.preflight.StagePass`): its refusals name that node's inputs.
    devices: the Sampler's device list for sequence parallelism ("gpu:0,gpu:1"; `sp.devices`); None or empty: one
    device. The workers live for this run (`sp.ranks`): started after the residency boundary, ended before it
    returns or raises; the plan is made again once they have measured their link (the cost model reads it).
    ram_facts: how host RAM is read and ComfyUI's pins freed (`host_ram.RamFacts`; None: ComfyUI's own); tests stand in
    a small machine here. read_ahead_blocks: None reads the next blocks' weights ahead from disk where the plan asks
    for it (not by default: measured slower); N the next N blocks (the bench's controls); 0 never.
    speed_timing: the attention speed timing, run after the boundary where the request carries no speeds
    (`pass_plan.measure_speeds`; None: `host.attention_speeds.attention_speeds`).
    whole: this pass is the whole job (the Sampler's one pass): its report carries the whole-job plan (`whole_job`);
    a segmented job's passes say False. A Hi-Res or Refiner pass (`stage`) carries none."""
    from ..sp.run import sp_request, start_ranks

    check_runs = stage.check_runs if stage is not None else check_plan_runs
    checked = check_pass(guider, latent, sigmas, request, stage=stage)  # every input checked first: no GPU work
    load_device = guider.model_patcher.load_device
    sp_checked, sp_devices = sp_request(checked.request, devices, load_device)
    checked = dataclasses.replace(checked, request=sp_checked)
    row_spans = list(checked.row_spans)
    known = None
    if isinstance(device_profile, DeviceProfile):  # a card to plan for: planned with the speeds the disk cache holds
        known = measure_speeds(checked, load_device, speed_timing, measure=False)  # (nothing timed), refused here
        plan = plan_pass(known, device_profile)
        runs = check_runs(plan)
        required = plan.memory.predicted_peak_bytes + plan.activation_reserve_bytes
    else:  # planned once, after the boundary, from the memory it leaves
        plan, required = None, stock_pass_bytes(checked.profile, checked.geometry)
    # release what an earlier run (or seed) left behind, then plan from the memory measured after it
    boundary = residency_boundary(device=load_device, reader=memory_reader, keep=guider.model_patcher,
                                  memory_required=required)
    checked = measure_speeds(checked, load_device, speed_timing)  # GPU work (timing), after the boundary
    if plan is None or checked.request.attention_speeds != known.request.attention_speeds:  # timed what it lacked
        device = device_profile if isinstance(device_profile, DeviceProfile) else (
            device_profile() if device_profile is not None else load_device_profile(load_device, boundary.after))
        plan = plan_pass(checked, device)
        runs = check_runs(plan)
    ranks, clean = None, False
    if sp_devices:
        ranks = start_ranks(sp_devices, guider.model_patcher, plan)
    try:
        if ranks is not None:  # the link as measured on the ranks' own group: the plan's cost model reads it
            checked = dataclasses.replace(checked, request=dataclasses.replace(
                checked.request, sp_link_gbps=max(ranks.link_gbps, 0.001), sp_link_measured=True))
            plan = plan_pass(checked, plan.device)
        speeds = checked.request.attention_speeds  # probe_s: 0 when the disk cache served the timings
        cache = model_step_cache(guider, sigmas) if whole and stage is None else ModelStepCache()
        job = whole_job(plan, sigmas, guider, checked.patches, cache.bound) if whole and stage is None else None
        runs = (*runs, cache.note) if cache.note else runs  # a step cache the whole-job plan does not count
        result = _sample(noise, guider, sampler, sigmas, latent, plan, row_spans, boundary, runs, observer, weights,
                         ranks, probe_s=speeds.probe_s if speeds is not None else 0.0, ram_facts=ram_facts,
                         read_ahead_blocks=read_ahead_blocks, job=job)
        clean = True
    except RuntimeError as error:  # named: a collective failing because a worker died mid-run
        if ranks is not None and ranks.settled_failure(error):
            raise ranks.failure(error) from error
        raise
    finally:
        if ranks is not None:
            ranks.close(clean=clean)
    return result


def whole_job(plan: ExecutionPlan, sigmas, guider, patches: PatchBytes,
              easycache: EasyCacheBound | None = None) -> JobPlan:
    """The whole job from this pass's plan (`plan_job`, which `python -m longmedia plan` and Setup's preflight call):
    its sampler steps, the guider's cfg (1 without one), the model's LoRAs and stock EasyCache's bound on these
    sigmas (`model_step_cache`: its skippable calls planned as no DiT time, as `plan --easycache` plans them); the
    Sampler's report carries its verdict (fits, what streams from disk per model call, or which stage does not fit)."""
    cfg = sampler_inputs.guider_cfg(guider)
    return plan_job(plan, steps=max(1, int(sigmas.shape[-1]) - 1), cfg=1.0 if cfg is None else cfg, patches=patches,
                    easycache=easycache)


def _sample(noise, guider, sampler, sigmas, latent, plan, row_spans, boundary, runs, observer, weights, ranks, *,
            probe_s: float = 0.0, ram_facts: RamFacts | None = None, read_ahead_blocks: int | None = None,
            job: JobPlan | None = None):
    import comfy.model_management
    import comfy.model_patcher
    import comfy.sample
    import comfy.utils

    from .previews import comfy_preview_callback

    g = copy.copy(guider)
    g.model_patcher = guider.model_patcher.clone()
    g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
    run = RunState(plan, torch.device(g.model_patcher.load_device), g.model_patcher)
    run.boundaries.append((f"before: {boundary.before}", *boundary.lines, f"after: {boundary.after}"))
    run.notes.extend(runs)  # a chosen mode that does not fit runs, with its warning
    if observer is None:
        observer = probes_from_env()
    host = host_ram_guard(plan, g.model_patcher.model.diffusion_model.blocks, ram_facts,
                          read_ahead_blocks=read_ahead_blocks)
    streamed = install_on_clone(g, plan, run, row_spans, observer or NO_OBSERVER, weights,
                                prompt_seq_lens(guider, latent, plan) if run.cuda else (), ranks,
                                block_start=host.on_block if host.hooks_blocks else None)
    host.start()  # ComfyUI's pins within the plan's budget before the pass

    samples = comfy.sample.fix_empty_latent_channels(g.model_patcher, latent["samples"],
                                                     latent.get("downscale_ratio_spacial", None),
                                                     latent.get("downscale_ratio_temporal", None))
    x0_output: dict = {}
    callback = comfy_preview_callback(g.model_patcher, sigmas.shape[-1] - 1, x0_output)

    def counted(step: int, x0, x, total_steps: int):
        run.sampler_step = step + 1  # model calls after this belong to the next step
        return callback(step, x0, x, total_steps)
    try:
        out_samples = g.sample(noise.generate_noise(latent), samples, sampler, sigmas,
                               denoise_mask=latent.get("noise_mask"), callback=counted,
                               disable_pbar=not comfy.utils.PROGRESS_BAR_ENABLED, seed=noise.seed)
    except LongMediaOOM:
        raise
    except RuntimeError as error:  # named: an allocation failure (GPU or CPU) outside the streamed stages
        if not is_oom(error):
            raise
        model = g.model_patcher.model.diffusion_model
        traced = traced_phase(error.__traceback__, model.blocks, model.final_layer)
        where, block = (traced.phase, traced.block_index) if traced else (_oom_phase(run.phase), None)
        raise LongMediaOOM(report_for(where, error, context=run.oom_context(), reader=comfy_reading(),
                                      block_index=block)) from error
    finally:  # the read-ahead thread ends with the pass, whatever ended it (Cancel, an error)
        host_report = host.finish(len(run.steps))
    if ranks is not None:
        line = ranks.link_line(plan.model.dims.num_blocks, len(run.steps))
        if line:
            run.notes.append(line)
    # the latent leaves the device into host RAM that ComfyUI's pins may hold: room first
    host.make_room(latent_bytes(out_samples), "the sampled latent moves to host RAM")
    out_samples = out_samples.to(comfy.model_management.intermediate_device())
    host_report = dataclasses.replace(host_report, events=tuple(host.events), notes=tuple(host.notes))
    finite = all_finite(out_samples)
    output, denoised = _outputs(g, latent, out_samples, x0_output)
    report = RunReport(plan=plan, attention_backend=plan.attention.backend, streamed_blocks=streamed,
                       boundaries=tuple(run.boundaries), steps=tuple(run.steps),
                       block_peak_bytes=tuple(run.block_peaks.get(i, 0) for i in sorted(run.block_peaks)),
                       guard_events=run.guards.report().lines, preview=callback.failure.summary
                       if callback.failure else "ok", manual_fields=plan.manual_fields, notes=tuple(run.notes),
                       predicted=PredictedPeaks.of_plan(plan), output_finite=finite,
                       probes=ProbeReport(observer.lines()) if observer is not None else None,
                       host=host_features(), warmup_s=run.warmup_s, sampler_steps=int(sigmas.shape[-1] - 1),
                       probe_s=probe_s, host_ram=host_report, cfg=sampler_inputs.guider_cfg(guider), whole_job=job)
    if not finite:
        logging.warning("LongMedia: %s", report.output_warning)
    return SamplingResult(output, denoised, report, plan)


def latent_bytes(samples: torch.Tensor) -> int:
    """Bytes of a latent (H3's video+audio NestedTensor, or a plain tensor)."""
    parts = samples.unbind() if getattr(samples, "is_nested", False) else (samples,)
    return sum(p.numel() * p.element_size() for p in parts)


def all_finite(samples: torch.Tensor) -> bool:
    """Whether a latent (H3's video+audio NestedTensor, or a plain tensor) holds only finite values."""
    parts = samples.unbind() if getattr(samples, "is_nested", False) else (samples,)
    return all(bool(torch.isfinite(p).all()) for p in parts)


def _oom_phase(current: str) -> str:
    return current if current in PHASES else "before_block_0"


def _outputs(g, latent: dict, samples, x0_output: dict) -> tuple[dict, dict]:
    import comfy.nested_tensor
    import comfy.utils

    out = {k: v for k, v in latent.items() if k not in ("downscale_ratio_spacial", "downscale_ratio_temporal")}
    out["samples"] = samples
    if "x0" not in x0_output:
        return out, out
    x0 = x0_output["x0"]
    if samples.is_nested and not x0.is_nested:
        x0 = comfy.nested_tensor.NestedTensor(comfy.utils.unpack_latents(x0, [x.shape for x in samples.unbind()]))
    denoised = dict(out)
    denoised["samples"] = g.model_patcher.model.process_latent_out(x0.cpu())
    return out, denoised


__all__ = ["SamplingResult", "all_finite", "prompt_seq_lens", "run_sampler", "whole_job"]
