"""The Sampler's long job: Setup's segmented job as fixed passes through the one pass loop (`pass_loop`), or one pass.

Every pass is a `run_sampler` call on its slice of the job latent, a later pass guided by the previous passes' final
latents of its context frames; each pass has its own seed (the noise's seed + index unless pinned) and, when Setup's
job carries per-segment prompts, its own prompt's text. With a `RetakeCache` a pass whose key (`segment_keys`,
chained by `segments.retakes`) is cached is reused instead of sampled. ComfyUI is imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import functools

from ...errors import LongMediaInputError
from ...execution.linear import WeightAccess
from ...execution.probes import Observer
from ...h3.profiles import DeviceProfile
from ...job.preflight import check_latent_segments, check_plan_runs
from ...planning.types import PlanRequest
from ...report.memory import Reader
from ...report.segmented import SegmentForecast
from ...segments import seams
from ...segments.prompts import SegmentPrompts
from ...segments.retakes import RetakeCache
from ...segments.timeline import SegmentPlan
from . import pass_loop, pass_prompts, sampler_inputs
from . import sampler as comfy_sampler
from .pass_plan import plan_for


def forecast_segments(guider, sigmas, latent, request: PlanRequest, plan: SegmentPlan,
                      device_profile: DeviceProfile | None = None, prompts: SegmentPrompts | None = None
                      ) -> tuple[SegmentForecast, ...]:
    """Plan every pass before the run: its context guide counted, the user's own guides left out, and the longest
    segment prompt's text rows (when the job has per-segment prompts)."""
    import comfy.nested_tensor

    guider = pass_prompts.longest_prompt(guider, prompts)
    video, audio = sampler_inputs.av_latents(latent)
    out = []
    for seg in plan.segments:
        pass_v, pass_a = seams.pass_latents(seg, video, audio)
        extra = (seams.context_keyframe(seg, video, audio),) if seg.index else ()
        seg_latent = {"samples": comfy.nested_tensor.NestedTensor((pass_v, pass_a))}
        p, rows = plan_for(guider, seg_latent, sigmas, request, device_profile, keyframes=extra)
        check_plan_runs(p)  # a pass that cannot run is refused before the first pass runs
        out.append(SegmentForecast(seg.index, seg.pass_frames, seg.context_frames, rows[-1][1], p.memory_mode,
                                   p.predicted_peak_bytes, p.fits))
    return tuple(out)


def run_segmented(noise, guider, sampler, sigmas, latent, request: PlanRequest, plan: SegmentPlan, *,
                  seeds: tuple[int | None, ...] | None = None,
                  device_profile: DeviceProfile | None = None, memory_reader: Reader | None = None,
                  observer: Observer | None = None, weights: WeightAccess | None = None,
                  passes: tuple[int, int] | None = None, done=None, prompts: SegmentPrompts | None = None,
                  retakes: RetakeCache | None = None, devices: str | None = None) -> comfy_sampler.SamplingResult:
    """Sample `plan`'s passes one after another and assemble them; returns the job's output and denoised latents.

    `latent`: the whole job's AV latent (video [1,24,T,h,w] + audio [1,32,2,Ta], exactly the plan's length).
    `seeds` pins passes' seeds (None entries, and passes past its end: the noise's seed + index;
    `seams.segment_seeds`).
    Every conditioning list (positive, negative ...) gets the context guide, not only the positive one, so CFG
    guides the prompt and not the continuation.
    `memory_reader`: how every pass's residency boundary and its baseline read device memory (see `run_sampler`).
    `observer`, `weights`: handed to every pass's `run_sampler` (its diagnostics and weight access).
    `passes`: run only passes [first, stop) (None: all); `done`: ((video, audio) output, (video, audio) denoised),
    the job's latents a run of the earlier passes returned, which later passes continue (`segments.resume`).
    `prompts`: Setup's per-segment prompts (`LongMediaJob.prompts`): pass i gets prompt i's text on its positive.
    `retakes`: finished passes by key (the caller owns it); a cached pass is reused, bit for bit, not sampled.
    `devices`: the Sampler's device list, handed to every pass's `run_sampler` (each pass starts and ends its own
    sequence-parallel workers); the forecast plans each pass for one device.
    """
    run = pass_loop.run_passes(
        noise, guider, sampler, sigmas, latent, request, plan,
        forecast=lambda followed: forecast_segments(guider, sigmas, latent, request, plan, device_profile, followed),
        run_pass=functools.partial(comfy_sampler.run_sampler, observer=observer, weights=weights, whole=False),
        seeds=seeds, prompts=prompts, retakes=retakes, devices=devices, memory_reader=memory_reader,
        device_profile=device_profile, passes=passes, done=done)
    notes = tuple(f"user guides moved to segment {i}: {n}" for i, n in enumerate(run.guides_moved) if n)
    return run.sampling_result(notes)


def run_job(noise, guider, sampler, sigmas, latent, request: PlanRequest, job, *, segment_seeds: str = "",
            retakes: RetakeCache | None = None, devices: str | None = None) -> comfy_sampler.SamplingResult:
    """The Sampler node's run: Setup's segmented job pass by pass (its prompts, `segment_seeds`, `retakes`), else
    one pass (`segment_seeds`' one entry, when given, is its seed); `devices`: sequence parallelism (`run_sampler`)."""
    if retakes is not None and not isinstance(retakes, RetakeCache):   # an API prompt can send any value here
        raise LongMediaInputError("retakes", type(retakes).__name__, "the output of a LongMedia Retakes node",
                                  "Connect LongMedia Retakes' retakes output, or leave the input empty.")
    pinned = seams.parse_segment_seeds(segment_seeds)
    if job is not None and job.segmented:
        check_latent_segments(latent, job.segments)
        seams.segment_seeds(job.segments.count, int(getattr(noise, "seed", 0) or 0), pinned, name="segment_seeds")
        return run_segmented(noise, guider, sampler, sigmas, latent, request, job.segments, seeds=pinned,
                             prompts=job.prompts, retakes=retakes, devices=devices)
    seed = seams.segment_seeds(1, int(getattr(noise, "seed", 0) or 0), pinned, name="segment_seeds")[0]
    if pinned and pinned[0] is not None and seed != getattr(noise, "seed", None):
        noise = pass_loop.with_seed(noise, seed)
    result = comfy_sampler.run_sampler(noise, guider, sampler, sigmas, latent, request, devices=devices)
    if retakes is None:
        return result
    note = ("retakes: not used: this job is one pass (Setup's segment_seconds 0), and retakes keep finished "
            "segments of a segmented job")
    return dataclasses.replace(result, report=dataclasses.replace(result.report, notes=result.report.notes + (note,)))
