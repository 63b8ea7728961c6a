"""RunReport separates the first step from the steady ones and counts the steps a step cache served without a
model call (StepRecord.sampler_step, from the sampler's callback)."""

from __future__ import annotations

import json
import random

from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.report.run_report import RunReport, StepRecord


def _report(steps, sampler_steps, warmup_s=0.0, probe_s=0.0):
    planned = plan(ModelProfile.preset("h3-int8"), DeviceProfile.card(16), build_geometry(1344, 768, seconds=5),
                   attention_resolver=default_attention_path)
    return RunReport(plan=planned, attention_backend="sol", streamed_blocks=(), boundaries=(), steps=tuple(steps),
                     block_peak_bytes=(), guard_events=(), preview="ok", warmup_s=warmup_s,
                     sampler_steps=sampler_steps, probe_s=probe_s)


def test_first_step_apart_from_the_steady_mean_with_cond_and_uncond_calls():
    rng = random.Random(25)
    first, later = rng.uniform(20, 25), [rng.uniform(12, 13) for _ in range(3)]
    steps, i = [], 0
    for step, total in enumerate([first, *later]):
        for half in (0.5, 0.5):  # cond and uncond in two model calls
            steps.append(StepRecord(i, 1.0 - step / 4, total * half, 0, 0, step))
            i += 1
    report = _report(steps, 4, warmup_s=3.25)
    assert abs(report.first_step_s - first) < 1e-9
    assert abs(report.steady_step_s - sum(later) / 3) < 1e-9
    assert report.skipped_steps == ()
    line = report.time_lines()[0]
    assert line.startswith(f"first step {first:.2f} s, steady steps") and "mean of 3" in line and "3.25 s" in line
    d = json.loads(report.to_json())
    assert d["model_calls"] == 8 and d["skipped_steps"] == [] and abs(d["first_step_s"] - first) < 1e-9


def test_steps_without_a_model_call_are_counted_as_skipped():
    ran = [0, 1, 2, 4, 7]  # a step cache served 3, 5, 6
    steps = [StepRecord(i, 1.0, 1.0, 0, 0, s) for i, s in enumerate(ran)]
    report = _report(steps, 8)
    assert report.skipped_steps == (3, 5, 6)
    assert "model calls: 5 over 8 sampler steps; 3 step(s) without a model call" in report.time_lines()[1]
    assert json.loads(report.to_json())["skipped_steps"] == [3, 5, 6]


def test_uncounted_steps_report_no_skips():
    steps = [StepRecord(0, 1.0, 2.0, 0, 0)]  # sampler_step -1: a caller that did not count
    report = _report(steps, 0)
    assert report.skipped_steps == () and report.first_step_s is None and report.time_lines() == ()


def test_the_speed_timing_shows_beside_the_first_step_and_in_the_json():
    """The probe's seconds (before the first model call) are named beside the first step, not folded into it."""
    rng = random.Random(59)
    probe = rng.uniform(8, 20)
    steps = [StepRecord(i, 1.0 - i / 3, rng.uniform(12, 13), 0, 0, i) for i in range(3)]
    report = _report(steps, 3, warmup_s=2.0, probe_s=probe)
    line = report.time_lines()[0]
    assert f"the attention speed timing ran before it in {probe:.2f} s" in line
    assert abs(json.loads(report.to_json())["probe_s"] - probe) < 1e-9
    assert "speed timing" not in _report(steps, 3).time_lines()[0]
