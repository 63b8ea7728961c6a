"""Pre-flight checks of a LongMedia job, before any allocation or GPU work; every error names a node input.

Pure functions over plain values (sizes, shapes, the plan), so tests need neither ComfyUI nor tensors:

* `check_job_latent` (Setup): the whole job's AV latent, counted in bytes before it is allocated, against
  the hard cap `MAX_JOB_LATENT_BYTES` and the RAM the machine has available.
* `check_pass_rows` (Setup and Sampler): the packed rows of one pass against the hard cap `MAX_PASS_ROWS`.
* `check_job_value` (Sampler, Hi-Res, Refiner): what arrived on `job`.
* `check_latent_matches_job` (Sampler, a segmented run, Hi-Res, Refiner): the one check of a latent's length
  (and, where the stage keeps it, canvas) against the job's; one message wherever it is refused.
* `check_conditioning_widths` (Sampler): every conditioning's hidden width against the model's text_dim.
* `check_plan_runs` (Sampler): a plan that cannot run is an error; one that may run past its budget
  because a manual value says so is a warning for the text output.
* `check_job_fits` (Setup): the whole-job plan (`planning.whole_job.plan_job`) on this machine, refused where a
  stage does not fit the host RAM, in its words (VRAM alone: the Sampler's call, with the checkpoint it gets).
* `StagePass` (Hi-Res, Refiner): the same two refusals, naming an input those nodes have (`job`, `scale`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import LongMediaInputError, Suggestion
from ..h3 import lattice as L
from ..h3.profiles import gib, gib_pair
from ..limits import MAX_JOB_LATENT_BYTES, MAX_PASS_ROWS
from ..planning.types import ExecutionPlan
from ..planning.whole_job import JobPlan
from ..segments.timeline import DEFAULT_CONTEXT_FRAMES
from ..units import MIB
from .job import LongMediaJob

# a later segment's pass holds its context and at least one new 17-frame clip
SHORTEST_SEGMENTED_PASS_FRAMES = DEFAULT_CONTEXT_FRAMES + L.CLIP_FRAMES

LATENT_VALUE_BYTES = 4                # ComfyUI's empty latents are float32 (intermediate dtype)
VIDEO_CHANNELS, AUDIO_CHANNELS = 24, 32
LATENT_COPIES = 3                     # a run holds the job latent, its output and its denoised output


def job_latent_bytes(width: int, height: int, frames: int) -> int:
    """Bytes of the float32 AV latent ComfyUI allocates for `frames` (17k+5) frames at width x height."""
    video = VIDEO_CHANNELS * L.latent_frames(frames) * (height // L.VAE_SPATIAL) * (width // L.VAE_SPATIAL)
    audio = AUDIO_CHANNELS * L.AUDIO_ROWS_PER_FRAME * L.target_audio_frames(frames)
    return (video + audio) * LATENT_VALUE_BYTES


def check_job_latent(width: int, height: int, seconds: float, frames: int,
                     ram_available_bytes: int | None = None) -> int:
    """The job latent's bytes, or a LongMediaInputError naming width/height/seconds, the size and the cap."""
    need = job_latent_bytes(width, height, frames)
    cap, why = MAX_JOB_LATENT_BYTES, f"the {gib(MAX_JOB_LATENT_BYTES)} hard cap"
    if ram_available_bytes is not None and ram_available_bytes // LATENT_COPIES < cap:
        cap = ram_available_bytes // LATENT_COPIES
        why = (f"a third of the {gib(ram_available_bytes)} of RAM available now (a run holds the latent, "
               "its output and its denoised output)")
    if need <= cap:
        return need
    per_second = job_latent_bytes(width, height, L.frames_for_seconds(1.0) + L.CLIP_FRAMES) / 1.5
    fits_seconds = max(0.0, cap / per_second)
    raise LongMediaInputError(
        "seconds", seconds,
        f"a whole-job latent within {why}: width={width}, height={height}, seconds={seconds:g} ({frames} "
        f"frames) needs {gib(need)} for the job's latent",
        f"Lower width/height or seconds (about {fits_seconds:.0f} s fits at {width}x{height}).")


def check_pass_rows(rows: int, width: int, height: int, frames: int, *, name: str, value: object,
                    canvas: str = "width/height") -> int:
    """`rows` packed rows of one pass within MAX_PASS_ROWS, else an error naming `name` (the input to change), or
    `canvas` (the width and height inputs) where even the shortest segmented pass would not fit at this size."""
    if rows <= MAX_PASS_ROWS:
        return rows
    per_frame = max(1, rows // max(1, frames))
    most = L.snap_frames_down(max(L.MIN_FRAMES, MAX_PASS_ROWS // per_frame))
    if most < SHORTEST_SEGMENTED_PASS_FRAMES:  # segments cannot help: the canvas is the input to change
        raise LongMediaInputError(
            canvas, f"{width}x{height}",
            f"at most {MAX_PASS_ROWS} packed rows per pass (the hard cap); at {width}x{height} a frame packs about "
            f"{per_frame} rows, so even the shortest segmented pass ({SHORTEST_SEGMENTED_PASS_FRAMES} frames: "
            f"context and one 17-frame clip) has {per_frame * SHORTEST_SEGMENTED_PASS_FRAMES} rows",
            f"Lower width and height to at most about {_largest_canvas(width, height, per_frame)} (same aspect).")
    raise LongMediaInputError(
        name, value,
        f"at most {MAX_PASS_ROWS} packed rows per pass (the hard cap); {width}x{height} with {frames} frames "
        f"in one pass is {rows} rows",
        f"Lower width/height, or set segment_seconds so that each pass (its new frames plus context_frames) "
        f"has at most {most} frames ({most / L.FPS:.1f} s) at this size.")


def _largest_canvas(width: int, height: int, per_frame: int) -> str:
    """The canvas of this aspect, on H3's 32-px grid, whose shortest segmented pass fits the hard cap."""
    scale = (MAX_PASS_ROWS / (per_frame * SHORTEST_SEGMENTED_PASS_FRAMES)) ** 0.5
    return f"{max(32, int(width * scale) // 32 * 32)}x{max(32, int(height * scale) // 32 * 32)}"


def check_job_value(job: object) -> LongMediaJob | None:
    """`job` as LongMedia Setup's job, or None when unconnected; anything else is an error naming `job`."""
    if job is None or isinstance(job, LongMediaJob):
        return job
    # the same class under a second import name (the pack as custom_nodes.<folder>.longmedia and as longmedia)
    if type(job).__name__ == LongMediaJob.__name__ and all(hasattr(job, a) for a in ("geometry", "segments")):
        return job
    raise LongMediaInputError("job", type(job).__name__, "LongMedia Setup's job output (LONGMEDIA_JOB) or nothing",
                              "Connect Setup's job output to job, or leave job unconnected.")


def check_latent_matches_job(frames: int, video_shape: tuple[int, ...], audio_shape: tuple[int, ...], *,
                             canvas: tuple[int, int] | None = None) -> None:
    """The latent's length must be the job's `frames` (all its segments), and its canvas the job's `canvas`
    (width, height) where given (the Sampler's; Hi-Res and the Refiner change the canvas, not the length)."""
    width, height = video_shape[4] * L.VAE_SPATIAL, video_shape[3] * L.VAE_SPATIAL
    fix = ("Connect the latent LongMedia Setup made for this job (or a stage's output of it), or rebuild the job "
           "for this latent.")
    if canvas is not None and (width, height) != tuple(canvas):
        raise LongMediaInputError("latent", f"{width}x{height} px",
                                  f"the job's canvas {canvas[0]}x{canvas[1]} px (Setup's width and height)", fix)
    want_t, want_a = L.latent_frames(frames), L.target_audio_frames(frames)
    if (video_shape[2], audio_shape[-1]) != (want_t, want_a):
        got = L.pixel_frames(video_shape[2])
        raise LongMediaInputError("latent", f"{got} frames ({video_shape[2]} video / {audio_shape[-1]} audio latent "
                                            "frames)",
                                  f"the job's {frames} frames ({want_t} video / {want_a} audio latent frames)", fix)


LATENT_SEGMENTS_KEY = "longmedia_segments"   # Setup's segmented latent carries its plan's signature here


def check_latent_segments(latent: Mapping, segments) -> None:
    """A latent that carries a segment plan's signature (Setup put it there; ComfyUI's samplers and LongMedia's
    passes keep a latent's other keys) must carry the job's: another Setup's job of the same length but other
    segments would run per that job. A latent without one (made elsewhere) is checked by its length only."""
    carried = latent.get(LATENT_SEGMENTS_KEY) if isinstance(latent, Mapping) else None
    if carried is None or segments is None:
        return
    wanted = segments.signature()
    if carried == wanted:
        return
    raise LongMediaInputError("job", f"a job whose segments differ from the latent's ({carried} against {wanted})",
                              "the job of the Setup that made this latent",
                              "Connect the job output of the Setup whose latent this is (same segment_seconds and "
                              "context_frames).")


def check_conditioning_widths(widths: Mapping[str, tuple[int, ...]], text_dim: int) -> None:
    """Every conditioning list's hidden width (its entries' last dim) must be the model's text_dim."""
    for name, found in widths.items():
        wrong = sorted({w for w in found if w != text_dim})
        if wrong:
            raise LongMediaInputError(
                name, f"{wrong[0]}-wide conditioning",
                f"conditioning {text_dim} wide (this model's text_dim); {name} is {wrong[0]} wide",
                f"Encode {name} with the text encoder that belongs to this model (the H3 Qwen3-VL CLIP), "
                "or load the model that matches this text encoder.")


def check_plan_runs(plan: ExecutionPlan) -> tuple[str, ...]:
    """Refuse a plan that cannot run; warnings (for the text output) for one that runs past its budget.

    auto with no mode fitting is an error (the run would run out of memory); a mode the user chose (the plan's
    `requested_memory_mode`) wins over the prediction and runs with a warning.
    """
    if plan.fits:
        return ()
    requested_memory_mode = plan.requested_memory_mode
    need, usable = plan.memory.activation_need_bytes, plan.usable_bytes
    need_text, usable_text = gib_pair(need, usable)
    budget = f"{usable_text} usable (the {gib(plan.budget_bytes)} budget on the {plan.device.name} less the reserve)"
    if requested_memory_mode != "auto":
        return ((f"does NOT fit: memory_mode={requested_memory_mode} needs {need_text} of {budget}; it runs "
                 "because you chose the mode (auto would refuse it): expect an out-of-memory report"),)
    if "vram_activation_reserve_mb" in plan.manual_fields and need <= plan.budget_bytes:
        raise LongMediaInputError("vram_activation_reserve_mb", plan.activation_reserve_bytes // MIB,
                                  f"a reserve that leaves room for the pass: it needs {need_text} with {budget}",
                                  "Lower vram_activation_reserve_mb, or leave it at -1 (auto).")
    s = plan.segment_suggestion
    advice = Suggestion("segment_seconds", s.seconds) if s is not None and s.seconds > 0 else None
    seg = (f"set Setup's segment_seconds to {s.seconds:g}" if advice is not None else
           "use fewer or smaller references (no segment length fits either)" if s is not None else "use segments")
    g = plan.geometry
    raise LongMediaInputError(
        "latent", f"{g.width}x{g.height}, {g.frames} frames, {g.seq_len} packed rows",
        f"a pass that fits in some memory mode: even {plan.memory_mode} needs {need_text} of {budget}",
        f"Lower width/height or {seg}; or pick memory_mode=ultra_low_vram to run it anyway.", suggestion=advice)


def check_job_fits(job: JobPlan, seconds: float) -> None:
    """Setup's refusal of a job this machine cannot run: exactly where `plan_job`'s verdict is DOES NOT FIT for host
    RAM (any stage), with its verdict, each short stage's need and its remedy. A stage short of VRAM alone is not
    refused here: Setup plans the INT8 checkpoint the workflows load, the Sampler plans the one it is given and
    refuses (or runs memory_mode=ultra_low_vram) itself."""
    if job.fits_ram:
        return
    raise LongMediaInputError(
        "seconds", seconds, f"a job this machine runs; the whole-job plan says {job.verdict}: "
        + "; ".join(job.shortfalls()),
        "Do what the remedy says; python -m longmedia plan prints every stage.")


STAGE_NODES = {"hires": "LongMedia Hi-Res", "refiner": "LongMedia Refiner"}


@dataclass(frozen=True)
class StagePass:
    """A Hi-Res or Refiner pass: its refusals name an input that node has (`job`, or Hi-Res's `scale`), never
    Setup's segment_seconds, which these nodes do not have. job: the job connected to the node (None: none); a
    segmented job's passes already run one segment at a time."""

    stage: str
    job: LongMediaJob | None = None

    def __post_init__(self) -> None:
        if self.stage not in STAGE_NODES:
            raise ValueError(f"stage must be one of {', '.join(STAGE_NODES)}, got {self.stage!r}")

    @property
    def node(self) -> str:
        return STAGE_NODES[self.stage]

    def check_rows(self, rows: int, width: int, height: int, frames: int) -> int:
        """`check_pass_rows` with this node's remedy."""
        try:
            return check_pass_rows(rows, width, height, frames, name="latent", value=f"{width}x{height}")
        except LongMediaInputError as error:  # named: the hard row cap; re-said with this node's inputs
            self._refuse(error.allowed, f"{width}x{height}, {frames} frames", None, error)

    def check_runs(self, plan: ExecutionPlan) -> tuple[str, ...]:
        """`check_plan_runs` with this node's remedy."""
        try:
            return check_plan_runs(plan)
        except LongMediaInputError as error:  # named: the whole-pass refusal (input "latent"); others are this node's
            if error.input_name != "latent":
                raise
            g, s = plan.geometry, plan.segment_suggestion
            self._refuse(error.allowed, f"{g.width}x{g.height}, {g.frames} frames",
                         s.seconds if s is not None and s.seconds > 0 else None, error)

    def _refuse(self, allowed: str, size: str, seconds: float | None, cause: Exception):
        segments = f" with segment_seconds={seconds:g}" if seconds is not None else " with segment_seconds set"
        anyway = "pick memory_mode=ultra_low_vram to run it anyway."
        job = self.job
        if job is None or not job.segmented:
            value = "not connected" if job is None else "a job of one pass"
            lower = "lower scale, or " if self.stage == "hires" else ""
            raise LongMediaInputError(
                "job", value, allowed,
                f"Connect LongMedia Setup's job, made{segments}, to {self.node}'s job input: it then runs segment "
                f"by segment ({size} is one pass now); or {lower}{anyway}") from cause
        passes = f"{job.segments.count} passes, the longest {size}"
        if self.stage == "hires":
            raise LongMediaInputError(
                "scale", passes, allowed, f"Lower scale; or rebuild the job in Setup{segments} and connect it to "
                f"{self.node}'s job input; or {anyway}") from cause
        raise LongMediaInputError(
            "job", passes, allowed, f"Rebuild the job in Setup{segments} and connect it to {self.node}'s job "
            f"input; or {anyway}") from cause
