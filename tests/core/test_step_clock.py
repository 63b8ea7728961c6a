"""The card bench's step clock reads the device's timeline: with a CPU that runs ahead of queued kernels (ComfyUI's
progress hook does not wait for them), the CPU's step times are wrong and the device marks are right."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from bench.cards.step_clock import StepClock


class QueuedDevice:
    """A device with a queue: kernels enqueued by the CPU run back to back; the CPU only pays `enqueue_s` per call,
    and waits for the device only when it synchronizes (as ComfyUI does when it decodes a preview, say)."""

    def __init__(self, enqueue_s: float) -> None:
        self.cpu_t = 0.0
        self.busy_until = 0.0
        self.enqueue_s = enqueue_s

    def run(self, seconds: float) -> None:
        self.busy_until = max(self.busy_until, self.cpu_t) + seconds
        self.cpu_t += self.enqueue_s

    def synchronize(self) -> None:
        self.cpu_t = max(self.cpu_t, self.busy_until)

    def cpu_clock(self) -> float:
        return self.cpu_t

    def mark(self) -> "DeviceMark":
        # an event recorded now completes when the device has run everything queued before it
        self.cpu_t += self.enqueue_s
        return DeviceMark(max(self.busy_until, self.cpu_t))


@dataclass(frozen=True)
class DeviceMark:
    at: float

    def seconds_until(self, later: "DeviceMark") -> float:
        return later.at - self.at


@pytest.mark.parametrize("seed", range(4))
def test_device_marks_time_the_steps_where_the_cpu_clock_runs_ahead(seed):
    rng = random.Random(seed)
    steps = [rng.uniform(30.0, 60.0) for _ in range(5)]
    dev = QueuedDevice(enqueue_s=rng.uniform(1e-3, 1e-2))
    clock = StepClock(new_mark=dev.mark, cpu_clock=dev.cpu_clock)
    clock.start()
    for i, seconds in enumerate(steps):
        dev.run(seconds)            # the step's kernels, queued
        clock.step()                # ComfyUI's progress hook, without waiting for them
        if i == 2:
            dev.synchronize()       # something waits once (a preview decode): the CPU catches up here only
    t = clock.times()
    assert t.first_step_s == pytest.approx(steps[0], abs=0.1)
    assert t.steps_s == pytest.approx(tuple(steps[1:]), abs=0.1)
    assert t.s_per_step == pytest.approx(sorted(steps[1:])[2], abs=0.1)
    # the old method (the CPU's time at the hook) is wrong: fast steps, then one that absorbs the queue
    assert t.cpu_first_step_s < 1.0 and t.cpu_s_per_step < 1.0
    assert max(t.cpu_steps_s) > max(steps[1:])
    assert t.fields()["step_clock"] == "device"


def test_a_clock_with_no_steps_reports_none():
    dev = QueuedDevice(enqueue_s=1e-3)
    clock = StepClock(new_mark=dev.mark, cpu_clock=dev.cpu_clock)
    clock.start()
    t = clock.times()
    assert t.first_step_s is None and t.steps_s == () and t.s_per_step is None
