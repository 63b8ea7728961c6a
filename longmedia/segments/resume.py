"""Running some of a segmented job's passes now and the rest later (a stage split over processes, or resumed).

A run of passes [a, b) needs what the passes before a made: the job's assembled output and denoised latents as
that run returned them (`done`), since pass a's context is read from them. Passes from b on stay as `done` has
them (zeros, if nothing ran there yet). Without ComfyUI; any dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import LongMediaInputError
from .seams import job_latent_shapes
from .timeline import SegmentPlan

__all__ = ["check_passes", "resumed"]

Streams = tuple[torch.Tensor, torch.Tensor]


def check_passes(plan: SegmentPlan, passes: Sequence[int] | None, have_done: bool) -> range:
    """The passes to run: all of them (None), or [a, b) within the plan; a > 0 needs the earlier passes' `done`."""
    if passes is None:
        return range(plan.count)
    a, b = (tuple(passes) + (None, None))[:2]
    if (isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int) or not isinstance(b, int)
            or not 0 <= a < b <= plan.count or len(tuple(passes)) != 2):
        raise LongMediaInputError("passes", passes, f"(first, stop) with 0 <= first < stop <= {plan.count}",
                                  "Give the passes to run now as a half-open range, e.g. (0, 3) then (3, "
                                  f"{plan.count}).")
    if a > 0 and not have_done:
        raise LongMediaInputError("done", None, f"the job's latents after passes 0..{a - 1} (what that run returned)",
                                  f"Pass {a}'s context is read from the earlier passes: hand their output and "
                                  "denoised latents in as done.")
    return range(a, b)


def resumed(plan: SegmentPlan, done: tuple[Streams, Streams], size: tuple[int, int] | None = None
            ) -> tuple[Streams, Streams]:
    """Copies of `done` (output and denoised, each video [1, C, T, h, w] and audio [1, C, 2, Ta]), checked to be
    the whole job's latents (at `size` latent cells when given), to assemble the passes that run now into."""
    out = []
    for name, (video, audio) in zip(("output", "denoised"), done):
        want_v, want_a = job_latent_shapes(plan, video.shape[3], video.shape[4], video.shape[1], audio.shape[1])
        if (tuple(video.shape), tuple(audio.shape)) != (want_v, want_a) or (
                size is not None and tuple(video.shape[3:]) != tuple(size)):
            raise LongMediaInputError(f"done.{name}", (tuple(video.shape), tuple(audio.shape)),
                                      f"the job's whole {name} latents: video {want_v[:3]} + {size or want_v[3:]} "
                                      f"with audio {want_a}", "Hand in what the run of the earlier passes returned.")
        out.append((video.clone(), audio.clone()))
    return out[0], out[1]
