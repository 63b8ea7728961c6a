"""The EasyCache bound (longmedia/planning/step_cache.py) and H3's simple sigmas (longmedia/h3/sigmas.py): bounds known
by hand, the rule's two halves (calls outside the window and the window's first two never skip), its inputs refused
by name; the plan and the CLI run the bound's calls. Against ComfyUI's own code: tests/comfyui/test_easycache_bound.py."""

from __future__ import annotations

import json
import random

import pytest

from longmedia.cli import main
from longmedia.errors import LongMediaInputError
from longmedia.h3.sigmas import f32, percent_to_sigma, schedule_sigmas, time_snr_shift
from longmedia.planning.step_cache import EasyCacheSettings, easycache_bound, pass_bound

RNG = random.Random(46)
DRAWS = [(RNG.randint(1, 300), EasyCacheSettings(round(RNG.uniform(0, 1), 2), round(RNG.uniform(0, 1), 2)))
         for _ in range(200)] + [(RNG.randint(1, 300), EasyCacheSettings()) for _ in range(50)]


def test_h3_simple_sigmas_by_hand():
    # 8 steps: t = 1 - x/8 on the 1000-entry table, sigma = 12 t / (1 + 11 t); then 0
    got = schedule_sigmas(8)
    want = [12 * t / (1 + 11 * t) for t in (1 - x / 8 for x in range(8))] + [0.0]
    assert got == pytest.approx(want, rel=1e-6, abs=0) and got[0] == 1.0 and got[-1] == 0.0
    assert all(f32(s) == s for s in got)             # float32 values, as ComfyUI's table holds them


def test_the_turbo_schedule_by_hand():
    # start sigma = shift(0.85) = 0.9855, end sigma = shift(0.05) = 0.387: the 8-step t's are 1, .875, .75 .. .125,
    # so t <= 0.85 from step 3 (index 2) to the last; the first two of those run, the other four can skip
    assert percent_to_sigma(0.15) == pytest.approx(10.2 / 10.35) and percent_to_sigma(0.95) == pytest.approx(0.6 / 1.55)
    b = easycache_bound(8)
    assert b.window == (2, 3, 4, 5, 6, 7) and b.skippable == (4, 5, 6, 7) and b.steps_run == 4
    # 20 steps: step index 3 sits at t = 0.85 exactly; its float32 sigma is above the start sigma in float32
    assert easycache_bound(20).window == tuple(range(4, 20)) and easycache_bound(20).steps_run == 6
    # a window of three steps skips one; of two or fewer, none
    assert easycache_bound(4).skippable == (3,)
    assert easycache_bound(3).window == (1, 2) and easycache_bound(3).skippable == ()


def test_a_hand_made_schedule():
    start, end = f32(percent_to_sigma(0.15)), f32(percent_to_sigma(0.95))
    sigmas = [1.0, 0.99, start, 0.9, 0.5, 0.39, end, 0.2, 0.0]     # start is inside, end is not (end < sigma)
    b = easycache_bound(8, sigmas=sigmas)
    assert b.window == (2, 3, 4, 5) and b.skippable == (4, 5) and b.steps_run == 6
    assert easycache_bound(8, sigmas=sigmas[:-1]) == b               # the model calls' sigmas alone give the same


@pytest.mark.parametrize("steps, settings", DRAWS)
def test_calls_outside_the_window_and_its_first_two_never_skip(steps, settings):
    b = easycache_bound(steps, settings)
    sigmas = schedule_sigmas(steps)
    start, end = f32(percent_to_sigma(settings.start_percent)), f32(percent_to_sigma(settings.end_percent))
    inside = [i for i in range(steps) if end < sigmas[i] <= start]
    assert b.window == tuple(inside)
    assert not set(b.skippable) & set(b.window[:2])                                   # the window's first two run
    assert all(end < sigmas[i] <= start for i in b.skippable)                        # only inside the window
    assert b.skippable == b.window[2:] and b.steps_run == steps - max(0, len(inside) - 2)
    assert list(b.window) == list(range(b.window[0], b.window[-1] + 1)) if b.window else True


def test_the_edges_of_the_percent_range():
    assert easycache_bound(10, EasyCacheSettings(0.0, 1.0)).window == tuple(range(10))  # every step: sigma <= 1, > 0
    assert easycache_bound(10, EasyCacheSettings(1.0, 0.0)).window == ()               # start sigma 0: no step
    assert time_snr_shift(1.0, 0.3) == 0.3


@pytest.mark.parametrize("call, name", [
    (lambda: easycache_bound(0), "steps"),
    (lambda: easycache_bound(8.0), "steps"),
    (lambda: EasyCacheSettings(1.5, 0.95), "start_percent"),
    (lambda: EasyCacheSettings(0.15, -0.1), "end_percent"),
    (lambda: easycache_bound(8, scheduler="karras"), "scheduler"),
    (lambda: easycache_bound(8, sigmas=[1.0, 0.5, 0.0]), "sigmas"),
])
def test_inputs_are_refused_by_name(call, name):
    with pytest.raises(LongMediaInputError) as exc:
        call()
    assert exc.value.input_name == name


def _plan(capsys, *flags):
    assert main(["--steps", "8", "--cfg", "1", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_plan_runs_the_bounds_calls(capsys):
    plain = _plan(capsys, "--seconds", "30", "--segment-seconds", "10")
    cached = _plan(capsys, "--seconds", "30", "--segment-seconds", "10", "--easycache")
    main_pass = [next(s for s in d["whole_job"]["stages"] if s["name"] == "DiT main pass") for d in (plain, cached)]
    assert plain["easycache"] is None and cached["easycache"]["passes"] == 4
    figures = cached["easycache"]
    assert (figures["calls"], figures["calls_skippable"], figures["skippable"]) == (32, 16, [4, 5, 6, 7])
    assert main_pass[1]["seconds"] == pytest.approx(main_pass[0]["seconds"] * 4 / 8)  # half the calls, no sol mix
    others = [[s["seconds"] for s in d["whole_job"]["stages"] if s["name"] != "DiT main pass"] for d in (plain, cached)]
    assert others[0] == others[1]


def test_scheduled_sol_keeps_its_exact_steps_and_skips_sol_steps(capsys):
    def main_seconds(*flags):
        return next(s["seconds"] for s in _plan(capsys, *flags)["whole_job"]["stages"] if s["name"] == "DiT main pass")
    exact = main_seconds() / 8                                              # an exact step
    sol = (main_seconds("--attention-mode", "scheduled_sol") - 2 * exact) / 6  # 2 exact steps (0, 1), then 6 Sol
    assert 0 < sol < exact
    # EasyCache can skip steps 4-7, all Sol: the two exact steps and two Sol steps remain
    assert main_seconds("--attention-mode", "scheduled_sol", "--easycache") == pytest.approx(2 * exact + 2 * sol)


def test_the_cli_line_and_its_refusals(capsys):
    assert main(["--steps", "8", "--cfg", "1", "--easycache"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = ("EasyCache: at most 4 of 8 calls skipped (ComfyUI's defaults: window 0.15-0.95); how many it skips "
            "depends on the prompt: this is the best case")
    assert out[out.index(line) + 1].startswith("whole clip: about ")
    assert main(["--easycache", "--easycache-start-percent", "2"]) == 2
    assert "--easycache-start-percent=2.0 is not allowed: expected a number from 0 to 1" in capsys.readouterr().err
    assert main(["--easycache-end-percent", "0.9"]) == 0
    assert "--easycache-end-percent has no effect without --easycache" in capsys.readouterr().out


def test_a_bound_on_the_models_own_window_and_the_passs_own_sigmas():
    # the window's sigmas as the model's percent_to_sigma gives them: H3's own give H3's bound; another shift's another
    for steps, settings in DRAWS[:50]:
        h3 = (percent_to_sigma(settings.start_percent), percent_to_sigma(settings.end_percent))
        assert easycache_bound(steps, settings, window_sigmas=h3) == easycache_bound(steps, settings)
    shift3 = (percent_to_sigma(0.15, 3.0), percent_to_sigma(0.95, 3.0))
    assert easycache_bound(20, window_sigmas=shift3) == easycache_bound(20, sigmas=schedule_sigmas(20), shift=3.0)
    assert easycache_bound(20, window_sigmas=shift3) != easycache_bound(20)


def test_plan_job_takes_the_samplers_bound_of_its_own_steps():
    tail = schedule_sigmas(12)[-7:]                      # denoise 0.5 over 6 steps
    bound = easycache_bound(6, sigmas=tail)
    assert pass_bound(6, bound) is bound and pass_bound(6, EasyCacheSettings()) == easycache_bound(6)
    assert pass_bound(6, None) is None
    with pytest.raises(LongMediaInputError) as info:
        pass_bound(8, bound)
    assert info.value.input_name == "easycache" and "8 steps" in str(info.value)
    assert bound.model_line(2).startswith(f"EasyCache on the model: at most {2 * bound.steps_skippable} of 12 calls "
                                          "skipped (best case)")
