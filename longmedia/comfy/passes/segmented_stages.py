"""Hi-Res and Refiner over a segmented job: one planned pass per segment, assembled, as the Sampler runs the job.

Every pass is a `run_sampler` call (its residency boundary, then its own plan from the memory measured after it)
on its segment's slice of the job latent, brought to the stage's size by the stage's `prepare` (Hi-Res: the
upscale; Refiner: nothing). A later pass continues its neighbour: its context frames are the neighbour's final
latents of this stage (already at the new size), given both as the pass's starting latent there (so the
re-noised start of the overlap is the neighbour's, not a second upscale of the low-resolution latent) and as
the H3 context guide the Sampler's passes get (`seams.context_keyframe`), so the join is the Sampler's join at
the new size. The user's own guides move into their pass (`seams.route_keyframes`). Seeds follow
`seams.segment_seeds`. ComfyUI is imported inside the functions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch

from ...job.preflight import StagePass
from ...planning.types import PlanRequest
from ...report.memory import Reader, read_memory
from ...report.segmented import SegmentedReport, SegmentForecast, SegmentRecord
from ...segments import resume, seams
from ...segments.prompts import SegmentPrompts, short_prompt
from ...segments.seam_steps import seam_steps
from ...segments.timeline import Segment, SegmentPlan
from ..retakes import directing
from . import sampler as comfy_sampler
from . import segmented
from .pass_plan import plan_for

Prepare = Callable[[Segment, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""(segment, its low-size video slice, its audio slice) -> the pass's video and audio at the stage's size."""
RunPass = Callable[..., comfy_sampler.SamplingResult]
"""run_sampler's signature: (noise, guider, sampler, sigmas, latent, request, **kwargs) -> SamplingResult."""


def _nested(video: torch.Tensor, audio: torch.Tensor):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio))


def forecast_stage(guider, sigmas, plan: SegmentPlan, size: tuple[int, int], request: PlanRequest,
                   stage: StagePass, channels: tuple[int, int] = (24, 32),
                   device_profile=None, prompts: SegmentPrompts | None = None) -> tuple[SegmentForecast, ...]:
    """Every pass planned before the first runs, at the stage's size (shapes only: nothing is upscaled here), for
    the longest segment prompt's text rows when the job has per-segment prompts."""
    guider = directing.longest_prompt(guider, prompts)
    out = []
    for seg in plan.segments:
        video = torch.zeros(1, channels[0], seg.latent_frames, *size)
        audio = torch.zeros(1, channels[1], 2, seg.audio_frames)
        extra = ()
        if seg.index:
            extra = ({"resolved_frame_index": 0, "latent": video[:, :, :seg.context_latent_frames],
                      "audio_latent": audio[..., :seg.context_audio_frames]},)
        p, rows = plan_for(guider, {"samples": _nested(video, audio)}, sigmas, request, device_profile,
                           keyframes=extra, stage=stage)
        stage.check_runs(p)  # a pass that cannot run is refused before the first pass runs
        out.append(SegmentForecast(seg.index, seg.pass_frames, seg.context_frames, rows[-1][1], p.memory_mode,
                                   p.predicted_peak_bytes, p.fits))
    return tuple(out)


def run_stage_segmented(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest, plan: SegmentPlan, *,
                        stage: StagePass, size: tuple[int, int], prepare: Prepare, run_pass: RunPass,
                        keep_audio: bool, memory_reader: Reader | None = None, device_profile=None,
                        passes: tuple[int, int] | None = None, done=None,
                        prompts: SegmentPrompts | None = None) -> comfy_sampler.SamplingResult:
    """Run a Hi-Res or Refiner stage over `plan`'s passes and assemble them into the job's latent at `size`.

    `latent`: the previous stage's whole-job AV latent (exactly the plan's length). `guider`: its guides already
    at `size` (Hi-Res resizes them first). `prepare`: the stage's per-pass resize. `run_pass`: `run_sampler`, or
    the stage's audio-keeping wrapper of it. keep_audio: the audio is the input's (the context audio is then the
    input's too); otherwise each pass's context audio is its neighbour's output, as in the Sampler.
    memory_reader, device_profile: as `run_sampler`'s (tests and benches hand in their own readings or card).
    passes, done: run only passes [first, stop), continuing `done` (the earlier passes' output and denoised
    latents at `size`), as `segmented.run_segmented` does.
    prompts: Setup's per-segment prompts (`LongMediaJob.prompts`): pass i gets prompt i's text on its positive, as
    the Sampler's pass i did, when the guider's positive is Setup's; a guider with a positive of its own keeps it on
    every pass (the report says so).
    """
    import comfy.model_management

    video, audio = segmented._check_inputs(guider, sigmas, latent, plan)
    conds = segmented._conditioning(guider)
    own_prompt = prompts is not None and not directing.is_setup_positive(prompts, conds)
    if own_prompt:  # a stage guided by its own prompt (a detail prompt for the Refiner, say) keeps it on every pass
        prompts = None
    directing.check_prompts(prompts, conds, plan)
    forecast = forecast_stage(guider, sigmas, plan, size, request, stage, (video.shape[1], audio.shape[1]),
                              device_profile, prompts)
    for row in forecast:
        logging.info("LongMedia %s plan: %s", stage.node, row.line())
    routed = segmented._routed(plan, conds)
    seed_list = seams.segment_seeds(plan.count, int(getattr(noise, "seed", 0) or 0))
    context_keys = tuple(conds)
    steps = int(sigmas.shape[-1]) - 1
    total = plan.count * steps
    extra = {k: v for k, v in latent.items() if k not in ("samples", "noise_mask")}
    todo = resume.check_passes(plan, passes, done is not None)
    result = denoised = None
    if done is not None:
        result, denoised = segmented._job_latent(resume.resumed, plan, done, size)
    records, joins = [], []
    for seg in plan.segments:
        if seg.index not in todo:   # run before (its output is in `done`) or later
            continue
        comfy.model_management.throw_exception_if_processing_interrupted()
        low_v, pass_a = segmented._job_latent(seams.pass_latents, seg, video, audio)
        pass_v, pass_a = prepare(seg, low_v, pass_a)
        context = None
        if seg.index:
            context = seams.context_keyframe(seg, *result)
            n, m = seg.context_latent_frames, seg.context_audio_frames
            joins.append(float((pass_v[:, :, :n].float() - context["latent"].float()).abs().max()))
            pass_v[:, :, :n] = context["latent"].to(pass_v.dtype)          # start from the neighbour's latents
            if not keep_audio:
                pass_a[..., :m] = context["audio_latent"].to(pass_a.dtype)
        probe = segmented._Probe(guider.model_patcher.load_device)
        segmented._show_pass(seg, plan.count)
        text = prompts.conditioning[seg.index] if prompts is not None else None
        g = segmented._segment_guider(guider, segmented._segment_conds(conds, routed, seg.index, context,
                                                                        context_keys, text), probe,
                                      functools.partial(segmented._overall_step, offset=seg.index * steps,
                                                        total=total),
                                      memory_reader if memory_reader is not None else read_memory)
        run = run_pass(segmented._seeded(noise, seed_list[seg.index]), g, sampler, sigmas,
                       dict(extra, samples=_nested(pass_v, pass_a)), request, device_profile,
                       memory_reader=memory_reader, stage=stage)
        out_v, out_a = run.output["samples"].unbind()
        den_v, den_a = run.denoised["samples"].unbind()
        if result is None:
            result, denoised = (segmented._job_latent(seams.empty_result, plan, out_v, out_a),
                                segmented._job_latent(seams.empty_result, plan, den_v, den_a))
        seams.place(seg, result, out_v, out_a)
        seams.place(seg, denoised, den_v, den_a)
        records.append(SegmentRecord(seg.index, seed_list[seg.index], seg.pass_frames, seg.context_frames,
                                     seg.video_latent_range, seg.audio_range, steps, probe.seconds, probe.baseline,
                                     run.report, prompt=prompts.texts[seg.index] if prompts is not None else None))
        del run, out_v, out_a, den_v, den_a, pass_v, pass_a, low_v
    ran = f"passes {todo.start}..{todo.stop - 1} of {plan.count}" if len(todo) < plan.count else f"{plan.count} passes"
    notes = [f"{stage.node}: {ran}, one per segment of the job (each planned after its boundary)"]
    if own_prompt:
        notes.append(f"{stage.node}: the guider's own positive prompt on every pass, not Setup's per-segment prompts "
                     "(connect Setup's positive to the guider to follow them)")
    if joins:
        notes.append("context of each later pass: its neighbour's final latents at this size (starting latent and "
                     f"guide); before that, the largest difference from this pass's own resize was "
                     f"{max(joins):.3g}")
    if todo.stop == plan.count and (todo.start == 0 or done is not None):   # the whole job is assembled
        notes.append(seam_steps(plan, *result).line())
    notes += [f"plan: {row.line()}: it ran because memory_mode={request.memory_mode} was chosen"
              for row in forecast if not row.fits]
    report = SegmentedReport(segment_plan=plan, forecast=forecast, segments=tuple(records),
                             context_on=context_keys, notes=tuple(notes),
                             prompts=tuple(short_prompt(t) for t in prompts.texts) if prompts is not None else None)
    extra = {k: v for k, v in extra.items() if k not in ("downscale_ratio_spacial", "downscale_ratio_temporal")}
    return comfy_sampler.SamplingResult(dict(extra, samples=_nested(*result)), dict(extra, samples=_nested(*denoised)),
                                        report, None, sigmas)
