"""A job's geometry: its duration on H3's frame grid, its passes when segmented, and the packed sequence of the
longest pass (`h3.geometry.pass_geometry`)."""

from __future__ import annotations

import math

from ..errors import LongMediaInputError, check_float, check_int
from ..h3 import lattice as L
from ..h3.geometry import Geometry, pass_geometry
from ..h3.references import KeyframeSpec, ReferenceSpec
from ..limits import MAX_EDGE_PX, MAX_FRAMES, MAX_SECONDS, MIN_SECONDS
from ..segments.timeline import SegmentPlan, plan_segments

__all__ = ["build_geometry", "requested_frames"]


def requested_frames(seconds: float | None, frames: int | None, fps: int = L.FPS) -> int:
    """Frames asked for (before lattice snapping)."""
    if (seconds is None) == (frames is None):
        raise LongMediaInputError("duration", {"seconds": seconds, "frames": frames},
                                  "exactly one of seconds or frames", "Give the duration once.")
    if frames is not None:
        return check_int("frames", frames, 1, MAX_FRAMES, "Give the frame count at 24 fps.")
    check_float("seconds", seconds, MIN_SECONDS, MAX_SECONDS, "Give the video length in seconds.")
    return max(1, math.ceil(seconds * fps - 1e-9))


def _passes(requested: int, segment_seconds: float | None, context_frames: int | None,
            planned: SegmentPlan | None, asked: tuple[str, float | int] = ("frames", 0)
            ) -> tuple[int, int, int, int, int]:
    """(total frames, frames of the longest pass, its audio latent frames, passes, context frames).

    `asked`: the duration input as the user gave it (name, value), so a limit is stated against it.
    """
    total = L.snap_frames(requested)
    if planned is not None:
        return planned.pixel_frames, planned.max_pass_frames, planned.max_pass_audio_frames, planned.count, \
            planned.context_frames
    if segment_seconds is None:
        if context_frames is not None:
            raise LongMediaInputError("context_frames", context_frames, "unset without segment_seconds",
                                      "Set segment_seconds, or drop context_frames.")
        if total > L.MAX_STOCK_FRAMES:
            name, value = asked
            limit = (f"at most {L.MAX_STOCK_FRAMES / L.FPS:g} s" if name == "seconds" else
                     f"at most {L.MAX_STOCK_FRAMES} frames") + \
                f" in one pass ({L.MAX_STOCK_FRAMES} frames: the stock latent node's 3600 on the 17k+5 grid)"
            raise LongMediaInputError(name, value, limit,
                                      f"It would be {total} frames = {total / L.FPS:g} s on H3's 17k+5 frame grid. "
                                      "Set segment_seconds to generate the video in segments.")
        return total, total, L.target_audio_frames(total), 1, 0
    sp = plan_segments(total_frames=requested, segment_seconds=segment_seconds, context_frames=context_frames)
    return sp.pixel_frames, sp.max_pass_frames, sp.max_pass_audio_frames, sp.count, sp.context_frames


def build_geometry(width: int, height: int, *, seconds: float | None = None, frames: int | None = None,
                   fps: int = L.FPS, audio: bool = True, text_tokens: int = 256,
                   references: tuple[ReferenceSpec, ...] = (), keyframes: tuple[KeyframeSpec, ...] = (),
                   reference_budget: str = "low", ref_image_size: str = "match",
                   segment_seconds: float | None = None, context_frames: int | None = None,
                   passes: SegmentPlan | None = None) -> Geometry:
    """The packed sequence of a width x height, `seconds` (or `frames`) long H3 job, sized as ComfyUI does.

    With `segment_seconds` the job runs as `segments.timeline.plan_segments` passes (each later one re-reading
    `context_frames` of the previous, default 22) and the geometry is that of the longest pass. A caller that
    already planned the segments hands them in as `passes` (they are not planned again).
    """
    check_int("width", width, L.CANVAS_MULTIPLE, MAX_EDGE_PX, "Use the video width in pixels (step 32).")
    check_int("height", height, L.CANVAS_MULTIPLE, MAX_EDGE_PX, "Use the video height in pixels (step 32).")
    if fps != L.FPS:
        raise LongMediaInputError("fps", fps, "24 (H3's native frame rate)",
                                  "H3 generates at 24 fps; resample the finished video if you need another rate.")
    asked = ("frames", frames) if frames is not None else ("seconds", seconds)
    total, pass_frames, audio_t, passes, context = _passes(requested_frames(seconds, frames, fps),
                                                           segment_seconds, context_frames, passes, asked)
    return pass_geometry(width, height, pass_frames=pass_frames, audio_latent_frames=audio_t, total_frames=total,
                         segment_count=passes, context_frames=context, audio=audio, text_tokens=text_tokens,
                         references=references, keyframes=keyframes, reference_budget=reference_budget,
                         ref_image_size=ref_image_size)
