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

from ..errors import LongMediaInputError, check_float, check_int
from ..h3.latent_resample import resample_video, target_latent_size
from ..planning.types import PlanRequest
from .inputs import av_latents, check_sigmas, h3_diffusion_model
from .sampler import SamplingResult, run_sampler

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


def _learned(upscaler, video: torch.Tensor, size: tuple[int, int], method: str) -> torch.Tensor:
    """Apply a loaded latent upscaler (LatentUpscaleModelLoader) and land on `size`."""
    import comfy.model_management

    try:
        if hasattr(upscaler, "resample_latent"):    # HunyuanVideo 1.5 SR models refine a latent at the target size
            model = getattr(upscaler, "model", None)
            dtype = next(model.parameters()).dtype if isinstance(model, torch.nn.Module) else video.dtype
            out = upscaler.resample_latent(resample_video(video, size, method).to(dtype))
        elif hasattr(upscaler, "load_device") and callable(getattr(upscaler, "model", None)):  # a patched module
            comfy.model_management.load_models_gpu([upscaler])
            out = upscaler.model(video.to(upscaler.load_device, upscaler.model_dtype()))
        else:
            raise LongMediaInputError("upscaler", type(upscaler).__name__, "a LATENT_UPSCALE_MODEL (Load Latent "
                                      "Upscale Model)", "Connect the loader's output, or leave upscaler empty.")
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


def upscale_latent(latent: dict, scale: float, method: str = "bicubic", upscaler=None) -> tuple[dict, tuple[str, ...]]:
    """The AV latent with its video scaled onto the /32 grid; the audio tensor is the input's, untouched."""
    video, audio = av_latents(latent)
    size = target_latent_size(int(video.shape[3]), int(video.shape[4]), scale)
    new = resample_video(video, size, method) if upscaler is None else _learned(upscaler, video, size, method)
    how = method if upscaler is None else f"{type(upscaler).__name__} + {method}"
    notes = [f"Hi-Res: {video.shape[4] * 16}x{video.shape[3] * 16} -> {size[1] * 16}x{size[0] * 16} px "
             f"(scale {scale:g}, {how}); video rows x{(size[0] * size[1]) / (video.shape[3] * video.shape[4]):.2f}"]
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


def sample_keeping_audio(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest):
    """run_sampler with the audio stream masked out of denoising and restored exactly afterwards."""
    video, audio = av_latents(latent)
    mask = latent.get("noise_mask")
    if getattr(mask, "is_nested", False):
        mask = mask.unbind()[0]
    video_mask = mask if mask is not None else torch.ones((1, 1) + tuple(video.shape[2:]))
    masked = {**latent, "noise_mask": _nested(video_mask, torch.zeros((1, 1) + tuple(audio.shape[2:])))}
    result = run_sampler(noise, guider, sampler, sigmas, masked, request)
    return dataclasses.replace(result, output=_restored(result.output, latent, audio),
                               denoised=_restored(result.denoised, latent, audio))


def _with_notes(result, sigmas, notes) -> SamplingResult:
    report = dataclasses.replace(result.report, notes=tuple(result.report.notes) + tuple(notes))
    return SamplingResult(result.output, result.denoised, report, result.plan, sigmas)


def run_hires(noise, guider, sampler, sigmas, latent: dict, request: PlanRequest, *, scale: float = 1.25,
              denoise: float = 0.5, method: str = "bicubic", upscaler=None, renoise_sigma: float = 0.0,
              keep_audio: bool = True) -> SamplingResult:
    """Upscale the video latent, re-noise it to the tail of `sigmas` and sample again, planned at the new size."""
    h3_diffusion_model(guider)
    tail = tail_sigmas(sigmas, denoise, renoise_sigma)
    up, notes = upscale_latent(latent, scale, method, upscaler)
    video = up["samples"].unbind()[0]
    g, guide_notes = guides_resized(guider, (int(video.shape[3]), int(video.shape[4])), method)
    run = sample_keeping_audio if keep_audio else run_sampler
    result = run(noise, g, sampler, tail, up, request)
    notes += guide_notes + (f"re-noised to sigma {float(tail[0]):.4f}, {tail.numel() - 1} steps",
                            AUDIO_KEPT if keep_audio else "audio re-noised and sampled with the video")
    return _with_notes(result, tail, notes)


def run_refiner(noise, guider, sampler, latent: dict, request: PlanRequest, *, sigmas=None, scheduler: str = "simple",
                steps: int = 4, denoise: float = 0.25) -> SamplingResult:
    """A low-denoise last pass (the schedule's last `steps` steps, or `sigmas`) that keeps the audio exactly."""
    h3_diffusion_model(guider)
    av_latents(latent)
    schedule = check_sigmas(sigmas) if sigmas is not None else refiner_sigmas(guider, scheduler, steps, denoise)
    result = sample_keeping_audio(noise, guider, sampler, schedule, latent, request)
    source = "the connected sigmas" if sigmas is not None else f"{scheduler}, steps {steps}, denoise {denoise:g}"
    notes = (f"Refiner: {schedule.numel() - 1} steps from sigma {float(schedule[0]):.4f} ({source})", AUDIO_KEPT)
    return _with_notes(result, schedule, notes)
