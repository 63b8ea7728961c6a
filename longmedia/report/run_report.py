"""What one Sampler run measured, beside the plan it followed: a frozen report that serialises to JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ..execution.probes import ProbeReport
from ..planning.types import ExecutionPlan, MemoryBreakdown
from ..units import GIB
from .host_features import HostFeatures

NON_FINITE = "WARNING: the sampled latent holds NaN or inf; it will decode to a broken video"
STREAMED_NAN_ADVICE = ("; the blocks streamed: rerun with memory_mode normal, or shorter segments that fit it, "
                       "to tell a streaming fault from the model's own output, and report it with this report")


@dataclass(frozen=True)
class StepRecord:
    """One model call: its sigma, wall time, the peak torch's allocator handed out during it, and the most
    device memory in use (cudaMemGetInfo: total - free, so comfy-aimdo's VBAR weights, the CUDA context and
    other processes count) sampled at its block ends and its end. 0 on CPU."""

    index: int
    sigma: float
    seconds: float
    peak_bytes: int
    device_used_bytes: int = 0


@dataclass(frozen=True)
class PredictedPeaks:
    """The plan's prediction split to match what is measured.

    torch_bytes: what torch's allocator holds at the peak: activations, workspaces, and the resident weights
    only when they are torch tensors; under dynamic VRAM (comfy-aimdo) weights sit in VBAR pages outside it.
    device_bytes: everything LongMedia's pass keeps on the device, weights included (the plan's peak).
    """

    torch_bytes: int
    device_bytes: int
    weights_outside_torch: bool

    @classmethod
    def of(cls, memory: MemoryBreakdown, dynamic_vram: bool) -> "PredictedPeaks":
        """From the plan's memory breakdown and whether dynamic VRAM holds the weights."""
        total = int(memory.predicted_peak_bytes)
        weights = int(memory.resident_weight_bytes)
        torch_bytes = total - weights if dynamic_vram else total
        return cls(max(0, torch_bytes), total, bool(dynamic_vram))


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
    predicted: PredictedPeaks | None = None
    output_finite: bool = True  # False: the sampled latent holds NaN or inf
    probes: ProbeReport | None = None  # what the diagnostics saw (LONGMEDIA_PROBES); None: none ran
    host: HostFeatures | None = None  # what the pack detected on this ComfyUI (paste into a bug report)

    @property
    def measured_peak_bytes(self) -> int:
        """torch's allocator peak over the run (compare with `predicted.torch_bytes`)."""
        return max((s.peak_bytes for s in self.steps), default=0)

    @property
    def measured_device_bytes(self) -> int:
        """The most device memory in use seen during the run (compare with `predicted.device_bytes`)."""
        return max((s.device_used_bytes for s in self.steps), default=0)

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": "run"} | {name: _plain(getattr(self, name)) for name in self.__dataclass_fields__
                                 if name != "plan"}
        out["plan"] = self.plan.to_dict()
        out["host"] = None if self.host is None else self.host.to_dict()
        out["measured_peak_bytes"] = self.measured_peak_bytes
        out["measured_device_bytes"] = self.measured_device_bytes
        out["output_warning"] = self.output_warning
        return out

    @property
    def output_warning(self) -> str:
        """What the web panel shows first when the latent is not finite ("" when it is)."""
        if self.output_finite:
            return ""
        return NON_FINITE + (STREAMED_NAN_ADVICE if self.streamed_blocks else "")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    def summary_lines(self) -> tuple[str, ...]:
        p = self.plan
        lines = [f"memory mode {p.memory_mode} (requested {p.requested_memory_mode}), "
                 f"attention {self.attention_backend}",
                 f"streamed blocks: {len(self.streamed_blocks)}"]
        if not self.output_finite:
            lines.insert(0, self.output_warning)
        lines.extend(self.peak_lines())
        if self.manual_fields:
            lines.append("manual values (they win over auto): " + ", ".join(self.manual_fields))
        lines.extend(self.guard_events)
        lines.extend(self.notes)
        lines.extend(self.probes.lines if self.probes is not None else ())
        return tuple(lines)

    def peak_lines(self) -> tuple[str, ...]:
        """Predicted beside measured, like for like: torch's allocator, then the whole device."""
        pred = self.predicted
        if pred is None:
            return (f"predicted peak {self.plan.predicted_peak_bytes / GIB:.2f} GiB (weights included); "
                    "no like-for-like measurement in this report",)
        measured = self.measured_peak_bytes
        what = ("activations and workspaces; weights live in comfy-aimdo's VBAR, outside torch"
                if pred.weights_outside_torch else "activations, workspaces and resident weights")
        torch_line = (f"torch allocator peak: predicted {pred.torch_bytes / GIB:.2f} GiB ({what}), measured "
                      + (f"{measured / GIB:.2f} GiB" if measured else "n/a (no CUDA)"))
        device = self.measured_device_bytes
        device_line = (f"device memory in use: predicted {pred.device_bytes / GIB:.2f} GiB (the pass, weights "
                       "included), measured " + (f"{device / GIB:.2f} GiB (cudaMemGetInfo at block and step ends: "
                                                 "VBAR weights, CUDA context and other processes included)"
                                                 if device else "n/a (no CUDA)"))
        return torch_line, device_line


def _plain(value: Any) -> Any:
    """A report field as JSON-ready values: dataclasses (alone or in a tuple) as dicts."""
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, tuple) and value and is_dataclass(value[0]):
        return [asdict(v) for v in value]
    return value
