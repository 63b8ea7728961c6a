"""Fixed segments for long H3 jobs: each pass re-reads a context tail of the previous one, then adds new time.

Timeline (on the assembled result; pixel frames at 24 fps, video latents, audio latents at 40 Hz):

* The job is `total` = 17M+5 frames, exactly what EmptyMiniMaxH3LatentAV gives for it (5M+2 video
  latents, round(total * 5/3) audio latents).
* Segment 0 is a plain pass of 17j+5 frames (the stock snap of `segment_seconds`). Every later
  segment adds 17j new frames (the last one 17r, 1 <= r <= j: the trim), i.e. segment_seconds within
  one clip, behind the previous pass's last `context` = 17k+5 frames (k < j): a 17(j+k)+5-frame pass.
* A later pass starts on a 17-frame VAE clip (result frame 17n = latent 5n): pass frame p is result
  frame pass_start + p and pass latent t is result latent 5n + t, with the (1, 4, 4, 4, 4) frames per
  latent lined up, so a pass is one contiguous slice of the assembled latent. Its first 5k+2 latents
  (the context) are the previous pass's last 5k+2, covering exactly its last 17k+5 frames. H3's VAE
  encodes independent 17-frame clips causally, so they equal what encoding those pixels gives
  (bit-identical with a random-weight VAE). New content starts 2 latents into the pass's clip k.
* Audio: frame boundary f sits at audio latent b(f) = round(5f/3) (stock rounding: b(total) is the
  stock length). A pass's audio is the slice [b(start), b(end)), its context [b(start), b(new_start));
  the slice may differ by one frame from the stock round(5 * pass_frames / 3) (`stock_audio_frames`).
* The result drops every context prefix: segment i contributes `video_latent_range` and
  `audio_range`, which tile the job's latents.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from ..errors import LongMediaInputError, check_float, check_int
from ..h3 import lattice as L
from ..limits import MAX_FRAMES, MAX_SECONDS

__all__ = ["Segment", "SegmentPlan", "plan_segments", "latent_boundary", "audio_boundary",
           "DEFAULT_CONTEXT_FRAMES", "MAX_SEGMENT_SECONDS"]

DEFAULT_CONTEXT_FRAMES = 22
MAX_SEGMENT_SECONDS = L.MAX_STOCK_FRAMES / L.FPS    # a pass is at most one stock-sized latent (3609 frames)
_CLIP_LATENT_BOUNDARY = {0: 0, 1: 1, 5: 2, 9: 3, 13: 4}   # frame offset in a 17-frame clip -> latents before it


def latent_boundary(frame: int) -> int:
    """Video latents covering pixel frames [0, frame); `frame` must be a latent boundary (e.g. 17n or 17n+5)."""
    clips, rest = divmod(frame, L.CLIP_FRAMES)
    if frame < 0 or rest not in _CLIP_LATENT_BOUNDARY:
        raise ValueError(f"pixel frame {frame} does not start a video latent frame (17n + 0/1/5/9/13)")
    return clips * L.LATENTS_PER_CLIP + _CLIP_LATENT_BOUNDARY[rest]


def audio_boundary(frame: int) -> int:
    """Audio latent at pixel frame boundary `frame`: round(frame * 40 / 24), in exact integers."""
    return (5 * frame + 1) // 3


@dataclass(frozen=True)
class Segment:
    """One pass. Frame fields are pixel frames of the assembled result; ranges are half-open."""

    index: int
    pass_start: int          # result pixel frame where the pass (context included) starts
    pass_frames: int         # pixel frames of the pass, on the 17k+5 lattice
    context_frames: int      # frames re-read from the previous pass (0 for the first segment)

    @property
    def new_frames(self) -> int:
        return self.pass_frames - self.context_frames

    @property
    def new_start(self) -> int:
        """Result pixel frame of the first new frame."""
        return self.pass_start + self.context_frames

    @property
    def pass_end(self) -> int:
        return self.pass_start + self.pass_frames

    @property
    def pixel_range(self) -> tuple[int, int]:
        """Result pixel frames this segment contributes (context dropped)."""
        return self.new_start, self.pass_end

    @property
    def latent_frames(self) -> int:
        """Video latent frames of the pass (its empty latent's T)."""
        return L.latent_frames(self.pass_frames)

    @property
    def context_latent_frames(self) -> int:
        return L.latent_frames(self.context_frames) if self.context_frames else 0

    @property
    def new_latent_frames(self) -> int:
        return self.latent_frames - self.context_latent_frames

    @property
    def pass_latent_range(self) -> tuple[int, int]:
        """The pass as a slice of the assembled video latent (context included)."""
        start = latent_boundary(self.pass_start)
        return start, start + self.latent_frames

    @property
    def context_latent_range(self) -> tuple[int, int]:
        """Result latents the context re-reads: the previous pass's last `context_latent_frames` latents."""
        start = self.pass_latent_range[0]
        return start, start + self.context_latent_frames

    @property
    def video_latent_range(self) -> tuple[int, int]:
        """Where the new content lands in the assembled video latent."""
        start, end = self.pass_latent_range
        return start + self.context_latent_frames, end

    @property
    def new_latent_slice(self) -> tuple[int, int]:
        """The new content inside the pass's own latent: keep pass_latent[:, :, a:b]."""
        return self.context_latent_frames, self.latent_frames

    @property
    def audio_start(self) -> int:
        """Offset of the pass's audio on the shared audio timeline (40 latent frames per second)."""
        return audio_boundary(self.pass_start)

    @property
    def audio_new_start(self) -> int:
        return audio_boundary(self.new_start)

    @property
    def audio_end(self) -> int:
        return audio_boundary(self.pass_end)

    @property
    def audio_frames(self) -> int:
        """Audio latent frames of the pass (its empty latent's last dim)."""
        return self.audio_end - self.audio_start

    @property
    def stock_audio_frames(self) -> int:
        """What EmptyMiniMaxH3LatentAV would give for `pass_frames` alone (may differ by 1 from `audio_frames`)."""
        return L.target_audio_frames(self.pass_frames)

    @property
    def context_audio_frames(self) -> int:
        return self.audio_new_start - self.audio_start

    @property
    def pass_audio_range(self) -> tuple[int, int]:
        """The pass's audio on the shared timeline (context included)."""
        return self.audio_start, self.audio_end

    @property
    def audio_range(self) -> tuple[int, int]:
        """Where the new audio lands in the assembled audio latent."""
        return self.audio_new_start, self.audio_end

    @property
    def new_audio_slice(self) -> tuple[int, int]:
        """The new audio inside the pass's own audio latent."""
        return self.context_audio_frames, self.audio_frames

    @property
    def seconds(self) -> float:
        return L.seconds_for_frames(self.pass_frames)

    @property
    def new_seconds(self) -> float:
        return L.seconds_for_frames(self.new_frames)

    def to_dict(self) -> dict:
        props = [n for n, v in vars(Segment).items() if isinstance(v, property)]
        return {**asdict(self), **{n: getattr(self, n) for n in props}}


@dataclass(frozen=True)
class SegmentPlan:
    """A long job as fixed passes; the assembled result is exactly the stock latent of the whole job."""

    segments: tuple[Segment, ...]
    requested_frames: int        # frames asked for (seconds * 24 rounded up), before lattice snapping
    segment_seconds: float
    context_frames: int          # context of every later pass (0 when the job fits one segment)
    audio: bool = True           # H3 always generates audio; False only marks it as discarded

    @property
    def count(self) -> int:
        return len(self.segments)

    @property
    def pixel_frames(self) -> int:
        """Pixel frames of the assembled result (on the 17k+5 lattice)."""
        return self.segments[-1].pass_end

    @property
    def video_latent_frames(self) -> int:
        return L.latent_frames(self.pixel_frames)

    @property
    def audio_latent_frames(self) -> int:
        return audio_boundary(self.pixel_frames)

    @property
    def seconds(self) -> float:
        return L.seconds_for_frames(self.pixel_frames)

    @property
    def max_pass_frames(self) -> int:
        """The longest pass: size the memory plan (geometry) for this one."""
        return max(s.pass_frames for s in self.segments)

    @property
    def max_pass_audio_frames(self) -> int:
        return max(s.audio_frames for s in self.segments)

    @property
    def generated_frames(self) -> int:
        """Pixel frames all passes denoise together, contexts included."""
        return sum(s.pass_frames for s in self.segments)

    @property
    def context_overhead(self) -> float:
        """Extra frames passed through the model for contexts, as a fraction of the result."""
        return self.generated_frames / self.pixel_frames - 1.0

    def describe(self, prompts: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """Plain-text report lines: a summary, then one row per segment (`prompts`: each segment's prompt, shown
        already shortened by the caller)."""
        head = (f"{self.count} segment{'s' if self.count != 1 else ''}: {self.pixel_frames} frames "
                f"({self.seconds:.2f} s, {self.video_latent_frames} video / {self.audio_latent_frames} audio "
                f"latent frames{'' if self.audio else ', audio discarded'}), context {self.context_frames} frames, "
                f"{self.context_overhead:.1%} re-generated")
        rows = [head, "seg | pass frames | context | new frames -> result frames | video latents -> result "
                      "| audio -> result | start | duration" + (" | prompt" if prompts is not None else "")]
        for s in self.segments:
            rows.append(f"{s.index} | {s.pass_frames} ({s.seconds:.2f} s) | {s.context_frames} | "
                        f"{s.new_frames} -> [{s.new_start}, {s.pass_end}) | {s.latent_frames} "
                        f"-> [{s.video_latent_range[0]}, {s.video_latent_range[1]}) | {s.audio_frames} "
                        f"-> [{s.audio_range[0]}, {s.audio_range[1]}) | {L.seconds_for_frames(s.new_start):.2f} s | "
                        f"{s.new_seconds:.2f} s" + (f" | {prompts[s.index]}" if prompts is not None else ""))
        return tuple(rows)

    def to_dict(self) -> dict:
        props = [n for n, v in vars(SegmentPlan).items() if isinstance(v, property)]
        return {"kind": "segment_plan", **asdict(self), "segments": [s.to_dict() for s in self.segments],
                **{n: getattr(self, n) for n in props}}

    def signature(self) -> str:
        """A short digest of the whole plan (every segment's place and size): what a latent carries to say which
        job's segments it was made for (`LATENT_SEGMENTS_KEY`)."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _requested_frames(total_seconds: float | None, total_frames: int | None) -> int:
    if (total_seconds is None) == (total_frames is None):
        raise LongMediaInputError("duration", {"total_seconds": total_seconds, "total_frames": total_frames},
                                  "exactly one of total_seconds or total_frames",
                                  "Give the job's length once, in seconds or in frames at 24 fps.")
    if total_frames is not None:
        return check_int("total_frames", total_frames, 1, MAX_FRAMES,
                         "Give the whole job's frame count at 24 fps (at most one hour).")
    seconds = _positive_seconds("total_seconds", total_seconds, MAX_SECONDS,
                                "Give the whole job's length in seconds (at most one hour).")
    return max(1, math.ceil(seconds * L.FPS - 1e-9))


def _positive_seconds(name: str, value: object, high: float, fix: str) -> float:
    """`value` in (0, high], with one range text for every value outside it (negative, zero, too large)."""
    allowed = f"a number above 0 up to {high:g}"
    try:
        value = check_float(name, value, 0.0, high, fix)
    except LongMediaInputError:  # named: the same check, restated with the open lower end
        raise LongMediaInputError(name, value, allowed, fix) from None
    if value <= 0.0:
        raise LongMediaInputError(name, value, allowed, fix)
    return value


def _check_context(context_frames: object) -> int:
    return L.check_lattice_frames("context_frames", context_frames,
                                  "Use 5, 22, 39 ... (17k+5) frames of context, fewer than a segment's new frames.")


def _check_context_fits(context_frames: int, segment_new_frames: int, segment_seconds: float,
                        context_given: bool) -> int:
    """Context below a segment's new frames. When the user left context_frames at its default, the segment
    length is what they chose, so the error names segment_seconds."""
    if context_frames < segment_new_frames:
        return context_frames
    if not context_given:
        clips = context_frames // L.CLIP_FRAMES + 1         # the fewest 17-frame clips above the context
        shortest = (clips * L.CLIP_FRAMES + L.MIN_FRAMES) / L.FPS
        raise LongMediaInputError("segment_seconds", segment_seconds,
                                  f"at least {shortest:.3f} s: a segment's new frames must outnumber the "
                                  f"{context_frames} context frames each later segment re-reads",
                                  f"Raise segment_seconds to {shortest:.3f} or more (4-10 s are the usual "
                                  "starting points), or set context_frames to 5.")
    raise LongMediaInputError("context_frames", context_frames,
                              f"a 17k+5 count below the {segment_new_frames} new frames of a segment",
                              "Lower context_frames or raise segment_seconds.")


def plan_segments(total_seconds: float | None = None, total_frames: int | None = None, *,
                  segment_seconds: float, context_frames: int | None = DEFAULT_CONTEXT_FRAMES, fps: int = L.FPS,
                  audio: bool = True) -> SegmentPlan:
    """Split a job into fixed passes of `segment_seconds` new time each plus `context_frames` of context.

    Pass seeds are not part of the plan: they come from the noise node when the job runs
    (`segments.seams.segment_seeds`), and the run report lists them.
    A job whose lattice length equals one segment is a single pass without context. `context_frames` None is
    the default (22) left unset by the user: a segment too short for it is then an error about segment_seconds.
    """
    if fps != L.FPS:
        raise LongMediaInputError("fps", fps, "24 (H3's native frame rate)",
                                  "H3 generates at 24 fps; resample the finished video if you need another rate.")
    requested = _requested_frames(total_seconds, total_frames)
    total = L.snap_frames(requested)
    context_given = context_frames is not None
    context = _check_context(DEFAULT_CONTEXT_FRAMES if context_frames is None else context_frames)
    segment_seconds = _positive_seconds("segment_seconds", segment_seconds, MAX_SEGMENT_SECONDS,
                                        "Pick the new time per segment, at most one stock pass.")
    first = L.frames_for_seconds(segment_seconds)            # 17j + 5
    clips = (first - L.MIN_FRAMES) // L.CLIP_FRAMES            # j: new 17-frame clips per later segment
    if first > total:
        raise LongMediaInputError("segment_seconds", segment_seconds,
                                  f"at most the job's {total / L.FPS:.3f} s ({total} frames on the 17k+5 lattice)",
                                  "Shorten segment_seconds, or run the job as one pass without segments.")
    if first == total:   # the whole job is one segment: no context to re-read
        return SegmentPlan((Segment(0, 0, total, 0),), requested,
                           segment_seconds, 0, bool(audio))
    if clips < 1:
        raise LongMediaInputError("segment_seconds", segment_seconds,
                                  f"above {L.MIN_FRAMES / L.FPS:.3f} s (at least one 17-frame clip of new time)",
                                  "Raise segment_seconds; 4-10 s are the usual starting points.")
    _check_context_fits(context, clips * L.CLIP_FRAMES, segment_seconds, context_given)
    context_clips = (context - L.MIN_FRAMES) // L.CLIP_FRAMES
    if L.CLIP_FRAMES * (clips + context_clips) + L.MIN_FRAMES > L.MAX_STOCK_FRAMES:
        raise LongMediaInputError("segment_seconds", segment_seconds,
                                  f"new time plus {context} context frames within one stock pass "
                                  f"({L.MAX_STOCK_FRAMES} frames)", "Shorten segment_seconds or context_frames.")
    remaining = (total - first) // L.CLIP_FRAMES               # clips after the first segment
    later = [clips] * (remaining // clips) + ([remaining % clips] if remaining % clips else [])
    segments = [Segment(0, 0, first, 0)]
    new_start = first
    for i, n in enumerate(later, start=1):
        segments.append(Segment(i, new_start - context, n * L.CLIP_FRAMES + context, context))
        new_start += n * L.CLIP_FRAMES
    return SegmentPlan(tuple(segments), requested, segment_seconds, context, bool(audio))
