"""What one Sampler run measured, beside the plan it followed: a frozen report that serialises to JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..planning.types import ExecutionPlan


@dataclass(frozen=True)
class StepRecord:
    """One model call: its sigma, wall time, and the peak VRAM allocated during it (0 on CPU)."""

    index: int
    sigma: float
    seconds: float
    peak_bytes: int


@dataclass(frozen=True)
class RunReport:
    """The plan, the attention actually used, and what was measured (boundary snapshots, peaks, guards)."""

    plan: ExecutionPlan
    attention_backend: str
    streamed_blocks: tuple[int, ...]
    boundaries: tuple[tuple[str, ...], ...]
    steps: tuple[StepRecord, ...]
    block_peak_bytes: tuple[int, ...]
    guard_events: tuple[str, ...]
    preview: str
    manual_fields: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def measured_peak_bytes(self) -> int:
        return max((s.peak_bytes for s in self.steps), default=0)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "plan"}
        out = {k: [asdict(v) for v in value] if k == "steps" else value for k, value in out.items()}
        out["plan"] = self.plan.to_dict()
        out["measured_peak_bytes"] = self.measured_peak_bytes
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    def summary_lines(self) -> tuple[str, ...]:
        p = self.plan
        gib = 2 ** 30
        lines = [f"memory mode {p.memory_mode} (requested {p.requested_memory_mode}), "
                 f"attention {self.attention_backend}",
                 f"streamed blocks: {len(self.streamed_blocks)}",
                 f"predicted peak {p.predicted_peak_bytes / gib:.2f} GiB, "
                 f"measured {self.measured_peak_bytes / gib:.2f} GiB"]
        if self.manual_fields:
            lines.append("manual values (they win over auto): " + ", ".join(self.manual_fields))
        lines.extend(self.guard_events)
        lines.extend(self.notes)
        return tuple(lines)
