"""The packed H3 sequence of one sampling pass, row for row as ComfyUI's `PackedLayout` builds it.

Order of segments (stock): text | keyframe cond rows (video, then its audio) | references (pictures,
then videos with their soundtrack rows first, then standalone audio) | target audio | target video.
The text segment is the prompt plus the presentation Qwen3-VL builds for keyframe pictures and
references (labels and vision tokens), so references cost rows twice: in the text and as latents.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from . import lattice as L
from ..errors import LongMediaInputError, check_choice, check_float, check_int
from .references import (REFERENCE_BUDGETS, KeyframeSpec, ReferenceBudget, ReferenceSpec,
                         ResolvedReference, resolve_keyframes, resolve_references)
from ..segments.timeline import DEFAULT_CONTEXT_FRAMES, plan_segments

__all__ = ["Geometry", "SegmentRows", "ReferenceSpec", "KeyframeSpec", "ReferenceBudget", "ResolvedReference",
           "REFERENCE_BUDGETS", "build_geometry", "LongMediaInputError"]

MAX_PIXELS_EDGE = 16384
MAX_TEXT_TOKENS = 32768
MAX_TOTAL_SECONDS = 3600.0


@dataclass(frozen=True)
class SegmentRows:
    """One contiguous segment of the packed sequence: stock `PackedLayout` kind, rows, and what it holds."""

    kind: str   # text / cond / cond_audio / ref_img / ref_audio / audio / video
    rows: int
    label: str


@dataclass(frozen=True)
class Geometry:
    """Rows of the packed sequence of one pass (the longest one when the video is segmented)."""

    width: int
    height: int
    frames: int                    # pixel frames of one pass, on the 17k+5 lattice
    audio_latent_frames: int
    segments: tuple[SegmentRows, ...]
    prompt_tokens: int
    references: tuple[ResolvedReference, ...] = ()
    keyframes: tuple[KeyframeSpec, ...] = ()
    reference_budget: ReferenceBudget = field(default_factory=lambda: REFERENCE_BUDGETS["max"])
    audio: bool = True             # H3 always packs its audio stream; False only marks it as discarded
    total_frames: int = 0          # frames of the whole video (== frames for a single pass)
    segment_count: int = 1
    context_frames: int = 0        # frames each later pass re-reads from the previous one (inside the pass)

    @property
    def latent_width(self) -> int:
        return L.latent_cells(self.width)

    @property
    def latent_height(self) -> int:
        return L.latent_cells(self.height)

    @property
    def canvas_width(self) -> int:
        """Pixels the DiT sees across (latent padded to the 2x2 patch)."""
        return L.patch_cells(self.latent_width) * L.CANVAS_MULTIPLE

    @property
    def canvas_height(self) -> int:
        return L.patch_cells(self.latent_height) * L.CANVAS_MULTIPLE

    @property
    def latent_frames(self) -> int:
        return L.latent_frames(self.frames)

    @property
    def rows_per_latent_frame(self) -> int:
        return L.frame_rows(self.width, self.height)

    @property
    def seq_len(self) -> int:
        return sum(s.rows for s in self.segments)

    def rows_of(self, *kinds: str) -> int:
        return sum(s.rows for s in self.segments if s.kind in kinds)

    @property
    def text_rows(self) -> int:
        return self.rows_of("text")

    @property
    def presentation_tokens(self) -> int:
        """Text rows that are not the prompt: labels and vision tokens of pictures and references."""
        return self.text_rows - self.prompt_tokens

    @property
    def video_rows(self) -> int:
        return self.rows_of("video")

    @property
    def audio_rows(self) -> int:
        return self.rows_of("audio")

    @property
    def cond_rows(self) -> int:
        return self.rows_of("cond", "cond_audio")

    @property
    def reference_rows(self) -> int:
        return self.rows_of("ref_img", "ref_audio")

    @property
    def seconds(self) -> float:
        return L.seconds_for_frames(self.frames)

    @property
    def total_seconds(self) -> float:
        return L.seconds_for_frames(self.total_frames or self.frames)

    @property
    def video_latent_shape(self) -> tuple[int, int, int, int, int]:
        """Shape of the stock empty video latent [1, 24, T, H/16, W/16]."""
        return (1, 24, self.latent_frames, self.latent_height, self.latent_width)

    @property
    def audio_latent_shape(self) -> tuple[int, int, int, int]:
        return (1, 32, L.AUDIO_ROWS_PER_FRAME, self.audio_latent_frames)

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("seq_len", "canvas_width", "canvas_height", "latent_frames", "rows_per_latent_frame",
                     "text_rows", "video_rows", "audio_rows", "cond_rows", "reference_rows", "seconds",
                     "total_seconds"):
            out[name] = getattr(self, name)
        return out


def _requested_frames(seconds: float | None, frames: int | None, fps: int) -> int:
    """Frames asked for (before lattice snapping)."""
    if (seconds is None) == (frames is None):
        raise LongMediaInputError("duration", {"seconds": seconds, "frames": frames},
                                  "exactly one of seconds or frames", "Give the duration once.")
    if frames is not None:
        return check_int("frames", frames, 1, int(MAX_TOTAL_SECONDS * L.FPS), "Give the frame count at 24 fps.")
    check_float("seconds", seconds, 0.04, MAX_TOTAL_SECONDS, "Give the video length in seconds.")
    return max(1, math.ceil(seconds * fps - 1e-9))


def _segmenting(requested: int, segment_seconds: float | None, context_frames: int | None,
                asked: tuple[str, float | int] = ("frames", 0)) -> tuple[int, int, int, int, int]:
    """(total frames, frames of the longest pass, its audio latent frames, passes, context frames).

    `asked`: the duration input as the user gave it (name, value), so a limit is stated against it.
    """
    total = L.snap_frames(requested)
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
    sp = plan_segments(total_frames=requested, segment_seconds=segment_seconds,
                       context_frames=DEFAULT_CONTEXT_FRAMES if context_frames is None else context_frames)
    return sp.pixel_frames, sp.max_pass_frames, sp.max_pass_audio_frames, sp.count, sp.context_frames


def build_geometry(width: int, height: int, *, seconds: float | None = None, frames: int | None = None,
                   fps: int = L.FPS, audio: bool = True, text_tokens: int = 256,
                   references: tuple[ReferenceSpec, ...] = (), keyframes: tuple[KeyframeSpec, ...] = (),
                   reference_budget: str = "low", ref_image_size: str = "match",
                   segment_seconds: float | None = None, context_frames: int | None = None) -> Geometry:
    """The packed sequence of a width x height, `seconds` (or `frames`) long H3 job, sized as ComfyUI does.

    With `segment_seconds` the job runs as `segments.plan_segments` passes (each later one re-reading
    `context_frames` of the previous, default 22) and the geometry is that of the longest pass.
    """
    check_int("width", width, L.CANVAS_MULTIPLE, MAX_PIXELS_EDGE, "Use the video width in pixels (step 32).")
    check_int("height", height, L.CANVAS_MULTIPLE, MAX_PIXELS_EDGE, "Use the video height in pixels (step 32).")
    if fps != L.FPS:
        raise LongMediaInputError("fps", fps, "24 (H3's native frame rate)",
                                  "H3 generates at 24 fps; resample the finished video if you need another rate.")
    check_int("text_tokens", text_tokens, 0, MAX_TEXT_TOKENS, "Give the prompt length in Qwen tokens.")
    check_choice("reference_budget", reference_budget, tuple(REFERENCE_BUDGETS))
    check_choice("ref_image_size", ref_image_size, ("match", "max"))
    budget = REFERENCE_BUDGETS[reference_budget]

    requested = _requested_frames(seconds, frames, fps)
    asked = ("frames", frames) if frames is not None else ("seconds", seconds)
    total, pass_frames, audio_t, passes, context = _segmenting(requested, segment_seconds, context_frames, asked)
    per_frame = L.frame_rows(width, height)

    kf_rows, kf_prompt = resolve_keyframes(tuple(keyframes), pass_frames, audio_t, per_frame, width, height,
                                               has_references=bool(references))
    kf_segments = tuple(SegmentRows(*s) for s in kf_rows)
    refs = resolve_references(tuple(references), budget, pass_frames, width, height, ref_image_size)
    ref_rows = sum(r.rows + r.prompt_tokens for r in refs)
    if budget.total_rows is not None and ref_rows > budget.total_rows:
        raise LongMediaInputError("references", f"{len(refs)} references, {ref_rows} rows", 
                                  f"at most {budget.total_rows} reference rows under reference_budget="
                                  f"{reference_budget!r}",
                                  "Raise reference_budget, or use fewer, smaller or shorter references.")

    text_rows = max(1, text_tokens + kf_prompt + sum(r.prompt_tokens for r in refs))
    segments = [SegmentRows("text", text_rows, "prompt and reference presentation")]
    segments += kf_segments
    for r in refs:
        segments += [SegmentRows(kind, rows, r.label) for kind, rows in r.segments]
    segments.append(SegmentRows("audio", audio_t * L.AUDIO_ROWS_PER_FRAME,
                                f"target audio ({audio_t} latent frames x stereo)"))
    segments.append(SegmentRows("video", L.latent_frames(pass_frames) * per_frame,
                                f"target video ({L.latent_frames(pass_frames)} latent frames x {per_frame} rows)"))
    return Geometry(width=width, height=height, frames=pass_frames, audio_latent_frames=audio_t,
                    segments=tuple(segments), prompt_tokens=text_tokens, references=refs,
                    keyframes=tuple(keyframes), reference_budget=budget, audio=bool(audio),
                    total_frames=total, segment_count=passes, context_frames=context)
