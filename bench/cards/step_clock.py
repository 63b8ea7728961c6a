"""The card bench's step clock: how long each sampling step took on the device, for every sampler row, stock included.

ComfyUI queues a step's kernels and calls the progress hook without waiting for them, so the CPU's clock at the hook
runs ahead of the device: a stock step read off `time.perf_counter` can show 36 s while its kernels take 55 s (the
next step then absorbs the difference). LongMedia's own report syncs inside its model-call wrapper; stock does not.
So the bench marks the device's timeline instead: a CUDA event recorded on the current stream when the sample node
starts and at each progress hook (no sync, so the run is not perturbed), read after the prompt ends. A step's time is
the device time between two marks. This lives in the bench only, never in the product.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol


class Mark(Protocol):
    """A point on the device's timeline (a recorded CUDA event)."""

    def seconds_until(self, later: "Mark") -> float: ...


@dataclass(frozen=True)
class CudaMark:
    event: object  # torch.cuda.Event(enable_timing=True), recorded

    @classmethod
    def now(cls) -> "CudaMark":
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return cls(event)

    def seconds_until(self, later: "CudaMark") -> float:
        later.event.synchronize()
        return self.event.elapsed_time(later.event) / 1000.0


@dataclass(frozen=True)
class StepTimes:
    """One prompt's step times: device-timed (`first_step_s`, `steps_s`) and, for comparison, the CPU's view."""

    first_step_s: float | None  # the sample node's start to step 1's end
    steps_s: tuple[float, ...]  # step k-1's end to step k's end, k >= 2
    cpu_first_step_s: float | None
    cpu_steps_s: tuple[float, ...]

    @property
    def s_per_step(self) -> float | None:
        """The median of the later steps (the first holds fault-in and first-use costs), else the first step."""
        return _median(self.steps_s) if self.steps_s else self.first_step_s

    @property
    def cpu_s_per_step(self) -> float | None:
        return _median(self.cpu_steps_s) if self.cpu_steps_s else self.cpu_first_step_s

    def fields(self) -> dict:
        return {"first_step_s": self.first_step_s, "s_per_step": self.s_per_step, "steps_s": list(self.steps_s),
                "cpu_first_step_s": self.cpu_first_step_s, "cpu_s_per_step": self.cpu_s_per_step,
                "step_clock": "device"}


@dataclass
class StepClock:
    """Marks taken at the sample node's start (`start`) and at each progress hook (`step`); `times()` reads them."""

    new_mark: Callable[[], Mark] = CudaMark.now
    cpu_clock: Callable[[], float] = time.perf_counter
    _start: tuple[float, Mark] | None = None
    _steps: list[tuple[float, Mark]] = field(default_factory=list)

    def reset(self) -> None:
        self._start, self._steps = None, []

    def start(self) -> None:
        self._start = (self.cpu_clock(), self.new_mark())

    def step(self) -> None:
        self._steps.append((self.cpu_clock(), self.new_mark()))

    @property
    def steps_done(self) -> int:
        return len(self._steps)

    def times(self) -> StepTimes:
        pairs = list(itertools.pairwise(self._steps))
        first = self._steps[0] if self._steps else None
        return StepTimes(
            first_step_s=self._start[1].seconds_until(first[1]) if self._start and first else None,
            steps_s=tuple(a[1].seconds_until(b[1]) for a, b in pairs),
            cpu_first_step_s=first[0] - self._start[0] if self._start and first else None,
            cpu_steps_s=tuple(b[0] - a[0] for a, b in pairs))


def _median(values: tuple[float, ...]) -> float:
    return sorted(values)[len(values) // 2]
