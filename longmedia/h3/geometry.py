"""The packed H3 sequence of one sampling pass, row for row as ComfyUI's `PackedLayout` builds it.

Order of row spans (stock): text | keyframe cond rows (video, then its audio) | references (pictures,
then videos with their soundtrack rows first, then standalone audio) | target audio | target video.
The text row span is the prompt plus the presentation Qwen3-VL builds for keyframe pictures and
references (labels and vision tokens), so references cost rows twice: in the text and as latents.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import LongMediaInputError, check_choice, check_int
from ..limits import MAX_EDGE_PX, MAX_TEXT_TOKENS
from . import lattice as L
from .references import (
    REFERENCE_BUDGETS,
    KeyframeSpec,
    ReferenceBudget,
    ReferenceSpec,
    ResolvedReference,
    resolve_keyframes,
    resolve_references,
)

__all__ = ["Geometry", "RowSpan", "pass_geometry"]



@dataclass(frozen=True)
class RowSpan:
    """One contiguous row span of the packed sequence: stock `PackedLayout` kind, rows, and what it holds."""

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
    row_spans: tuple[RowSpan, ...]
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
        return sum(s.rows for s in self.row_spans)

    def rows_of(self, *kinds: str) -> int:
        return sum(s.rows for s in self.row_spans if s.kind in kinds)

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


def pass_geometry(width: int, height: int, *, pass_frames: int, audio_latent_frames: int, total_frames: int,
                  segment_count: int = 1, context_frames: int = 0, audio: bool = True, text_tokens: int = 256,
                  references: tuple[ReferenceSpec, ...] = (), keyframes: tuple[KeyframeSpec, ...] = (),
                  reference_budget: str = "low", ref_image_size: str = "match") -> Geometry:
    """The packed sequence of one `pass_frames`-long pass of a width x height job, sized as ComfyUI does.

    The pass lengths come from the caller (`job.geometry.build_geometry` plans the segments of a long job).
    """
    check_int("width", width, L.CANVAS_MULTIPLE, MAX_EDGE_PX, "Use the video width in pixels (step 32).")
    check_int("height", height, L.CANVAS_MULTIPLE, MAX_EDGE_PX, "Use the video height in pixels (step 32).")
    check_int("text_tokens", text_tokens, 0, MAX_TEXT_TOKENS, "Give the prompt length in Qwen tokens.")
    check_choice("reference_budget", reference_budget, tuple(REFERENCE_BUDGETS))
    check_choice("ref_image_size", ref_image_size, ("match", "max"))
    budget = REFERENCE_BUDGETS[reference_budget]
    per_frame = L.frame_rows(width, height)
    audio_t = audio_latent_frames

    kf_rows, kf_prompt = resolve_keyframes(tuple(keyframes), pass_frames, audio_t, per_frame, width, height,
                                           has_references=bool(references))
    kf_spans = tuple(RowSpan(*s) for s in kf_rows)
    refs = resolve_references(tuple(references), budget, pass_frames, width, height, ref_image_size)
    ref_rows = sum(r.rows + r.prompt_tokens for r in refs)
    if budget.total_rows is not None and ref_rows > budget.total_rows:
        raise LongMediaInputError("references", f"{len(refs)} references, {ref_rows} rows",
                                  f"at most {budget.total_rows} reference rows under reference_budget="
                                  f"{reference_budget!r}",
                                  "Raise reference_budget, or use fewer, smaller or shorter references.")

    text_rows = max(1, text_tokens + kf_prompt + sum(r.prompt_tokens for r in refs))
    spans = [RowSpan("text", text_rows, "prompt and reference presentation")]
    spans += kf_spans
    for r in refs:
        spans += [RowSpan(kind, rows, r.label) for kind, rows in r.row_spans]
    spans.append(RowSpan("audio", audio_t * L.AUDIO_ROWS_PER_FRAME,
                             f"target audio ({audio_t} latent frames x stereo)"))
    spans.append(RowSpan("video", L.latent_frames(pass_frames) * per_frame,
                             f"target video ({L.latent_frames(pass_frames)} latent frames x {per_frame} rows)"))
    return Geometry(width=width, height=height, frames=pass_frames, audio_latent_frames=audio_t,
                    row_spans=tuple(spans), prompt_tokens=text_tokens, references=refs,
                    keyframes=tuple(keyframes), reference_budget=budget, audio=bool(audio),
                    total_frames=total_frames, segment_count=segment_count, context_frames=context_frames)
