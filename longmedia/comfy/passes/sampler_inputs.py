"""What the Sampler receives from ComfyUI, checked before any GPU work, and the packed geometry it implies.

Inputs are duck-typed (a guider with `model_patcher`, a LATENT dict with a nested video+audio tensor,
a 1-D SIGMAS tensor) so the checks run in tests without ComfyUI.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...errors import LongMediaInputError
from ...h3 import lattice as L
from ...h3.geometry import Geometry, RowSpan
from ...h3.references import REFERENCE_BUDGETS
from ...job.job import LongMediaJob
from ...job.preflight import check_job_value, check_latent_matches_job
from ...planning.types import PlanRequest

H3_MODEL_CLASS = "MiniMaxH3Model"


def h3_diffusion_model(guider):
    """The H3 diffusion model under `guider`, or a LongMediaInputError naming the guider."""
    patcher = getattr(guider, "model_patcher", None)
    model = getattr(getattr(patcher, "model", None), "diffusion_model", None)
    name = type(model).__name__ if model is not None else type(guider).__name__
    if model is None or name != H3_MODEL_CLASS:
        raise LongMediaInputError("guider", name, "a CFGGuider or BasicGuider over a MiniMax H3 model",
                                  "Connect the guider made from the H3 model (UNETLoader -> CFGGuider).")
    return model


def av_latents(latent) -> tuple[torch.Tensor, torch.Tensor]:
    """(video [1,24,T,h,w], audio [1,32,2,Ta]) of an H3 AV latent, or a LongMediaInputError."""
    samples = latent.get("samples") if isinstance(latent, dict) else None
    parts = samples.unbind() if getattr(samples, "is_nested", False) else None
    allowed = "an H3 AV latent: video [1, 24, T, H/16, W/16] with audio [1, 32, 2, T40]"
    fix = "Use EmptyMiniMaxH3LatentAV or LongMedia Setup for the latent."
    if parts is None or len(parts) != 2:
        shape = tuple(samples.shape) if isinstance(samples, torch.Tensor) else type(samples).__name__
        raise LongMediaInputError("latent", shape, allowed, fix)
    video, audio = parts
    if (video.ndim != 5 or video.shape[0] != 1 or video.shape[1] != 24 or audio.ndim != 4
            or audio.shape[0] != 1 or audio.shape[1] != 32 or audio.shape[2] != 2):
        raise LongMediaInputError("latent", (tuple(video.shape), tuple(audio.shape)), allowed, fix)
    return video, audio


def job_for_latent(job, latent) -> LongMediaJob | None:
    """The Sampler's `job` input checked (Setup's job or nothing) and matched against its `latent`."""
    job = check_job_value(job)
    if job is not None:
        video, audio = av_latents(latent)
        g = job.geometry
        check_latent_matches_job(g.total_frames or g.frames, tuple(video.shape), tuple(audio.shape),
                                 canvas=(g.width, g.height))
    return job


def conditioning_widths(guider) -> dict[str, tuple[int, ...]]:
    """{conditioning name (positive, negative ...): hidden width of each entry} of a guider's conditioning."""
    conds = getattr(guider, "original_conds", None) or {}
    return {name: tuple(int(c["cross_attn"].shape[-1]) for c in entries
                        if isinstance(c, dict) and getattr(c.get("cross_attn"), "ndim", 0) >= 2)
            for name, entries in conds.items()}


def check_sigmas(sigmas) -> torch.Tensor:
    """A 1-D, finite, non-increasing schedule that starts above 0."""
    allowed = "a 1-D schedule of at least 2 finite, non-increasing sigmas starting above 0"
    fix = "Connect a scheduler node's SIGMAS (e.g. BasicScheduler) without editing its values."
    if not isinstance(sigmas, torch.Tensor) or sigmas.ndim != 1 or sigmas.numel() < 2:
        raise LongMediaInputError("sigmas", getattr(sigmas, "shape", sigmas), allowed, fix)
    values = sigmas.detach().float().cpu()
    if not torch.isfinite(values).all():
        raise LongMediaInputError("sigmas", "contains NaN or inf", allowed, fix)
    if (values[1:] > values[:-1]).any():
        raise LongMediaInputError("sigmas", [round(v, 4) for v in values.tolist()[:8]], allowed, fix)
    if values[0] <= 0:
        raise LongMediaInputError("sigmas", float(values[0]), allowed, fix)
    return sigmas


def text_rows(conditioning) -> int:
    """Prompt rows of a CONDITIONING (its first entry's hidden states [1, L, D])."""
    try:
        return int(conditioning[0][0].shape[1])
    except (IndexError, TypeError, AttributeError) as error:  # named: not a ComfyUI CONDITIONING list
        raise LongMediaInputError("conditioning", type(conditioning).__name__, "a CONDITIONING list",
                                  "Connect the guider's conditioning from a text encoder.") from error


def geometry_from_layout(video: torch.Tensor, audio: torch.Tensor, row_spans, prompt_tokens: int,
                         reference_budget: str | None = None) -> Geometry:
    """Geometry whose row spans are exactly those of the packed layout ((start, stop, kind), ...).

    reference_budget: the job's (Setup's); None (no job): the stock nodes' uncapped references ("max")."""
    rows = tuple(RowSpan(kind, b - a, kind) for a, b, kind in row_spans)
    frames = L.pixel_frames(video.shape[2])
    return Geometry(width=video.shape[4] * 16, height=video.shape[3] * 16, frames=frames,
                    audio_latent_frames=audio.shape[-1], row_spans=rows, prompt_tokens=prompt_tokens,
                    total_frames=frames, reference_budget=REFERENCE_BUDGETS[reference_budget or "max"])


def request_for_job(request: PlanRequest, job: LongMediaJob | None) -> PlanRequest:
    """The node's PlanRequest with Setup's reference_budget when a job is connected (what the plan counts under)."""
    if job is None:
        return request
    return dataclasses.replace(request, reference_budget=job.reference_budget)


def stock_row_spans(video: torch.Tensor, audio: torch.Tensor, positive) -> tuple[tuple[int, int, str], ...]:
    """The packed row-span table stock H3 builds for these latents and conditioning (ComfyUI's PackedLayout)."""
    from comfy.ldm.minimax.model import PackedLayout

    opts = positive[0][1] if positive and len(positive[0]) > 1 else {}
    text = text_rows(positive)
    keyframes, refs = opts.get("minimax_keyframes"), opts.get("minimax_refs")
    t, h, w = video.shape[2], video.shape[3], video.shape[4]
    h, w = h + h % 2, w + w % 2  # patch 1x2x2 pads odd latent sizes
    try:
        layout = PackedLayout(text, t, h, w, audio.shape[-1], keyframes=keyframes, refs=refs)
    except (KeyError, TypeError, AttributeError) as error:  # named: a guide or reference H3 cannot read
        raise LongMediaInputError(
            "guider", f"conditioning with minimax_keyframes={_described(keyframes)}, minimax_refs={_described(refs)}",
            f"guides and references as ComfyUI's H3 nodes store them (each guide with resolved_frame_index and a "
            f"latent and/or audio_latent; each reference block with its kind and sizes); reading them failed: "
            f"{type(error).__name__}: {error}",
            "Build guides with MiniMaxH3AddGuide / LongMedia Setup and references with MiniMaxH3ReferenceToVideo "
            "or LongMedia Setup, and connect that conditioning to the guider.") from error
    return tuple(layout.segments)


def _described(entries) -> str:
    """A guide or reference list as its entries' keys (what a malformed one is missing shows)."""
    if not entries:
        return "none"
    return "[" + ", ".join("{" + ", ".join(sorted(map(str, e))) + "}" if isinstance(e, dict) else type(e).__name__
                           for e in entries) + "]"


def call_row_spans(x, context, payload) -> tuple[tuple[int, int, str], ...]:
    """The packed row-span table of one model call, as stock H3's `_forward` builds it for this call.

    x: the call's [video, audio] latents; context: its text hidden states [1, L, D]; payload: its
    `minimax_payload` (the positive and the negative prompt each carry their own, with their own
    prebuilt layout, text length, guides and references).
    """
    from comfy.ldm.minimax.model import PackedLayout

    payload = payload or {}
    video = x[0]
    t, h, w = video.shape[2], video.shape[3] + video.shape[3] % 2, video.shape[4] + video.shape[4] % 2  # patch 1x2x2
    text, audio_t = int(context.shape[1]), int(x[1].shape[-1])
    layout = payload.get("layout")
    if layout is None or getattr(layout, "signature", None) != (text, t, h, w, audio_t):
        layout = PackedLayout(text, t, h, w, audio_t, keyframes=payload.get("keyframes"), refs=payload.get("refs"))
    return tuple((int(a), int(b), str(kind)) for a, b, kind in layout.segments)


def guider_cfg(guider) -> float | None:
    """The guider's cfg (CFGGuider.cfg); None for a guider without one (BasicGuider)."""
    cfg = getattr(guider, "cfg", None)
    return float(cfg) if isinstance(cfg, (int, float)) and not isinstance(cfg, bool) else None


def runs_negative(guider) -> bool:
    """Whether the guider calls the model on its negative conditioning: ComfyUI skips that call at cfg 1 (unless
    model_options set disable_cfg1_optimization), so a cfg-1 pass plans its positive rows only."""
    cfg = guider_cfg(guider)
    if cfg is None or not math.isclose(cfg, 1.0):
        return True
    return bool((getattr(guider, "model_options", None) or {}).get("disable_cfg1_optimization", False))
