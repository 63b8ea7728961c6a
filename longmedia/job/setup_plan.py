"""Setup's ComfyUI-free half: check the request, snap the duration, fit references to the budget, write the notes.

`plan_setup(SetupRequest) -> SetupPlan`: the job's geometry (reference caps applied), its segment plan,
what to do to each reference before the stock H3 nodes see it (`ReferencePrep`), and plain-language
notes. `longmedia/comfy/setup.py` reads the request off the node's tensors and applies the plan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import LongMediaInputError, check_choice, check_float, check_int
from ..h3 import lattice as L
from ..h3.geometry import Geometry
from ..h3.references import REFERENCE_BUDGETS, KeyframeSpec, ReferenceSpec
from ..limits import MAX_EDGE_PX, MAX_SECONDS, MAX_TEXT_TOKENS, MIN_SECONDS
from ..segments.prompts import NAME as SEGMENT_PROMPTS
from ..segments.prompts import segment_prompt_texts, short_prompt
from ..segments.timeline import DEFAULT_CONTEXT_FRAMES, MAX_SEGMENT_SECONDS, SegmentPlan, plan_segments
from .geometry import build_geometry
from .job import LongMediaJob
from .preflight import check_job_latent, check_pass_rows

FAMILIES = ("t2va", "fl2va", "ref2va")
SOURCES = ("positive", "clip")
TRAINED_FRAMES = (124, 362)          # H3's trained range per pass (~5-15 s)
SLOTS = {"picture": ("ref_image_", 9), "video": ("ref_video_", 3), "audio": ("ref_audio_", 3)}
SOUNDTRACK_PREFIX = "ref_video_audio_"
# core field -> Setup's input of that meaning (the reference rows cap is what reference_budget sets)
NODE_INPUTS = {"references": "reference_budget"}


@dataclass(frozen=True)
class MediaInput:
    """One connected reference input, described by what Setup reads off its tensor."""

    name: str                       # the node input: ref_image_2, ref_video_1, ref_audio_3
    kind: str                       # picture / video / audio
    width: int = 0
    height: int = 0
    frames: int = 0                 # picture: batch size; video: frame count at 24 fps
    seconds: float = 0.0            # audio: length
    soundtrack_seconds: float = 0.0  # video: length of its ref_video_audio_N (0 = no soundtrack)

    @property
    def slot(self) -> int:
        return int(self.name.rsplit("_", 1)[-1])


@dataclass(frozen=True)
class SetupRequest:
    """Setup's inputs as plain values (no tensors)."""

    width: int
    height: int
    seconds: float
    family: str = "t2va"
    reference_budget: str = "low"
    segment_seconds: float = 0.0
    context_frames: int = DEFAULT_CONTEXT_FRAMES
    ref_image_size: str = "match"
    prompt_tokens: int = 1          # the longest prompt's tokens (with segment_prompts: the longest segment's)
    conditioning: str = "positive"  # positive: CONDITIONING connected; clip: Setup encodes `prompt` itself
    first_frame: bool = False
    last_frame: bool = False
    references: tuple[MediaInput, ...] = ()
    have_vae: bool = False
    have_audio_vae: bool = False
    unused_prompt: bool = False     # text in Setup's prompt box while positive is connected
    ram_available_bytes: int | None = None   # RAM available for the job latent (None = check the hard cap only)
    prompt: str = ""                # Setup's prompt box (segments before a schedule's first time use it)
    segment_prompts: str = ""       # per-segment prompts: a list or a `0s: ...` schedule (segments/prompts.py)


@dataclass(frozen=True)
class ReferencePrep:
    """What Setup does to one reference before the stock node sizes it; None = leave it to the stock node."""

    name: str
    kind: str
    resize_to: tuple[int, int] | None = None       # (width, height): the budget shrank it
    keep_frames: int | None = None                 # video: frames kept (17k+5)
    keep_seconds: float | None = None              # audio reference: seconds kept
    soundtrack: str | None = None                  # video: its soundtrack input
    keep_soundtrack_seconds: float | None = None   # video: soundtrack seconds kept


@dataclass(frozen=True)
class SetupPlan:
    request: SetupRequest
    geometry: Geometry               # one pass (the longest), caps applied
    segments: SegmentPlan | None
    preps: tuple[ReferencePrep, ...]
    notes: tuple[str, ...]
    prompts: tuple[str, ...] | None = None     # every segment's prompt (segment_prompts), else None

    @property
    def total_frames(self) -> int:
        return self.geometry.total_frames or self.geometry.frames

    @property
    def pass_frames(self) -> int:
        return self.geometry.frames

    @property
    def snapped_seconds(self) -> float:
        return self.total_frames / L.FPS

    @property
    def segmented(self) -> bool:
        return self.segments is not None and self.segments.count > 1

    def summary_lines(self) -> tuple[str, ...]:
        r, g = self.request, self.geometry
        lines = [f"{r.family} {r.width}x{r.height}, {r.seconds:g} s -> {self.total_frames} frames "
                 f"({self.snapped_seconds:.3f} s on H3's 17k+5 grid at 24 fps)",
                 f"packed rows per pass: {g.seq_len} (text {g.text_rows}, video {g.video_rows}, audio {g.audio_rows}, "
                 f"guides {g.cond_rows}, references {g.reference_rows})"]
        if self.segmented:
            shown = tuple(short_prompt(p) for p in self.prompts) if self.prompts is not None else None
            lines += self.segments.describe(shown)
        return tuple(lines) + tuple(n for n in self.notes if not n.startswith(("duration ", "segments: ")))

    def job(self) -> LongMediaJob:
        return LongMediaJob(geometry=self.geometry, family=self.request.family,
                            reference_budget=self.request.reference_budget,
                            segments=self.segments if self.segmented else None, notes=self.notes)


def check_edge(name: str, value: object) -> int:
    """A video edge in pixels: a multiple of 32, else refused naming the two nearest (Setup; the CLI's --width/--height)."""
    value = check_int(name, value, L.CANVAS_MULTIPLE, MAX_EDGE_PX, "Use the video size in pixels, a multiple of 32.")
    if value % L.CANVAS_MULTIPLE:
        low = value - value % L.CANVAS_MULTIPLE
        raise LongMediaInputError(name, value, f"a multiple of 32 from 32 to {MAX_EDGE_PX}",
                                  f"Use {low} or {low + L.CANVAS_MULTIPLE}.")
    return value


def _check_context(frames: object) -> int:
    return L.check_lattice_frames("context_frames", frames, "Use 5, 22, 39 ... (17k+5) frames; 22 is the default.")


def _check_sources(r: SetupRequest) -> None:
    check_choice("family", r.family, FAMILIES, "t2va: text only; fl2va: first/last frame; ref2va: references.")
    check_choice("conditioning", r.conditioning, SOURCES)
    refs = [m.name for m in r.references]
    frames = [n for n, on in (("first_frame", r.first_frame), ("last_frame", r.last_frame)) if on]
    if r.family != "ref2va" and refs:
        raise LongMediaInputError(refs[0], "connected", f"no references with family={r.family!r}",
                                  "Set family to ref2va, or disconnect the reference inputs.")
    if r.family != "fl2va" and frames:
        raise LongMediaInputError(frames[0], "connected", f"no first/last frame with family={r.family!r}",
                                  "Set family to fl2va, or disconnect first_frame/last_frame.")
    if r.family == "fl2va" and not frames:
        raise LongMediaInputError("first_frame", None, "first_frame and/or last_frame for fl2va",
                                  "Connect an image to first_frame or last_frame, or use t2va.")
    if r.family == "ref2va" and not refs:
        raise LongMediaInputError("ref_image_1", None, "at least one ref_image/ref_video/ref_audio input for ref2va",
                                  "Connect a reference, or use t2va.")
    if r.family == "ref2va" and r.conditioning != "clip":
        raise LongMediaInputError("positive", "connected", "clip + prompt for ref2va (Qwen must see the references)",
                                  "Disconnect positive and connect the CLIP; type the prompt in Setup's prompt box.")
    visual = bool(frames) or any(m.kind in ("picture", "video") for m in r.references)
    if visual and not r.have_vae:
        raise LongMediaInputError("vae", None, "the H3 video VAE when images or videos are connected",
                                  "Connect the video VAE (VAELoader) to Setup's vae input.")
    if any(m.kind == "audio" or m.soundtrack_seconds > 0 for m in r.references) and not r.have_audio_vae:
        raise LongMediaInputError("audio_vae", None, "the H3 audio VAE when audio references are connected",
                                  "Connect the audio VAE (VAELoader) to Setup's audio_vae input.")


def _spec(m: MediaInput) -> ReferenceSpec:
    if m.kind == "audio":
        check_float(m.name + " seconds", m.seconds, 1 / L.AUDIO_LATENT_FPS, 600.0, "Use 0.025 s to 10 min of audio.")
        return ReferenceSpec("audio", seconds=m.seconds)
    check_int(m.name + " width", m.width, 1, MAX_EDGE_PX, f"Use an image of at most {MAX_EDGE_PX} px per edge.")
    check_int(m.name + " height", m.height, 1, MAX_EDGE_PX, f"Use an image of at most {MAX_EDGE_PX} px per edge.")
    if m.kind == "picture":
        return ReferenceSpec("picture", m.width, m.height)
    check_int(m.name + " frames", m.frames, L.MIN_FRAMES, 600 * L.FPS, "Use a clip of at least 5 frames (24 fps).")
    return ReferenceSpec("video", m.width, m.height, frames=m.frames, with_audio=m.soundtrack_seconds > 0,
                         audio_seconds=m.soundtrack_seconds)


def check_soundtracks(videos: tuple[int, ...], soundtracks: tuple[int, ...]) -> None:
    """Every ref_video_audio_N needs its ref_video_N (the stock node pairs them by number)."""
    for n in soundtracks:
        if n not in videos:
            raise LongMediaInputError(f"{SOUNDTRACK_PREFIX}{n}", "connected", f"a soundtrack of ref_video_{n}",
                                      f"Connect ref_video_{n}, or move the audio to a ref_audio input.")


def _ordered(refs: tuple[MediaInput, ...]) -> list[MediaInput]:
    """Stock packing order: pictures, videos, audio, each by slot number."""
    order = {"picture": 0, "video": 1, "audio": 2}
    for m in refs:
        check_choice(m.name + " kind", m.kind, tuple(order))
    return sorted(refs, key=lambda m: (order[m.kind], m.slot))


def _prep(m: MediaInput, resolved, request: SetupRequest, budget) -> ReferencePrep:
    size = (resolved.width, resolved.height)
    if m.kind == "picture":
        stock = L.reference_picture_size(m.width, m.height, request.width, request.height, request.ref_image_size)
        return ReferencePrep(m.name, m.kind, resize_to=size if size != stock else None)
    if m.kind == "audio":
        cap = budget.audio_seconds
        return ReferencePrep(m.name, m.kind, keep_seconds=cap if cap is not None and m.seconds > cap else None)
    stock = L.reference_video_canvas(m.width, m.height)
    cap = budget.audio_seconds
    soundtrack = f"{SOUNDTRACK_PREFIX}{m.slot}" if m.soundtrack_seconds > 0 else None
    keep_sound = cap if soundtrack and cap is not None and m.soundtrack_seconds > cap else None
    return ReferencePrep(m.name, m.kind, resize_to=size if size != stock else None, keep_frames=resolved.frames,
                         soundtrack=soundtrack, keep_soundtrack_seconds=keep_sound)


def _segmenting(r: SetupRequest, total: int) -> tuple[float | None, list[str]]:
    """segment_seconds for build_geometry (None = one pass) and the notes about it."""
    seg = check_float("segment_seconds", r.segment_seconds, 0.0, MAX_SEGMENT_SECONDS,
                      "Use 0 for one pass, or the new seconds per segment (5-10 s on 16 GB cards).")
    if seg == 0.0:
        notes = [] if r.context_frames == DEFAULT_CONTEXT_FRAMES else \
            [f"context_frames {r.context_frames} unused: segment_seconds is 0 (one pass)"]
        return None, notes
    if L.frames_for_seconds(seg) >= total:
        return None, [f"segment_seconds {seg:g} s covers the whole {total / L.FPS:.3f} s job: one pass"]
    if r.family == "fl2va":
        return seg, ["fl2va in segments: the first frame guides segment 0 and the last frame the final segment "
                     "(the segmented Sampler moves each guide into its pass)"]
    return seg, []


@contextlib.contextmanager
def _node_inputs() -> Iterator[None]:
    """Core checks name core fields (context_frames); re-raise their errors with Setup's input names."""
    try:
        yield
    except LongMediaInputError as error:  # named: only the renamed fields are rewritten, the rest pass unchanged
        name = NODE_INPUTS.get(error.input_name)
        if name is None:
            raise
        allowed, fix = error.allowed, error.fix
        for core, node in NODE_INPUTS.items():
            if "_" in core:   # a field name, not a plain word that also appears in sentences
                allowed, fix = allowed.replace(core, node), fix.replace(core, node)
        raise LongMediaInputError(name, error.value, allowed, fix) from error


def _check_segment_prompts(r: SetupRequest) -> None:
    """Per-segment prompts need Setup's own text encoder (every segment's prompt through the same one)."""
    if not isinstance(r.segment_prompts, str) or not r.segment_prompts.strip():
        return
    if r.conditioning != "clip":
        raise LongMediaInputError(SEGMENT_PROMPTS, "given with positive connected",
                                  "segment prompts encoded by Setup's clip (the same text encoder for every segment)",
                                  "Disconnect positive and connect the CLIP to Setup, or clear segment_prompts.")


def plan_setup(r: SetupRequest) -> SetupPlan:
    """Validate `r` (before any GPU work) and resolve the job: geometry, segments, reference preparation, notes."""
    check_edge("width", r.width)
    check_edge("height", r.height)
    seconds = check_float("seconds", r.seconds, MIN_SECONDS, MAX_SECONDS, "Give the video length in seconds.")
    check_choice("reference_budget", r.reference_budget, tuple(REFERENCE_BUDGETS))
    check_choice("ref_image_size", r.ref_image_size, ("match", "max"))
    check_int("prompt tokens", r.prompt_tokens, 0, MAX_TEXT_TOKENS, "Shorten the prompt.")
    _check_context(r.context_frames)
    _check_sources(r)
    _check_segment_prompts(r)
    refs = _ordered(r.references)
    specs = tuple(_spec(m) for m in refs)
    total = L.frames_for_seconds(seconds)
    check_job_latent(r.width, r.height, seconds, total, r.ram_available_bytes)
    seg, notes = _segmenting(r, total)
    in_prompt = r.conditioning == "clip"
    keyframes = tuple(KeyframeSpec(frame_index=i, frames=1, in_prompt=in_prompt)
                      for i, on in ((0, r.first_frame), (-1, r.last_frame)) if on)
    with _node_inputs():
        segments = plan_segments(total_seconds=seconds, segment_seconds=seg,
                                 context_frames=r.context_frames) if seg else None
        geometry = build_geometry(r.width, r.height, seconds=seconds, text_tokens=r.prompt_tokens, references=specs,
                                  keyframes=keyframes, reference_budget=r.reference_budget,
                                  ref_image_size=r.ref_image_size, passes=segments)
    prompts = segment_prompt_texts(r.segment_prompts, segments, r.prompt) if r.segment_prompts.strip() else None
    check_pass_rows(geometry.seq_len, r.width, r.height, geometry.frames,
                    name="segment_seconds" if segments is not None else "seconds",
                    value=seg if segments is not None else seconds)
    budget = geometry.reference_budget
    preps = tuple(_prep(m, res, r, budget) for m, res in zip(refs, geometry.references))
    lines = [f"duration {seconds:g} s -> {geometry.total_frames or geometry.frames} frames = "
             f"{(geometry.total_frames or geometry.frames) / L.FPS:.3f} s (H3's 17k+5 frame grid at 24 fps)"]
    lines += notes
    if segments is not None:
        lines.append(f"segments: {segments.count} passes, {seg:g} s of new time each after the first, "
                     f"{segments.context_frames} context frames, longest pass {geometry.frames} frames; "
                     "pass seeds are the noise seed + the pass index, wrapping below 2**64-1 (the Sampler's "
                     "report lists them)")
    if geometry.frames > TRAINED_FRAMES[1]:
        lines.append(f"one pass of {geometry.frames} frames is past H3's trained ~{TRAINED_FRAMES[0]}-"
                     f"{TRAINED_FRAMES[1]} frames: consider segment_seconds 5-15")
    if keyframes and not in_prompt:
        lines.append("first/last frame anchored as guides (stock MiniMaxH3AddGuide): Qwen does not see them; connect "
                     "clip + prompt instead of positive to present them as MiniMaxH3ImageToVideo does")
    if prompts is not None:
        lines.append(f"segment prompts: {len(set(prompts))} distinct over {len(prompts)} segment"
                     f"{'s' if len(prompts) != 1 else ''}; every pass is planned for the longest "
                     f"({r.prompt_tokens} tokens)")
    if r.unused_prompt:
        lines.append("Setup's prompt box is unused: positive is connected (the box is encoded only with clip)")
    lines += [f"{m.name}: {m.frames} images in the batch, the first is used" for m in refs
              if m.kind == "picture" and m.frames > 1]
    for m, res in zip(refs, geometry.references):
        lines += [f"{m.name}: {note}" for note in res.capped]
    return SetupPlan(r, geometry, segments, preps, tuple(lines), prompts)
