"""Hi-Res and Refiner on top of the Sampler core: one more pass through `run_sampler`, planned for its own geometry.

Audio is kept bit for bit by `sample_keeping_audio`: during sampling the audio stream carries a noise
mask of 0 (ComfyUI's inpainting path), so every model call sees the given audio at the current noise
level and the refined video stays in sync with it, and no solver step is spent on audio; after
sampling the input audio tensor is put back, because ComfyUI carries H3's audio scaled by
`audio_scale` inside the sampler and un-scaling is not always bit-exact. ComfyUI is imported lazily.
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from ...errors import LongMediaInputError, check_choice, check_float, check_int
from ...h3 import lattice as L
from ...h3.latent_resample import METHODS, resample_video, target_latent_size
from ...job.preflight import StagePass, check_job_value, check_latent_matches_job, check_latent_segments
from ...planning.types import PlanRequest
from ...report.oom import LongMediaOOM, OOMContext, phase
from ..host.memory import comfy_reading
from .sampler import SamplingResult, run_sampler
from .sampler_inputs import av_latents, check_sigmas, h3_diffusion_model, request_for_job
from .segmented_stages import run_stage_segmented

AUDIO_KEPT = ("audio kept bit for bit: noise mask 0 on the audio stream while sampling (the model sees it at each "
              "step's noise level), the input audio restored after")


def tail_sigmas(sigmas, denoise: float, renoise_sigma: float = 0.0) -> torch.Tensor:
    """The last round(steps * denoise) steps of `sigmas`, or the steps below `renoise_sigma` starting at it."""
    check_sigmas(sigmas)
    values = sigmas.detach().float().cpu()
    renoise_sigma = check_float("renoise_sigma", renoise_sigma, 0.0, float(values[0]),
                                "Use 0 to follow denoise, or a sigma inside the connected schedule.")
    if renoise_sigma > 0.0:
        below = values[values < renoise_sigma]
        if below.numel() == 0 or renoise_sigma <= float(values[-1]):
            raise LongMediaInputError("renoise_sigma", renoise_sigma, f"above the schedule's last sigma {float(values[-1]):g}",
                                      "Raise renoise_sigma or connect a schedule that ends lower.")
        return torch.cat([torch.tensor([renoise_sigma]), below]).to(sigmas.dtype)
    steps = values.numel() - 1
    denoise = check_float("denoise", denoise, 0.0, 1.0, "Use 0.3-0.6 for Hi-Res.")
    keep = round(steps * denoise)
    if keep < 1:
        raise LongMediaInputError("denoise", denoise, f"at least {1 / steps:.3f} for a {steps}-step schedule",
                                  "Raise denoise or give the schedule more steps.")
    return sigmas[-(keep + 1):].clone()


def refiner_sigmas(guider, scheduler: str, steps: int, denoise: float) -> torch.Tensor:
    """The last `steps` steps of a `steps / denoise`-step schedule of the guider's model (BasicScheduler's rule)."""
    from comfy_extras.nodes_custom_sampler import BasicScheduler

    check_int("steps", steps, 1, 1000, "Use 2-8 refiner steps.")
    check_float("denoise", denoise, 0.01, 1.0, "Use 0.1-0.3 for a refiner pass.")
    return BasicScheduler.execute(guider.model_patcher, scheduler, steps, denoise).result[0]


def _nested(video: torch.Tensor, audio: torch.Tensor):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio))


def _learned(upscaler, video: torch.Tensor, size: tuple[int, int], method: str,
             one_segment: bool = False) -> torch.Tensor:
    """Apply a loaded latent upscaler (LatentUpscaleModelLoader) and land on `size`.

    An allocation failure inside it is the OOM report of phase latent_upscale (one_segment: `video` is one segment
    of a segmented job, so the advice is a shorter segment); another RuntimeError (a shape or channel mismatch in
    its convolutions) means it does not take H3 latents."""
    import comfy.model_management

    try:
        with phase("latent_upscale", context=OOMContext(one_segment=one_segment), reader=comfy_reading()):
            out = _apply_upscaler(upscaler, video, size, method)
    except LongMediaOOM:
        raise
    except RuntimeError as error:  # named: a shape/channel mismatch inside the upscaler's convolutions
        raise LongMediaInputError("upscaler", type(upscaler).__name__, "an upscaler for 24-channel H3 video latents",
                                  f"This upscaler does not take H3 latents ({error}); use the built-in resampler.") from error
    if out.ndim != 5 or out.shape[1] != video.shape[1] or out.shape[2] != video.shape[2]:
        raise LongMediaInputError("upscaler", tuple(out.shape), f"[1, {video.shape[1]}, {video.shape[2]}, h, w] out",
                                  "Use an upscaler made for H3 latents, or the built-in resampler.")
    out = out.to(comfy.model_management.intermediate_device()).float()
    if tuple(out.shape[-2:]) != size:
        out = resample_video(out, size, method)
    return out.to(video.dtype)


def _apply_upscaler(upscaler, video: torch.Tensor, size: tuple[int, int], method: str) -> torch.Tensor:
    import comfy.model_management

    if hasattr(upscaler, "resample_latent"):    # HunyuanVideo 1.5 SR models refine a latent at the target size
        model = getattr(upscaler, "model", None)
        dtype = next(model.parameters()).dtype if isinstance(model, torch.nn.Module) else video.dtype
        return upscaler.resample_latent(resample_video(video, size, method).to(dtype))
    if hasattr(upscaler, "load_device") and callable(getattr(upscaler, "model", None)):  # a patched module
        comfy.model_management.load_models_gpu([upscaler])
        return upscaler.model(video.to(upscaler.load_device, upscaler.model_dtype()))
    _check_upscaler(upscaler)
    raise AssertionError("unreachable: _check_upscaler accepts only the two kinds above")


def _check_upscaler(upscaler) -> None:
    """None, or a loaded latent upscaler (LatentUpscaleModelLoader): refused before any pass runs otherwise."""
    if upscaler is None or hasattr(upscaler, "resample_latent") or (
            hasattr(upscaler, "load_device") and callable(getattr(upscaler, "model", None))):
        return
    raise LongMediaInputError("upscaler", type(upscaler).__name__, "a LATENT_UPSCALE_MODEL (Load Latent "
                              "Upscale Model)", "Connect the loader's output, or leave upscaler empty.")


def _resize_note(shape: tuple[int, ...], size: tuple[int, int], scale: float, how: str) -> str:
    rows = L.patch_cells(size[0]) * L.patch_cells(size[1]) / (L.patch_cells(shape[3]) * L.patch_cells(shape[4]))
    return (f"Hi-Res: {shape[4] * 16}x{shape[3] * 16} -> {size[1] * 16}x{size[0] * 16} px (scale {scale:g}, {how}); "
            f"video rows x{rows:.2f}")


def upscale_latent(latent: dict, scale: float, method: str = "bicubic", upscaler=None) -> tuple[dict, tuple[str, ...]]:
    """The AV latent with its video scaled onto the /32 grid; the audio tensor is the input's, untouched."""
    video, audio = av_latents(latent)
    size = target_latent_size(int(video.shape[3]), int(video.shape[4]), scale)
    new = resample_video(video, size, method) if upscaler is None else _learned(upscaler, video, size, method)
    how = method if upscaler is None else f"{type(upscaler).__name__} + {method}"
    notes = [_resize_note(tuple(video.shape), size, scale, how)]
    out = {k: v for k, v in latent.items() if k != "noise_mask"}
    if "noise_mask" in latent:
        notes.append("the input latent's noise_mask was dropped (it does not fit the new size)")
    out["samples"] = _nested(new, audio)
    return out, tuple(notes)


def guides_resized(guider, size: tuple[int, int], method: str):
    """A copy of `guider` whose fl2va guide latents match a video of `size` latent cells (refs keep their own size)."""
    conds = getattr(guider, "original_conds", None) or {}
    if not any(c.get("minimax_keyframes") for entries in conds.values() for c in entries):
        return guider, ()

    def resized(c: dict) -> dict:
        frames = [dict(kf, latent=resample_video(kf["latent"], size, method)) if kf.get("latent") is not None
                  else kf for kf in c.get("minimax_keyframes") or ()]
        return {**c, "minimax_keyframes": frames} if frames else c

    g = copy.copy(guider)
    g.original_conds = {k: [resized(c) for c in entries] for k, entries in conds.items()}
    return g, (f"first/last-frame guide latents resized with the video ({method})",)


def _restored(sampled: dict, latent: dict, audio: torch.Tensor) -> dict:
    out = dict(sampled)
    out["samples"] = _nested(sampled["samples"].unbind()[0], audio.clone())
    out.pop("noise_mask", None)
    if "noise_mask" in latent:
        out["noise_mask"] = latent["noise_mask"]
    return out


def sample_keeping_audio(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest, device_profile=None,
                         **kwargs):
    """run_sampler with the audio stream masked out of denoising and restored exactly afterwards (kwargs: run_sampler's)."""
    video, audio = av_latents(latent)
    mask = latent.get("noise_mask")
    if getattr(mask, "is_nested", False):
        mask = mask.unbind()[0]
    video_mask = mask if mask is not None else torch.ones((1, 1) + tuple(video.shape[2:]))
    masked = {**latent, "noise_mask": _nested(video_mask, torch.zeros((1, 1) + tuple(audio.shape[2:])))}
    result = run_sampler(noise, guider, sampler, sigmas, masked, request, device_profile, **kwargs)
    return dataclasses.replace(result, output=_restored(result.output, latent, audio),
                               denoised=_restored(result.denoised, latent, audio))


def _with_notes(result, sigmas, notes) -> SamplingResult:
    report = dataclasses.replace(result.report, notes=tuple(result.report.notes) + tuple(notes))
    return SamplingResult(result.output, result.denoised, report, result.plan, sigmas)


def _stage_job(job, latent: dict, stage: str) -> StagePass:
    """The node's `job` input checked (Setup's job or nothing) against the latent's length, as the stage's refusals."""
    job = check_job_value(job)
    if job is not None:
        video, audio = av_latents(latent)
        frames = job.segments.pixel_frames if job.segmented else job.geometry.total_frames or job.geometry.frames
        check_latent_matches_job(frames, tuple(video.shape), tuple(audio.shape))
        check_latent_segments(latent, job.segments if job.segmented else None)
    return StagePass(stage, job)


def _whole_pass_only(passes, done) -> None:
    if passes is not None or done is not None:
        raise LongMediaInputError("passes", passes, "a segmented job on the job input (passes and done pick and "
                                  "continue its segments)", "Connect Setup's segmented job, or leave passes unset.")


def run_hires(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest, *, scale: float = 1.25,
              denoise: float = 0.5, method: str = "bicubic", upscaler=None, renoise_sigma: float = 0.0,
              keep_audio: bool = True, job=None, memory_reader=None, device_profile=None,
              passes=None, done=None) -> SamplingResult:
    """Upscale the video latent, re-noise it to the tail of `sigmas` and sample again, planned at the new size.

    job: LongMedia Setup's job (or None). A segmented job runs segment by segment (`segmented_stages`): each
    segment's slice is upscaled alone and planned after its own boundary; a later segment starts from, and is
    guided by, its neighbour's Hi-Res latents of its context frames. memory_reader, device_profile: as
    `run_sampler`'s; passes, done (a segmented job): as `segmented.run_segmented`'s.
    """
    h3_diffusion_model(guider)
    tail = tail_sigmas(sigmas, denoise, renoise_sigma)
    stage = _stage_job(job, latent, "hires")
    request = request_for_job(request, stage.job)
    run = sample_keeping_audio if keep_audio else run_sampler
    audio_note = AUDIO_KEPT if keep_audio else "audio re-noised and sampled with the video"
    if stage.job is not None and stage.job.segmented:
        video, _ = av_latents(latent)
        size = target_latent_size(int(video.shape[3]), int(video.shape[4]), scale)
        check_choice("method", method, METHODS, "Use bicubic (sharpest) or bilinear.")
        _check_upscaler(upscaler)
        g, guide_notes = guides_resized(guider, size, method)

        def prepare(seg, pass_v, pass_a):
            new = (resample_video(pass_v, size, method) if upscaler is None
                   else _learned(upscaler, pass_v, size, method, one_segment=True))
            return new, pass_a

        result = run_stage_segmented(noise, g, sampler, tail, latent, request, stage.job.segments, stage=stage,
                                     size=size, prepare=prepare, run_pass=run, keep_audio=keep_audio,
                                     memory_reader=memory_reader, device_profile=device_profile,
                                     passes=passes, done=done, prompts=stage.job.prompts)
        how = method if upscaler is None else f"{type(upscaler).__name__} + {method}"
        notes = (_resize_note(tuple(video.shape), size, scale, how + ", per segment"),) + guide_notes + (
            f"re-noised to sigma {float(tail[0]):.4f}, {tail.numel() - 1} steps per pass", audio_note)
        return _with_notes(result, tail, notes)
    _whole_pass_only(passes, done)
    up, notes = upscale_latent(latent, scale, method, upscaler)
    video = up["samples"].unbind()[0]
    g, guide_notes = guides_resized(guider, (int(video.shape[3]), int(video.shape[4])), method)
    result = run(noise, g, sampler, tail, up, request, device_profile, memory_reader=memory_reader, stage=stage)
    notes += guide_notes + (f"re-noised to sigma {float(tail[0]):.4f}, {tail.numel() - 1} steps", audio_note)
    return _with_notes(result, tail, notes)


def run_refiner(noise, guider, sampler, latent: dict, request: PlanRequest, *, sigmas=None, scheduler: str = "simple",
                steps: int = 4, denoise: float = 0.25, job=None, memory_reader=None,
                device_profile=None, passes=None, done=None) -> SamplingResult:
    """A low-denoise last pass (the schedule's last `steps` steps, or `sigmas`) that keeps the audio exactly.

    job: LongMedia Setup's job (or None). A segmented job runs segment by segment (`segmented_stages`), each pass
    keeping its slice of the audio bit for bit. memory_reader, device_profile: as `run_sampler`'s; passes, done
    (a segmented job): as `segmented.run_segmented`'s.
    """
    h3_diffusion_model(guider)
    av_latents(latent)
    schedule = check_sigmas(sigmas) if sigmas is not None else refiner_sigmas(guider, scheduler, steps, denoise)
    stage = _stage_job(job, latent, "refiner")
    request = request_for_job(request, stage.job)
    source = "the connected sigmas" if sigmas is not None else f"{scheduler}, steps {steps}, denoise {denoise:g}"
    notes = (f"Refiner: {schedule.numel() - 1} steps from sigma {float(schedule[0]):.4f} ({source})", AUDIO_KEPT)
    if stage.job is not None and stage.job.segmented:
        video, _ = av_latents(latent)
        result = run_stage_segmented(noise, guider, sampler, schedule, latent, request, stage.job.segments,
                                     stage=stage, size=(int(video.shape[3]), int(video.shape[4])),
                                     prepare=lambda seg, v, a: (v, a), run_pass=sample_keeping_audio,
                                     keep_audio=True, memory_reader=memory_reader, device_profile=device_profile,
                                     passes=passes, done=done, prompts=stage.job.prompts)
        return _with_notes(result, schedule, notes)
    _whole_pass_only(passes, done)
    result = sample_keeping_audio(noise, guider, sampler, schedule, latent, request, device_profile,
                                  memory_reader=memory_reader, stage=stage)
    return _with_notes(result, schedule, notes)
