"""References, keyframe guides and the reference budget: what each one adds to the packed H3 sequence."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LongMediaInputError, check_choice, check_float, check_int
from ..limits import MAX_EDGE_PX
from . import lattice as L

REFERENCE_KINDS = ("picture", "video", "audio")
_MAX_REF_SECONDS = 600.0


@dataclass(frozen=True)
class ReferenceBudget:
    """Caps Setup enforces on references before they reach the stock H3 nodes; None = no cap beyond stock."""

    name: str
    picture_pixels: int | None      # pixels per picture reference (after stock sizing)
    video_pixels: int | None        # pixels per frame of a reference video
    video_frames: int | None        # frames per reference video (cropped down to the 17k+5 lattice)
    audio_seconds: float | None     # seconds per audio reference or soundtrack
    total_rows: int | None          # reference rows in the DiT plus their prompt tokens, all references together


REFERENCE_BUDGETS: dict[str, ReferenceBudget] = {
    "low": ReferenceBudget("low", 512 * 512, 512 * 288, 22, 5.0, 4096),
    "medium": ReferenceBudget("medium", 768 * 768, 640 * 384, 56, 10.0, 12288),
    "high": ReferenceBudget("high", 1344 * 768, 1024 * 576, 124, 20.0, 32768),
    "max": ReferenceBudget("max", None, None, None, None, None),
}


@dataclass(frozen=True)
class ReferenceSpec:
    """One reference as the user hands it in: a picture (w x h), a video (w x h, seconds) or audio (seconds)."""

    kind: str
    width: int = 0
    height: int = 0
    seconds: float = 0.0
    frames: int = 0                  # video: frame count at 24 fps instead of seconds
    with_audio: bool = False         # video: its soundtrack rides along
    audio_seconds: float = 0.0       # video soundtrack length when it differs from the video's

    def __post_init__(self) -> None:
        check_choice("reference kind", self.kind, REFERENCE_KINDS)
        fix = f"Describe the {self.kind} reference by its source size and length."
        if self.kind in ("picture", "video"):
            check_int(f"{self.kind} reference width", self.width, 1, MAX_EDGE_PX, fix)
            check_int(f"{self.kind} reference height", self.height, 1, MAX_EDGE_PX, fix)
        if self.kind == "video" and not self.frames:
            check_float("video reference seconds", self.seconds, 5 / L.FPS, _MAX_REF_SECONDS, fix)
        if self.kind == "video" and self.frames:
            check_int("video reference frames", self.frames, L.MIN_FRAMES, int(_MAX_REF_SECONDS * L.FPS), fix)
        if self.kind == "audio":
            check_float("audio reference seconds", self.seconds, 1 / L.AUDIO_LATENT_FPS, _MAX_REF_SECONDS, fix)

    @property
    def source_frames(self) -> int:
        return self.frames or round(self.seconds * L.FPS)

    @property
    def soundtrack_seconds(self) -> float:
        return self.audio_seconds or self.seconds or self.frames / L.FPS


@dataclass(frozen=True)
class KeyframeSpec:
    """A guide anchored in the target: a picture (frames=1), a 17k+5 clip, and/or audio, at `frame_index`.

    in_prompt: the first/last-frame pictures of MiniMaxH3ImageToVideo, which Qwen also sees in the prompt.
    """

    frame_index: int = 0
    frames: int = 1                 # 0 = audio only
    audio_seconds: float = 0.0
    in_prompt: bool = False


@dataclass(frozen=True)
class ResolvedReference:
    """A reference after stock sizing and the budget's caps: its packed row spans and its prompt tokens."""

    spec: ReferenceSpec
    label: str
    width: int
    height: int
    frames: int
    audio_latent_frames: int
    row_spans: tuple[tuple[str, int], ...]
    prompt_tokens: int
    capped: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.row_spans)


def _picture(spec: ReferenceSpec, ordinal: int, budget: ReferenceBudget, tw: int, th: int,
             sizing: str) -> ResolvedReference:
    w, h = L.reference_picture_size(spec.width, spec.height, tw, th, sizing)
    cw, ch = L.cap_area(w, h, budget.picture_pixels)
    capped = (f"Picture {ordinal}: {w}x{h} -> {cw}x{ch} (reference_budget {budget.name!r})",) if (cw, ch) != (w, h) else ()
    rows = (cw // L.CANVAS_MULTIPLE) * (ch // L.CANVAS_MULTIPLE)
    tokens = L.picture_label_tokens(ordinal) + L.qwen_vision_tokens(cw, ch)
    return ResolvedReference(spec, f"Picture {ordinal}", cw, ch, 1, 0, (("ref_img", rows),), tokens, capped)


def _audio_frames(seconds: float, budget: ReferenceBudget, label: str) -> tuple[int, tuple[str, ...]]:
    if budget.audio_seconds is not None and seconds > budget.audio_seconds:
        note = f"{label}: {seconds:g} s -> {budget.audio_seconds:g} s (reference_budget {budget.name!r})"
        return L.audio_latent_frames(budget.audio_seconds), (note,)
    return L.audio_latent_frames(seconds), ()


def _video(spec: ReferenceSpec, ordinal: int, audio_ordinal: int, budget: ReferenceBudget,
           frame_count: int) -> ResolvedReference:
    label = f"Video {ordinal}"
    w, h = L.reference_video_canvas(spec.width, spec.height)
    cw, ch = L.cap_area(w, h, budget.video_pixels)
    capped = [f"{label}: {w}x{h} -> {cw}x{ch} per frame"] if (cw, ch) != (w, h) else []
    n = min(spec.source_frames, frame_count)
    if n < L.MIN_FRAMES:
        raise LongMediaInputError(f"{label} frames", n, f"at least {L.MIN_FRAMES} frames (~0.2 s at 24 fps)",
                                  "Use a longer reference video.")
    n = L.snap_frames_down(n)
    if budget.video_frames is not None and n > budget.video_frames:
        capped.append(f"{label}: {n} -> {L.snap_frames_down(budget.video_frames)} frames")
        n = L.snap_frames_down(budget.video_frames)
    spans: list[tuple[str, int]] = []
    tokens = 0
    rt = 0
    if spec.with_audio:
        rt, notes = _audio_frames(spec.soundtrack_seconds, budget, f"Audio {audio_ordinal} (soundtrack of {label})")
        capped += notes
        spans.append(("ref_audio", rt * L.AUDIO_ROWS_PER_FRAME))
        tokens += L.audio_label_tokens(audio_ordinal)
    rows = L.latent_frames(n) * (cw // L.CANVAS_MULTIPLE) * (ch // L.CANVAS_MULTIPLE)
    spans.append(("ref_img", rows))
    tokens += L.reference_video_prompt_tokens(ordinal, n, cw, ch)
    if capped:
        capped[0] += f" (reference_budget {budget.name!r})"
    return ResolvedReference(spec, label, cw, ch, n, rt, tuple(spans), tokens, tuple(capped))


def resolve_references(refs: tuple[ReferenceSpec, ...], budget: ReferenceBudget, frame_count: int,
                       target_w: int, target_h: int, sizing: str) -> tuple[ResolvedReference, ...]:
    """References in stock packing order (pictures, videos, audio), sized and capped."""
    for i, r in enumerate(refs):
        if not isinstance(r, ReferenceSpec):
            raise LongMediaInputError(f"references[{i}]", r, "a ReferenceSpec", "Build references with ReferenceSpec.")
    counts = {k: sum(r.kind == k for r in refs) for k in REFERENCE_KINDS}
    for kind, most in (("picture", 9), ("video", 3)):
        if counts[kind] > most:
            raise LongMediaInputError(f"{kind} references", counts[kind], f"at most {most} (stock node inputs)",
                                      f"Drop {counts[kind] - most} {kind} reference(s).")
    if counts["audio"] > 3:
        raise LongMediaInputError("audio references", counts["audio"], "at most 3 (stock node inputs)",
                                  f"Drop {counts['audio'] - 3} audio reference(s).")
    out: list[ResolvedReference] = []
    audio_ordinal = 0
    for i, spec in enumerate(r for r in refs if r.kind == "picture"):
        out.append(_picture(spec, i + 1, budget, target_w, target_h, sizing))
    for i, spec in enumerate(r for r in refs if r.kind == "video"):
        audio_ordinal += spec.with_audio
        out.append(_video(spec, i + 1, audio_ordinal, budget, frame_count))
    for spec in (r for r in refs if r.kind == "audio"):
        audio_ordinal += 1
        label = f"Audio {audio_ordinal}"
        rt, notes = _audio_frames(spec.seconds, budget, label)
        if notes:
            notes = (notes[0] + f" (reference_budget {budget.name!r})",) if "reference_budget" not in notes[0] else notes
        out.append(ResolvedReference(spec, label, 0, 0, 0, rt, (("ref_audio", rt * L.AUDIO_ROWS_PER_FRAME),),
                                     L.audio_label_tokens(audio_ordinal), notes))
    return tuple(out)


def resolve_keyframes(keyframes: tuple[KeyframeSpec, ...], frame_count: int, audio_t: int, per_frame: int,
                      width: int, height: int, *, has_references: bool):
    """((kind, rows, label) cond row spans, prompt tokens) of the keyframe guides, validated like the stock nodes."""
    spans = []
    prompt_tokens = 0
    pictures = 0
    for i, kf in enumerate(keyframes):
        name = f"keyframes[{i}]"
        if not isinstance(kf, KeyframeSpec):
            raise LongMediaInputError(name, kf, "a KeyframeSpec", "Build keyframes with KeyframeSpec.")
        check_int(f"{name}.frames", kf.frames, 0, L.MAX_STOCK_FRAMES, "Use 1 for a picture or a 17k+5 clip.")
        if kf.frames > 1 and not L.is_lattice_frames(kf.frames):
            raise LongMediaInputError(f"{name}.frames", kf.frames, "1 or a 17k+5 count (5, 22, 39 ...)",
                                      f"Use {L.snap_frames_down(kf.frames) if kf.frames >= 5 else 1} frames.")
        if kf.frames == 0 and kf.audio_seconds <= 0:
            raise LongMediaInputError(name, kf, "a picture, a clip or audio", "Give frames >= 1 or audio_seconds > 0.")
        if kf.in_prompt and (has_references or kf.frames != 1):
            raise LongMediaInputError(f"{name}.in_prompt", True, "False with references or clips",
                                      "Only single first/last-frame pictures enter the prompt without references; "
                                      "anchor the rest as guides.")
        check_int(f"{name}.frame_index", kf.frame_index, -frame_count, frame_count - 1,
                  "Anchor the guide inside the video (negative counts from the end).")
        index = kf.frame_index if kf.frame_index >= 0 else frame_count + kf.frame_index
        span = max(1, kf.frames)
        if index + span > frame_count:
            raise LongMediaInputError(f"{name}.frame_index", kf.frame_index,
                                      f"at most {frame_count - span} for a {span}-frame guide in {frame_count} frames",
                                      "Anchor the clip earlier or shorten it.")
        if kf.in_prompt:
            pictures += 1
            prompt_tokens += L.picture_label_tokens(pictures) + L.qwen_vision_tokens(width, height)
        if kf.frames:
            spans.append(("cond", L.latent_frames(kf.frames) * per_frame,
                                        f"guide at frame {index} ({kf.frames} frame{'s' * (kf.frames > 1)})"))
        if kf.audio_seconds > 0:
            check_float(f"{name}.audio_seconds", kf.audio_seconds, 1 / L.AUDIO_LATENT_FPS, _MAX_REF_SECONDS,
                        "Give the guide audio length in seconds.")
            room = L.max_anchor_audio_frames(audio_t, index)
            if room < 1:
                raise LongMediaInputError(f"{name}.frame_index", kf.frame_index, "a frame before the audio track ends",
                                          "Anchor the guide audio earlier.")
            rt = min(L.audio_latent_frames(kf.audio_seconds), room)
            spans.append(("cond_audio", rt * L.AUDIO_ROWS_PER_FRAME, f"guide audio at frame {index}"))
    return tuple(spans), prompt_tokens
