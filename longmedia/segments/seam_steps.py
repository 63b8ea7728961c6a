"""How visible the joins of an assembled segmented latent are: the step across each join against the steps inside.

A segment's new content starts at `Segment.video_latent_range[0]` of the assembled video latent (and
`audio_range[0]` of its audio). The step there (mean |x[t] - x[t-1]| over channels and cells) is compared
with the median step between neighbouring latents inside the passes: a ratio near 1 means the join is as smooth
as the content itself; a seam shows as a ratio well above the inside steps' spread. Without ComfyUI; any dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .timeline import SegmentPlan

__all__ = ["SeamSteps", "seam_steps"]


@dataclass(frozen=True)
class SeamSteps:
    """Per join (segment 1, 2 ...): the step across it over the median step inside, for video and audio."""

    video: tuple[float, ...]
    audio: tuple[float, ...]
    inside_video_max: float     # the largest inside step over the inside median (the content's own spread)
    inside_audio_max: float

    @property
    def worst(self) -> float:
        return max(self.video + self.audio, default=0.0)

    def line(self) -> str:
        if not self.video:
            return "seams: none (one segment)"
        v = " / ".join(f"{r:.2f}" for r in self.video)
        a = " / ".join(f"{r:.2f}" for r in self.audio)
        return (f"seams (step across each join / median step inside): video {v} (inside up to "
                f"{self.inside_video_max:.2f}); audio {a} (inside up to {self.inside_audio_max:.2f})")


def _steps(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean |x[t] - x[t-1]| along `dim`, one value per t >= 1."""
    d = x.float().diff(dim=dim).abs()
    keep = dim % d.ndim
    return d.mean(dim=tuple(i for i in range(d.ndim) if i != keep))


def _ratios(steps: torch.Tensor, joins: list[int]) -> tuple[tuple[float, ...], float]:
    """Steps at the joins (latent index t: the step t-1 -> t) over the median inside step; the inside maximum too."""
    at = [t - 1 for t in joins if 1 <= t <= steps.numel()]
    inside = torch.ones(steps.numel(), dtype=torch.bool)
    inside[at] = False
    median = float(steps[inside].median()) if inside.any() else 0.0
    if median <= 0.0:
        return tuple(0.0 for _ in at), 0.0
    return tuple(float(steps[i]) / median for i in at), float(steps[inside].max()) / median


def seam_steps(plan: SegmentPlan, video: torch.Tensor, audio: torch.Tensor) -> SeamSteps:
    """The joins of `plan` in the assembled video [1, C, T, h, w] and audio [1, C, 2, Ta] latents."""
    video_joins = [s.video_latent_range[0] for s in plan.segments[1:]]
    audio_joins = [s.audio_range[0] for s in plan.segments[1:]]
    v, v_max = _ratios(_steps(video, 2), video_joins)
    a, a_max = _ratios(_steps(audio, -1), audio_joins)
    return SeamSteps(v, a, v_max, a_max)
