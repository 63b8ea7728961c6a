"""Long jobs as fixed segments through the Sampler core, assembled into one continuous AV latent.

Every pass is a normal `run_sampler` call (so the residency boundary runs before each one) on its
slice of the job latent. A later pass gets the previous passes' final latents of its context frames
as an H3 guide — a `minimax_keyframes` entry at frame 0 with the video latents and the audio latents
of the same stretch, exactly what MiniMaxH3AddGuide stores for encoded pixels and audio — set on a
copy of the guider's conditioning. Each pass has its own seed (the noise's seed + index unless
pinned) and, when Setup's job carries per-segment prompts, its own prompt's text on the positive
conditioning (the guides stay). The new content of every pass (context dropped) goes into one video + audio
latent of the job's exact length, so a single VAE decode gives the clip. With a `RetakeCache` a pass whose key
(`segment_keys`, chained by `segments.retakes`) is cached is reused instead of sampled. ComfyUI is imported
inside the functions.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import time

import torch

from ...errors import LongMediaInputError
from ...execution.linear import WeightAccess
from ...execution.probes import Observer
from ...h3.profiles import DeviceProfile
from ...job.preflight import check_latent_matches_job, check_latent_segments, check_plan_runs
from ...planning.types import PlanRequest
from ...report.memory import MemorySnapshot, Reader, read_memory
from ...report.oom import phase
from ...report.segmented import SegmentedReport, SegmentForecast, SegmentRecord
from ...segments import resume, seams
from ...segments.prompts import SegmentPrompts, short_prompt
from ...segments.retakes import RetakeCache
from ...segments.timeline import SegmentPlan
from ..host.memory import comfy_reading
from ..retakes import directing
from . import sampler as comfy_sampler
from . import sampler_inputs
from .pass_plan import plan_for

WRAPPER_KEY = "longmedia_segmented"


class _Probe:
    """What the wrappers of one pass measured (per pass, never module level)."""

    def __init__(self, device) -> None:
        self.baseline = MemorySnapshot(str(device), None, None, None, None)
        self.seconds = 0.0


def _conditioning(guider) -> dict:
    conds = getattr(guider, "original_conds", None)
    if not isinstance(conds, dict) or not conds.get("positive"):
        raise LongMediaInputError("guider", "no conditioning", "a guider with positive conditioning set",
                                  "Connect positive conditioning to the guider.")
    return conds


def _routed(plan: SegmentPlan, conds: dict) -> dict:
    """{cond key: [per entry: per segment keyframes]}: the user's guides, moved into their passes."""
    return {key: [seams.route_keyframes(plan, c.get("minimax_keyframes")) for c in entries]
            for key, entries in conds.items()}


def _segment_conds(conds: dict, routed: dict, index: int, context: dict | None, context_keys, text) -> dict:
    """This pass's conditioning: its guides (the context first), and its own prompt's text (`text`) on positive."""
    new = {}
    for key, entries in conds.items():
        new[key] = []
        for j, c in enumerate(entries):
            frames = ([context] if context is not None and key in context_keys else []) + list(routed[key][j][index])
            entry = {k: v for k, v in c.items() if k != "minimax_keyframes"}
            if text is not None and key == "positive" and j == 0:
                entry = directing.with_text(entry, text)
            if frames:
                entry["minimax_keyframes"] = frames
            new[key].append(entry)
    return new


def _segment_guider(guider, new: dict, probe, progress, reader: Reader = read_memory):
    """A copy of `guider` with this pass's conditioning `new`, with our measuring wrappers."""
    import comfy.model_patcher
    import comfy.patcher_extension as ext

    g = copy.copy(guider)
    g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
    g.original_conds = new

    def prepare_sampling(executor, model, *args, **kwargs):
        out = executor(model, *args, **kwargs)
        probe.baseline = reader(model.load_device)   # after the boundary and the model load
        return out

    def sampler_sample(executor, model_wrap, sigmas, extra_args, callback, *args, **kwargs):
        def step_callback(step, x0, x, total_steps):
            # the pass's callback (previews, and its progress bar) sees the job's overall step, so the node
            # shows one bar that rises over every pass instead of one bar per pass beside an overall one
            if callback is None:
                return None
            overall_step, overall_total = progress(step)
            return callback(overall_step, x0, x, overall_total)

        device = torch.device(g.model_patcher.load_device)
        start = time.perf_counter()
        out = executor(model_wrap, sigmas, extra_args, step_callback, *args, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        probe.seconds = time.perf_counter() - start
        return out

    ext.add_wrapper_with_key(ext.WrappersMP.PREPARE_SAMPLING, WRAPPER_KEY, prepare_sampling, g.model_options,
                             is_model_options=True)
    ext.add_wrapper_with_key(ext.WrappersMP.SAMPLER_SAMPLE, WRAPPER_KEY, sampler_sample, g.model_options,
                             is_model_options=True)
    return g


def _job_latent(fn, *args):
    """fn(*args) on the job's latents in RAM; an allocation failure becomes the OOM report (phase job_latent)."""
    with phase("job_latent", reader=comfy_reading()):
        return fn(*args)


def _overall_step(step: int, *, offset: int, total: int) -> tuple[int, int]:
    """A pass's step as (the job's step, the job's step count): what the pass's sampler callback reports."""
    return min(offset + step, total - 1), total


def _show_pass(seg, count: int, reused: bool = False) -> None:
    """The pass now running, as the node's progress text (beside its one overall bar) when a server runs it."""
    from comfy_execution.utils import get_executing_context

    context = get_executing_context()
    if context is None:   # called in-process, outside a prompt
        return
    from server import PromptServer

    server = getattr(PromptServer, "instance", None)
    if server is not None:
        server.send_progress_text(f"pass {seg.index + 1} of {count}: {seg.pass_frames} frames "
                                  f"({seg.context_frames} context){', reused (retake cache)' if reused else ''}",
                                  context.node_id)


def _seeded(noise, seed: int):
    n = copy.copy(noise)
    n.seed = seed
    return n


def _check_inputs(guider, sigmas, latent, plan) -> tuple[torch.Tensor, torch.Tensor]:
    if not all(hasattr(plan, name) for name in ("segments", "count", "video_latent_frames", "audio_latent_frames")):
        raise LongMediaInputError("plan", type(plan).__name__, "a SegmentPlan (LongMedia Setup's job.segments)",
                                  "Connect the job from LongMedia Setup.")
    sampler_inputs.h3_diffusion_model(guider)
    sampler_inputs.check_sigmas(sigmas)
    video, audio = sampler_inputs.av_latents(latent)
    check_latent_matches_job(plan.pixel_frames, tuple(video.shape), tuple(audio.shape))
    if latent.get("noise_mask") is not None:
        raise LongMediaInputError("latent", "a latent with a noise_mask", "a latent without a noise mask "
                                  "for a segmented job", "Remove the mask (SetLatentNoiseMask), or run the job as "
                                  "one pass without segments.")
    return video, audio


def forecast_segments(guider, sigmas, latent, request: PlanRequest, plan: SegmentPlan,
                      device_profile: DeviceProfile | None = None, prompts: SegmentPrompts | None = None
                      ) -> tuple[SegmentForecast, ...]:
    """Plan every pass before the run: its context guide counted, the user's own guides left out, and the longest
    segment prompt's text rows (when the job has per-segment prompts)."""
    import comfy.nested_tensor

    guider = directing.longest_prompt(guider, prompts)
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
    import comfy.model_management
    import comfy.nested_tensor

    video, audio = _check_inputs(guider, sigmas, latent, plan)
    conds = _conditioning(guider)
    directing.check_prompts(prompts, conds, plan)
    seed_list = seams.segment_seeds(plan.count, int(getattr(noise, "seed", 0) or 0), seeds)
    forecast = forecast_segments(guider, sigmas, latent, request, plan, device_profile, prompts)
    for row in forecast:  # listed before the first pass runs
        logging.info("LongMedia plan: %s", row.line())
    routed = _routed(plan, conds)
    context_keys = tuple(conds)
    steps = int(sigmas.shape[-1]) - 1
    total = plan.count * steps
    extra = {k: v for k, v in latent.items() if k not in ("samples", "noise_mask")}
    todo = resume.check_passes(plan, passes, done is not None)
    chain = directing.job_chain(retakes, guider, sampler, sigmas, request, latent, noise, plan, context_keys,
                                devices)
    result = denoised = None
    if done is not None:
        result, denoised = _job_latent(resume.resumed, plan, done)
    records = []
    for seg in plan.segments:
        if seg.index not in todo:   # run before (its output is in `done`) or later
            continue
        comfy.model_management.throw_exception_if_processing_interrupted()
        offset = seg.index * steps
        context = seams.context_keyframe(seg, *result) if seg.index else None
        text = prompts.conditioning[seg.index] if prompts is not None else None
        new_conds = _segment_conds(conds, routed, seg.index, context, context_keys, text)
        pass_v, pass_a = _job_latent(seams.pass_latents, seg, video, audio)
        key, pins = directing.segment_key(chain, seg, seed_list[seg.index], (pass_v, pass_a), new_conds)
        hit = chain.lookup(seg.index, key)
        if hit is not None:
            out_v, out_a, den_v, den_a = hit.tensors
            record = dataclasses.replace(hit.record, source="reused", sample_seconds=0.0)
            _show_pass(seg, plan.count, reused=True)
        else:
            probe = _Probe(guider.model_patcher.load_device)
            _show_pass(seg, plan.count)
            g = _segment_guider(guider, new_conds, probe, functools.partial(_overall_step, offset=offset, total=total),
                                memory_reader if memory_reader is not None else read_memory)
            seg_latent = dict(extra, samples=comfy.nested_tensor.NestedTensor((pass_v, pass_a)))
            run = comfy_sampler.run_sampler(_seeded(noise, seed_list[seg.index]), g, sampler, sigmas, seg_latent,
                                            request, device_profile, memory_reader=memory_reader,
                                            observer=observer, weights=weights, devices=devices, whole=False)
            out_v, out_a = run.output["samples"].unbind()
            den_v, den_a = run.denoised["samples"].unbind()
            record = SegmentRecord(seg.index, seed_list[seg.index], seg.pass_frames, seg.context_frames,
                                   seg.video_latent_range, seg.audio_range, steps, probe.seconds, probe.baseline,
                                   run.report, prompt=prompts.texts[seg.index] if prompts is not None else None)
            chain.store(key, (out_v, out_a, den_v, den_a), record, pins)
            del run
        if result is None:
            result, denoised = (_job_latent(seams.empty_result, plan, out_v, out_a),
                                _job_latent(seams.empty_result, plan, den_v, den_a))
        seams.place(seg, result, out_v, out_a)
        seams.place(seg, denoised, den_v, den_a)
        records.append(record)
        del out_v, out_a, den_v, den_a
    moved = [sum(len(per_segment[i]) for entries in routed.values() for per_segment in entries)
             for i in range(plan.count)]
    notes = tuple(f"user guides moved to segment {i}: {n}" for i, n in enumerate(moved) if n)
    notes += tuple(f"plan: {row.line()}: it ran because memory_mode={request.memory_mode} was chosen"
                   for row in forecast if not row.fits)
    report = SegmentedReport(segment_plan=plan, forecast=forecast, segments=tuple(records),
                             context_on=context_keys, notes=notes, retakes=chain.report(),
                             prompts=tuple(short_prompt(t) for t in prompts.texts) if prompts is not None else None)
    output = dict(extra, samples=comfy.nested_tensor.NestedTensor(result))
    den = dict(extra, samples=comfy.nested_tensor.NestedTensor(denoised))
    for d in (output, den):
        d.pop("downscale_ratio_spacial", None)
        d.pop("downscale_ratio_temporal", None)
    return comfy_sampler.SamplingResult(output, den, report)


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
        noise = _seeded(noise, seed)
    result = comfy_sampler.run_sampler(noise, guider, sampler, sigmas, latent, request, devices=devices)
    if retakes is None:
        return result
    note = ("retakes: not used: this job is one pass (Setup's segment_seconds 0), and retakes keep finished "
            "segments of a segmented job")
    return dataclasses.replace(result, report=dataclasses.replace(result.report, notes=result.report.notes + (note,)))
