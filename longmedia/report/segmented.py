"""What a segmented job reports: every pass as forecast before the run, one record per pass as run, and drift
figures over passes of equal geometry; serialised to JSON for the web panel and the node's `report` output."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..segments.retakes import RetakeReport
from ..segments.timeline import SegmentPlan
from ..units import GIB, MIB
from .memory import MemorySnapshot
from .run_report import RunReport


@dataclass(frozen=True)
class SegmentForecast:
    """One pass as planned before anything runs: its packed rows, mode and predicted peak."""

    index: int
    pass_frames: int
    context_frames: int
    seq_len: int
    memory_mode: str
    predicted_peak_bytes: int
    fits: bool

    def line(self) -> str:
        return (f"segment {self.index}: {self.pass_frames} frames ({self.context_frames} context), "
                f"{self.seq_len} packed rows, {self.memory_mode}, predicted peak "
                f"{self.predicted_peak_bytes / GIB:.2f} GiB{'' if self.fits else ' (does NOT fit)'}")


@dataclass(frozen=True)
class SegmentRecord:
    """One pass: where it sits, its seed, time per sampler step, memory after loading, and its run report.

    source: "sampled" this run, or "reused" from the retake cache (then `run`, `baseline` are the run that sampled
    it, and `sample_seconds` is 0: nothing was sampled for it this run). prompt: its own prompt, when the job has
    per-segment prompts."""

    index: int
    seed: int
    pass_frames: int
    context_frames: int
    video_latent_range: tuple[int, int]
    audio_range: tuple[int, int]
    steps: int
    sample_seconds: float                 # the sampler loop of this pass (model load excluded)
    baseline: MemorySnapshot              # device memory right after prepare_sampling (boundary + model load)
    run: RunReport
    source: str = "sampled"
    prompt: str | None = None

    @property
    def reused(self) -> bool:
        return self.source == "reused"

    @property
    def seconds_per_step(self) -> float:
        return self.sample_seconds / self.steps if self.steps else 0.0

    @property
    def peak_bytes(self) -> int:
        return self.run.measured_peak_bytes

    @property
    def boundary(self) -> tuple[str, ...]:
        """The residency boundary that ran before this pass (before/after snapshots and every step)."""
        return self.run.boundaries[-1] if self.run.boundaries else ()

    def to_dict(self) -> dict:
        out = {"kind": "segment"} | {k: v for k, v in asdict(self).items() if k not in ("run", "baseline")}
        out.update(baseline=asdict(self.baseline), seconds_per_step=self.seconds_per_step,
                   peak_bytes=self.peak_bytes, boundary=list(self.boundary), run=self.run.to_dict())
        return out


@dataclass(frozen=True)
class SegmentedReport:
    """The segment plan, every pass as forecast before the run, and one record per pass, with drift figures
    over passes of equal geometry."""

    segment_plan: SegmentPlan
    forecast: tuple[SegmentForecast, ...]
    segments: tuple[SegmentRecord, ...]
    context_on: tuple[str, ...]           # conditioning lists that carried the context guide
    notes: tuple[str, ...] = ()
    retakes: RetakeReport | None = None   # the retake cache after this run (None: no cache connected)
    prompts: tuple[str, ...] | None = None   # every segment's prompt, shortened (per-segment prompts only)

    @property
    def measured_peak_bytes(self) -> int:
        return max((s.peak_bytes for s in self.segments), default=0)

    @property
    def comparable(self) -> tuple[SegmentRecord, ...]:
        """Passes sampled this run with the geometry of the second one (later passes; a trimmed last pass differs)."""
        sampled = tuple(s for s in self.segments if not s.reused) or self.segments
        if len(sampled) < 2:
            return sampled
        key = (sampled[1].pass_frames, sampled[1].context_frames)
        return tuple(s for s in sampled if (s.pass_frames, s.context_frames) == key)

    @property
    def step_time_ratio(self) -> float | None:
        """s/step of the last comparable pass over the first one (1.0 = no drift; None when not measured)."""
        a, b = self.comparable[0], self.comparable[-1]
        return b.seconds_per_step / a.seconds_per_step if a.seconds_per_step > 0 else None

    @property
    def peak_ratio(self) -> float | None:
        """Peak of the last comparable pass over the first one (None on CPU, where no peak is measured)."""
        a, b = self.comparable[0], self.comparable[-1]
        return b.peak_bytes / a.peak_bytes if a.peak_bytes > 0 else None

    @property
    def baseline_spread_bytes(self) -> int:
        """Largest difference of allocated memory after loading, over all passes (0 = no growth)."""
        values = [s.baseline.allocated_bytes for s in self.segments
                  if s.baseline.allocated_bytes is not None and not s.reused]
        return max(values) - min(values) if values else 0

    def to_dict(self) -> dict:
        plan = {**self.segment_plan.to_dict(), "describe": list(self.segment_plan.describe()),
                "forecast": [asdict(f) | {"line": f.line()} for f in self.forecast]}
        return {"kind": "segmented_run", "segment_plan": plan, "segments": [s.to_dict() for s in self.segments],
                "context_on": list(self.context_on), "notes": list(self.notes),
                "measured_peak_bytes": self.measured_peak_bytes, "step_time_ratio": self.step_time_ratio,
                "peak_ratio": self.peak_ratio, "baseline_spread_bytes": self.baseline_spread_bytes,
                "retakes": (asdict(self.retakes) | {"line": self.retakes.line(), "notes": list(self.retakes.notes())})
                if self.retakes is not None else None,
                "prompts": list(self.prompts) if self.prompts is not None else None}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    def summary_lines(self) -> tuple[str, ...]:
        lines = list(self.segment_plan.describe())[:1]
        for s in self.segments:
            p = s.run.plan
            said = f"{s.source}, " + (f"prompt {self.prompts[s.index]!r}, " if self.prompts is not None else "")
            lines.append(f"segment {s.index}: seed {s.seed}, {said}{s.pass_frames} frames ({s.context_frames} context), "
                         f"{s.seconds_per_step:.3f} s/step, baseline {_gib(s.baseline.allocated_bytes)}, "
                         f"peak {s.peak_bytes / GIB:.2f} GiB, memory mode {p.memory_mode}, "
                         f"attention {s.run.attention_backend}")
        c = self.comparable
        lines.append(f"drift over segments {c[0].index}..{c[-1].index} (equal geometry): s/step "
                     f"{_ratio_text(self.step_time_ratio)}, peak {_ratio_text(self.peak_ratio)}; baseline spread "
                     f"{self.baseline_spread_bytes / MIB:.1f} MiB")
        lines.append("context guide on: " + ", ".join(self.context_on))
        if self.retakes is not None:
            lines.append(self.retakes.line())
            lines.extend(self.retakes.notes())
        lines.extend(self.notes)
        return tuple(lines)


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.2f} GiB"


def _ratio_text(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"x{ratio:.3f}"


