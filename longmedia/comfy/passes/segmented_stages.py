"""Hi-Res and Refiner over a segmented job: one planned pass per segment, through the Sampler's pass loop (`pass_loop`).

Every pass is a `run_sampler` call (its residency boundary, then its own plan from the memory measured after it)
on its segment's slice of the job latent, brought to the stage's size by the stage's `prepare` (Hi-Res: the
upscale; Refiner: nothing). A later pass continues its neighbour: its context frames are the neighbour's final
latents of this stage (already at the new size), given both as the pass's starting latent there (so the
re-noised start of the overlap is the neighbour's, not a second upscale of the low-resolution latent) and as
the H3 context guide the Sampler's passes get (`seams.context_keyframe`), so the join is the Sampler's join at
the new size. The user's own guides move into their pass (`seams.route_keyframes`). Seeds follow
`seams.segment_seeds`. What the stage does differently reaches the loop as `StageLatents` (`prepare`, `keep_audio`)
and `keep_own_positive`. ComfyUI is imported inside the functions.
"""

from __future__ import annotations

import functools

import torch

from ...job.preflight import StagePass
from ...planning.types import PlanRequest
from ...report.memory import Reader
from ...report.segmented import SegmentForecast
from ...segments.prompts import SegmentPrompts
from ...segments.seam_steps import seam_steps
from ...segments.timeline import SegmentPlan
from . import pass_loop, pass_prompts, sampler_inputs
from . import sampler as comfy_sampler
from .pass_plan import plan_for


def _nested(video: torch.Tensor, audio: torch.Tensor):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio))


def forecast_stage(guider, sigmas, plan: SegmentPlan, size: tuple[int, int], request: PlanRequest,
                   stage: StagePass, channels: tuple[int, int] = (24, 32),
                   device_profile=None, prompts: SegmentPrompts | None = None) -> tuple[SegmentForecast, ...]:
    """Every pass planned before the first runs, at the stage's size (shapes only: nothing is upscaled here), for
    the longest segment prompt's text rows when the job has per-segment prompts."""
    guider = pass_prompts.longest_prompt(guider, prompts)
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
                        stage: StagePass, size: tuple[int, int], prepare: pass_loop.Prepare,
                        run_pass: pass_loop.RunPass, keep_audio: bool, memory_reader: Reader | None = None,
                        device_profile=None, passes: tuple[int, int] | None = None, done=None,
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
    def forecast(followed: SegmentPrompts | None) -> tuple[SegmentForecast, ...]:
        video, audio = sampler_inputs.av_latents(latent)
        return forecast_stage(guider, sigmas, plan, size, request, stage, (video.shape[1], audio.shape[1]),
                              device_profile, followed)

    run = pass_loop.run_passes(noise, guider, sampler, sigmas, latent, request, plan, forecast=forecast,
                               run_pass=functools.partial(run_pass, stage=stage),
                               log_name=f"LongMedia {stage.node}",
                               stage=pass_loop.StageLatents(size, prepare, keep_audio), keep_own_positive=True,
                               prompts=prompts, memory_reader=memory_reader, device_profile=device_profile,
                               passes=passes, done=done)
    todo = run.ran
    ran = f"passes {todo.start}..{todo.stop - 1} of {plan.count}" if len(todo) < plan.count else f"{plan.count} passes"
    notes = [f"{stage.node}: {ran}, one per segment of the job (each planned after its boundary)"]
    if run.own_positive:
        notes.append(f"{stage.node}: the guider's own positive prompt on every pass, not Setup's per-segment prompts "
                     "(connect Setup's positive to the guider to follow them)")
    if run.joins:
        notes.append("context of each later pass: its neighbour's final latents at this size (starting latent and "
                     f"guide); before that, the largest difference from this pass's own resize was "
                     f"{max(run.joins):.3g}")
    if run.assembled:
        notes.append(seam_steps(plan, *run.output).line())
    return run.sampling_result(tuple(notes), sigmas)
