"""What one Sampler run measured, beside the plan it followed: a frozen report that serialises to JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ..execution.probes import ProbeReport
from ..planning.stage_times import calls_per_step
from ..planning.types import ExecutionPlan, MemoryBreakdown
from ..planning.whole_job import JobPlan
from ..units import GIB
from .host_features import HostFeatures
from .host_ram import HostRamReport

NON_FINITE = "WARNING: the sampled latent holds NaN or inf; it will decode to a broken video"
STREAMED_NAN_ADVICE = ("; the blocks streamed: rerun with memory_mode normal, or shorter segments that fit it, "
                       "to tell a streaming fault from the model's own output, and report it with this report")


@dataclass(frozen=True)
class StepRecord:
    """One model call: its sigma, wall time, the peak torch's allocator handed out during it, and the most
    device memory in use (cudaMemGetInfo: total - free, so comfy-aimdo's VBAR weights, the CUDA context and
    other processes count) sampled at its block ends and its end. 0 on CPU. sampler_step: the sampler step the call
    belongs to (the steps the sampler's callback had reported before it; -1 = not counted)."""

    index: int
    sigma: float
    seconds: float
    peak_bytes: int
    device_used_bytes: int = 0
    sampler_step: int = -1


@dataclass(frozen=True)
class PredictedPeaks:
    """The plan's prediction split to match what is measured.

    torch_bytes: the most torch's allocator hands out (its allocated count, not its reserved pool): activations,
    workspaces and the tensors held around the blocks, plus the resident weights only when they are torch tensors;
    under dynamic VRAM (comfy-aimdo) weights sit in VBAR pages outside it. The plan's bytes outside torch's count
    (comfy-aimdo's cast buffers, the pool's slack) are not in it.
    device_bytes: the plan's predicted peak, everything the pass may add on the device, elastic weights included.
    in_use_at_plan_bytes: device memory already in use, outside the budget, when the plan read the device (the
    CUDA context, the process's other tensors, other processes): the device in use should stay within
    in_use_at_plan_bytes + device_bytes.
    """

    torch_bytes: int
    device_bytes: int
    weights_outside_torch: bool
    in_use_at_plan_bytes: int = 0

    @classmethod
    def of(cls, memory: MemoryBreakdown, dynamic_vram: bool, in_use_at_plan_bytes: int = 0) -> "PredictedPeaks":
        """From the plan's memory breakdown, whether dynamic VRAM holds the weights and what was in use when the
        plan read the device (`ExecutionPlan.in_use_at_plan_bytes`)."""
        return cls(max(0, int(memory.torch_allocated_bytes(dynamic_vram))), int(memory.predicted_peak_bytes),
                   bool(dynamic_vram), max(0, int(in_use_at_plan_bytes)))

    @classmethod
    def of_plan(cls, plan: ExecutionPlan) -> "PredictedPeaks":
        return cls.of(plan.memory, plan.device.dynamic_vram, plan.in_use_at_plan_bytes)


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
    warmup_s: float = 0.0  # kernel compilation before the first step (attention/warmup.py), outside every step
    probe_s: float = 0.0  # the attention speed timing, when this pass ran it before its first step (0: read from
    # the disk cache, or run earlier in the prompt, as a segmented job's forecast of its passes does)
    sampler_steps: int = 0  # steps the sampler was asked for (len(sigmas) - 1); 0 = not counted
    host_ram: HostRamReport | None = None  # pins, room made, disk reads and read-ahead (report/host_ram.py)
    cfg: float | None = None  # the guider's cfg (CFGGuider.cfg); None: a guider without one (BasicGuider)
    whole_job: JobPlan | None = None  # the Sampler's one pass: `plan_job` from its plan, the CLI's and Setup's verdict

    def step_seconds(self) -> tuple[tuple[int, float], ...]:
        """(sampler step, seconds of its model calls), for the steps with at least one model call, in order."""
        totals: dict[int, float] = {}
        for s in self.steps:
            if s.sampler_step >= 0:
                totals[s.sampler_step] = totals.get(s.sampler_step, 0.0) + s.seconds
        return tuple(sorted(totals.items()))

    @property
    def first_step_s(self) -> float | None:
        """Model-call seconds of the first step that called the model (compilation, autotune, fault-in land here)."""
        steps = self.step_seconds()
        return steps[0][1] if steps else None

    @property
    def steady_step_s(self) -> float | None:
        """Mean model-call seconds of the later steps that called the model (None with fewer than two)."""
        later = [sec for _, sec in self.step_seconds()[1:]]
        return sum(later) / len(later) if later else None

    @property
    def skipped_steps(self) -> tuple[int, ...]:
        """Sampler steps in which the model never ran: a step cache (EasyCache, LazyCache) served them."""
        if not self.sampler_steps or not any(s.sampler_step >= 0 for s in self.steps):
            return ()
        ran = {s.sampler_step for s in self.steps}
        return tuple(i for i in range(self.sampler_steps) if i not in ran)

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
        out["host_ram"] = None if self.host_ram is None else self.host_ram.to_dict()
        out["whole_job"] = None if self.whole_job is None else self.whole_job.to_dict()
        out["measured_peak_bytes"] = self.measured_peak_bytes
        out["measured_device_bytes"] = self.measured_device_bytes
        out["output_warning"] = self.output_warning
        out["first_step_s"] = self.first_step_s
        out["steady_step_s"] = self.steady_step_s
        out["model_calls"] = len(self.steps)
        out["skipped_steps"] = list(self.skipped_steps)
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
        lines.extend(self.whole_job.headline() if self.whole_job is not None else ())
        if self.whole_job is not None and self.whole_job.easycache is not None:  # planned as the whole job plans it
            lines.append(self.whole_job.easycache.model_line(calls_per_step(1.0 if self.cfg is None else self.cfg)))
        lines.extend(self.peak_lines())
        lines.extend(self.time_lines())
        if self.manual_fields:
            lines.append("manual values (they win over auto): " + ", ".join(self.manual_fields))
        lines.extend(self.guard_events)
        lines.extend(self.notes)
        lines.extend(self.host_ram.lines() if self.host_ram is not None else ())
        lines.extend(self.probes.lines if self.probes is not None else ())
        return tuple(lines)

    def time_lines(self) -> tuple[str, ...]:
        """The first step apart from the steady ones, and the steps a step cache skipped."""
        lines = []
        first, steady = self.first_step_s, self.steady_step_s
        if first is not None:
            line = f"first step {first:.2f} s"
            if steady is not None:
                line += f", steady steps {steady:.2f} s (mean of {len(self.step_seconds()) - 1})"
            if self.warmup_s:
                line += f"; kernels compiled before the first step in {self.warmup_s:.2f} s"
            if self.probe_s:
                line += (f"; the attention speed timing ran before it in {self.probe_s:.2f} s (once per device, "
                         f"torch and CUDA version: kept on disk)")
            lines.append(line)
        if self.sampler_steps:
            skipped = self.skipped_steps
            line = f"model calls: {len(self.steps)} over {self.sampler_steps} sampler steps"
            if self.cfg is not None:
                per = calls_per_step(self.cfg)
                line += (f" (planned {per * self.sampler_steps}: cfg {self.cfg:g}, {per} call"
                         f"{'s' if per > 1 else ''} a step)")
            if skipped:
                line += (f"; {len(skipped)} step(s) without a model call (a step cache served them): "
                         + ", ".join(map(str, skipped)))
            lines.append(line)
        return tuple(lines)

    def peak_lines(self) -> tuple[str, ...]:
        """Predicted beside measured, like for like: torch's allocator, then the whole device."""
        pred = self.predicted
        if pred is None:
            return (f"predicted peak {self.plan.predicted_peak_bytes / GIB:.2f} GiB (weights included); "
                    "no like-for-like measurement in this report",)
        measured = self.measured_peak_bytes
        what = ("activations, workspaces and the tensors around the blocks; weights live in comfy-aimdo's VBAR, "
                "outside torch" if pred.weights_outside_torch else
                "activations, workspaces, the tensors around the blocks and resident weights")
        torch_line = (f"torch allocator peak: predicted {pred.torch_bytes / GIB:.2f} GiB ({what}), measured "
                      + (f"{measured / GIB:.2f} GiB" if measured else "n/a (no CUDA)"))
        device = self.measured_device_bytes
        held = pred.in_use_at_plan_bytes
        device_line = (f"device memory in use: predicted at most {(held + pred.device_bytes) / GIB:.2f} GiB ("
                       f"{held / GIB:.2f} GiB in use when the plan read the device + the pass's predicted peak "
                       f"{pred.device_bytes / GIB:.2f} GiB, elastic weights included), measured "
                       + (f"{device / GIB:.2f} GiB (cudaMemGetInfo at block and step ends: VBAR weights, CUDA "
                          "context and other processes included)" if device else "n/a (no CUDA)"))
        return torch_line, device_line


def _plain(value: Any) -> Any:
    """A report field as JSON-ready values: dataclasses (alone or in a tuple) as dicts."""
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, tuple) and value and is_dataclass(value[0]):
        return [asdict(v) for v in value]
    return value
