"""The one pass loop of a segmented job: the Sampler's passes, Hi-Res's and the Refiner's, one after another.

Every pass is a `run_sampler` call (or a stage's wrapper of it) on its slice of the job latent, so the residency
boundary runs before each one. A later pass gets the previous passes' final latents of its context frames as an H3
guide — a `minimax_keyframes` entry at frame 0 with the video latents and the audio latents of the same stretch,
exactly what MiniMaxH3AddGuide stores for encoded pixels and audio — set on a copy of the guider's conditioning
(every list, negative too, so CFG guides the prompt and not the continuation). Each pass has its own seed
(`seams.segment_seeds`) and, when Setup's job carries per-segment prompts, its own prompt's text on the positive
conditioning (the guides stay); the user's own guides move into their pass (`seams.route_keyframes`). Cancel is
checked before every pass. The new content of every pass (context dropped) goes into one video + audio latent of
the job's exact length, so a single VAE decode gives the clip.

What a caller does differently arrives as parameters, never through this module's internals: its `forecast` and
`run_pass` (the Sampler's observer and weights, a stage's `StagePass`, bound by the caller); the Sampler's pinned
`seeds` and `retakes` (a pass whose chained key is cached is reused, bit for bit, not sampled); a stage's
`StageLatents` (`prepare`, `keep_audio`) and `keep_own_positive`. ComfyUI is imported inside the functions.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import time
from collections.abc import Callable

import torch

from ...errors import LongMediaInputError
from ...h3.profiles import DeviceProfile
from ...job.preflight import check_latent_matches_job
from ...planning.types import PlanRequest
from ...report.memory import MemorySnapshot, Reader, read_memory
from ...report.oom import phase
from ...report.segmented import SegmentedReport, SegmentForecast, SegmentRecord
from ...segments import resume, seams
from ...segments.prompts import SegmentPrompts, short_prompt
from ...segments.retakes import RetakeCache, RetakeReport
from ...segments.timeline import Segment, SegmentPlan
from ..host.memory import comfy_reading
from ..retakes.chain import job_chain, segment_key
from . import pass_prompts, sampler_inputs
from .sampler import SamplingResult

WRAPPER_KEY = "longmedia_segmented"

Prepare = Callable[[Segment, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""(segment, its video slice of the previous stage's latent, its audio slice) -> the pass's video and audio at the
stage's size."""
RunPass = Callable[..., SamplingResult]
"""run_sampler's signature: (noise, guider, sampler, sigmas, latent, request, device_profile, *, memory_reader,
devices) -> SamplingResult; the caller binds its own keywords (the Sampler's observer and weights, a stage's stage)."""
Forecast = Callable[[SegmentPrompts | None], tuple[SegmentForecast, ...]]
"""(the prompts the passes follow) -> every pass planned before the first runs (refusing one that cannot run)."""


@dataclasses.dataclass(frozen=True)
class StageLatents:
    """How Hi-Res's or the Refiner's passes differ from the Sampler's: each pass's slice of the previous stage's
    latent is brought to `size` by `prepare` (Hi-Res: the upscale; Refiner: nothing), and a later pass starts from
    its neighbour's latents of this stage in its context frames (so the re-noised start of the overlap is the
    neighbour's, not a second upscale of the low-resolution latent); the audio there too unless `keep_audio` (the
    audio is the input's, the context audio then too). A resumed run's `done` is at `size`."""

    size: tuple[int, int]
    prepare: Prepare
    keep_audio: bool


@dataclasses.dataclass(frozen=True)
class PassesRun:
    """What one run of the loop made: the job's assembled latents, a record per pass run now, and what the
    callers' notes read. `sampling_result` turns it into the node's output."""

    plan: SegmentPlan
    output: tuple[torch.Tensor, torch.Tensor]      # the job's (video, audio) output latents
    denoised: tuple[torch.Tensor, torch.Tensor]
    records: tuple[SegmentRecord, ...]
    forecast: tuple[SegmentForecast, ...]
    context_on: tuple[str, ...]                     # conditioning lists that carried the context guide
    ran: range                                      # the passes run now
    assembled: bool                                 # every pass of the job is in `output` (run now or in `done`)
    guides_moved: tuple[int, ...]                   # the user's guides routed into each segment
    joins: tuple[float, ...]                        # a stage's later passes: its own resize against the context
    prompts: SegmentPrompts | None                  # the per-segment prompts the passes followed
    own_positive: bool                              # a stage's guider kept its own positive on every pass
    retakes: RetakeReport | None
    plan_notes: tuple[str, ...]                     # passes that ran in a mode forecast not to fit
    latent_keys: dict                               # the input latent's other entries, handed on with the output

    def sampling_result(self, notes: tuple[str, ...], sigmas: torch.Tensor | None = None) -> SamplingResult:
        """The job's output and denoised latents and its `SegmentedReport` (`notes`, then the plan notes)."""
        report = SegmentedReport(segment_plan=self.plan, forecast=self.forecast, segments=self.records,
                                 context_on=self.context_on, notes=tuple(notes) + self.plan_notes,
                                 retakes=self.retakes,
                                 prompts=tuple(short_prompt(t) for t in self.prompts.texts)
                                 if self.prompts is not None else None)
        extra = {k: v for k, v in self.latent_keys.items()
                 if k not in ("downscale_ratio_spacial", "downscale_ratio_temporal")}
        return SamplingResult(dict(extra, samples=_nested(*self.output)), dict(extra, samples=_nested(*self.denoised)),
                              report, None, sigmas)


class _PassReadings:
    """What the wrappers of one pass read: the memory baseline after the model load and the sampling seconds (per
    pass, never module level)."""

    def __init__(self, device) -> None:
        self.baseline = MemorySnapshot(str(device), None, None, None, None)
        self.seconds = 0.0


def _nested(video: torch.Tensor, audio: torch.Tensor):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio))


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
                entry = pass_prompts.with_text(entry, text)
            if frames:
                entry["minimax_keyframes"] = frames
            new[key].append(entry)
    return new


def _segment_guider(guider, new: dict, readings, progress, reader: Reader = read_memory):
    """A copy of `guider` with this pass's conditioning `new`, with our measuring wrappers."""
    import comfy.model_patcher
    import comfy.patcher_extension as ext

    g = copy.copy(guider)
    g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
    g.original_conds = new

    def prepare_sampling(executor, model, *args, **kwargs):
        out = executor(model, *args, **kwargs)
        readings.baseline = reader(model.load_device)   # after the boundary and the model load
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
        readings.seconds = time.perf_counter() - start
        return out

    ext.add_wrapper_with_key(ext.WrappersMP.PREPARE_SAMPLING, WRAPPER_KEY, prepare_sampling, g.model_options,
                             is_model_options=True)
    ext.add_wrapper_with_key(ext.WrappersMP.SAMPLER_SAMPLE, WRAPPER_KEY, sampler_sample, g.model_options,
                             is_model_options=True)
    return g


def job_latent(fn, *args):
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


def with_seed(noise, seed: int):
    """A copy of ComfyUI's noise object that draws with `seed`."""
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


def _start_from_context(seg: Segment, context: dict, pass_v: torch.Tensor, pass_a: torch.Tensor,
                        keep_audio: bool) -> float:
    """A stage's later pass starts from its neighbour's latents in its context frames (in place); returns the
    largest difference of its own resize there from them."""
    n, m = seg.context_latent_frames, seg.context_audio_frames
    join = float((pass_v[:, :, :n].float() - context["latent"].float()).abs().max())
    pass_v[:, :, :n] = context["latent"].to(pass_v.dtype)
    if not keep_audio:
        pass_a[..., :m] = context["audio_latent"].to(pass_a.dtype)
    return join


def run_passes(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest, plan: SegmentPlan, *,
               forecast: Forecast, run_pass: RunPass, log_name: str = "LongMedia",
               stage: StageLatents | None = None, keep_own_positive: bool = False,
               seeds: tuple[int | None, ...] | None = None, prompts: SegmentPrompts | None = None,
               retakes: RetakeCache | None = None, devices: str | None = None,
               memory_reader: Reader | None = None, device_profile: DeviceProfile | None = None,
               passes: tuple[int, int] | None = None, done=None) -> PassesRun:
    """Run `plan`'s passes one after another (those in `passes`), each continuing the ones before, and assemble them.

    `latent`: the whole job's AV latent (video [1,C,T,h,w] + audio [1,C,2,Ta], exactly the plan's length): the
    Sampler's input, or the previous stage's output. `forecast`: every pass planned before the first runs, for the
    prompts the passes follow; its lines are logged as "<log_name> plan: ...". `run_pass`: runs one pass (see
    `RunPass`). `stage`: a Hi-Res or Refiner stage's latents (None: the Sampler's passes, each on its slice as it
    is). `keep_own_positive`: a guider whose positive is not Setup's keeps it on every pass (a stage's detail
    prompt), instead of being refused. `seeds`: pinned seeds (`seams.segment_seeds`). `prompts`: Setup's
    per-segment prompts (`LongMediaJob.prompts`): pass i gets prompt i's text on its positive. `retakes`: finished
    passes by key (the caller owns it): a cached pass is reused, not sampled. `devices`: the Sampler's device list,
    part of every pass's retake key and handed to `run_pass`. `memory_reader`, `device_profile`: as `run_sampler`'s.
    `passes`, `done`: run only passes [first, stop), continuing `done` (the earlier passes' output and denoised
    latents), `segments.resume`.
    """
    import comfy.model_management

    video, audio = _check_inputs(guider, sigmas, latent, plan)
    conds = _conditioning(guider)
    own_positive = keep_own_positive and prompts is not None and not pass_prompts.is_setup_positive(prompts, conds)
    if own_positive:
        prompts = None
    pass_prompts.check_prompts(prompts, conds, plan)
    seed_list = seams.segment_seeds(plan.count, int(getattr(noise, "seed", 0) or 0), seeds)
    rows = forecast(prompts)
    for row in rows:  # listed before the first pass runs
        logging.info("%s plan: %s", log_name, row.line())
    routed = _routed(plan, conds)
    context_keys = tuple(conds)
    steps = int(sigmas.shape[-1]) - 1
    total = plan.count * steps
    extra = {k: v for k, v in latent.items() if k not in ("samples", "noise_mask")}
    todo = resume.check_passes(plan, passes, done is not None)
    chain = job_chain(retakes, guider, sampler, sigmas, request, latent, noise, plan, context_keys, devices)
    reader = memory_reader if memory_reader is not None else read_memory
    result = denoised = None
    if done is not None:
        result, denoised = job_latent(resume.resumed, plan, done, stage.size if stage is not None else None)
    records, joins = [], []
    for seg in plan.segments:
        if seg.index not in todo:   # run before (its output is in `done`) or later
            continue
        comfy.model_management.throw_exception_if_processing_interrupted()
        pass_v, pass_a = job_latent(seams.pass_latents, seg, video, audio)
        if stage is not None:
            pass_v, pass_a = stage.prepare(seg, pass_v, pass_a)
        context = seams.context_keyframe(seg, *result) if seg.index else None
        if stage is not None and context is not None:
            joins.append(_start_from_context(seg, context, pass_v, pass_a, stage.keep_audio))
        text = prompts.conditioning[seg.index] if prompts is not None else None
        new_conds = _segment_conds(conds, routed, seg.index, context, context_keys, text)
        key, pins = segment_key(chain, seg, seed_list[seg.index], (pass_v, pass_a), new_conds)
        hit = chain.lookup(seg.index, key)
        if hit is not None:
            out_v, out_a, den_v, den_a = hit.tensors
            record = dataclasses.replace(hit.record, source="reused", sample_seconds=0.0)
            _show_pass(seg, plan.count, reused=True)
        else:
            readings = _PassReadings(guider.model_patcher.load_device)
            _show_pass(seg, plan.count)
            g = _segment_guider(guider, new_conds, readings,
                                functools.partial(_overall_step, offset=seg.index * steps, total=total), reader)
            run = run_pass(with_seed(noise, seed_list[seg.index]), g, sampler, sigmas,
                           dict(extra, samples=_nested(pass_v, pass_a)), request, device_profile,
                           memory_reader=memory_reader, devices=devices)
            out_v, out_a = run.output["samples"].unbind()
            den_v, den_a = run.denoised["samples"].unbind()
            record = SegmentRecord(seg.index, seed_list[seg.index], seg.pass_frames, seg.context_frames,
                                   seg.video_latent_range, seg.audio_range, steps, readings.seconds, readings.baseline,
                                   run.report, prompt=prompts.texts[seg.index] if prompts is not None else None)
            chain.store(key, (out_v, out_a, den_v, den_a), record, pins)
            del run
        if result is None:
            result, denoised = (job_latent(seams.empty_result, plan, out_v, out_a),
                                job_latent(seams.empty_result, plan, den_v, den_a))
        seams.place(seg, result, out_v, out_a)
        seams.place(seg, denoised, den_v, den_a)
        records.append(record)
        del out_v, out_a, den_v, den_a, pass_v, pass_a
    moved = tuple(sum(len(per_segment[i]) for entries in routed.values() for per_segment in entries)
                  for i in range(plan.count))
    plan_notes = tuple(f"plan: {row.line()}: it ran because memory_mode={request.memory_mode} was chosen"
                       for row in rows if not row.fits)
    return PassesRun(plan=plan, output=tuple(result), denoised=tuple(denoised), records=tuple(records), forecast=rows,
                     context_on=context_keys, ran=todo,
                     assembled=todo.stop == plan.count and (todo.start == 0 or done is not None),
                     guides_moved=moved, joins=tuple(joins), prompts=prompts, own_positive=own_positive,
                     retakes=chain.report(), plan_notes=plan_notes, latent_keys=extra)
