"""The Sol schedule: settings validation, curves, dense phase, sigma progress and sink ranges."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.attention.schedule import (
    CURVES,
    SolSettings,
    SolSettingsError,
    curve_weight,
    exact_step_count,
    sigma_progress,
    sink_ranges_from_row_spans,
    tau_at,
)

GRID = [i / 200 for i in range(201)]


# ---- settings ---------------------------------------------------------------------------------

def test_defaults():
    s = SolSettings()
    assert (s.tau_start, s.tau_end, s.curve, s.min_tokens, s.dense_percent, s.sink_conditioning) == \
        (1.3, 0.8, "cosine", 16384, 0.2, "exact_kv")
    assert s.sinks_keys and not s.sinks_rows and s.most_exact_tau == 0.8


@pytest.mark.parametrize("field, value, named", [
    ("tau_start", 11.0, "sol_tau_start"),
    ("tau_start", float("nan"), "sol_tau_start"),
    ("tau_end", -101.0, "sol_tau_end"),
    ("tau_end", "0.8", "sol_tau_end"),
    ("curve", "quadratic", "sol_curve"),
    ("min_tokens", -1, "sol_min_tokens"),
    ("min_tokens", 1.5, "sol_min_tokens"),
    ("min_tokens", True, "sol_min_tokens"),
    ("min_tokens", (1 << 22) + 1, "sol_min_tokens"),
    ("dense_percent", 20, "sol_dense_percent"),
    ("dense_percent", -0.1, "sol_dense_percent"),
    ("sink_conditioning", "rows", "sol_sink_conditioning"),
])
def test_settings_validation_names_input_value_and_range(field, value, named):
    with pytest.raises(SolSettingsError) as info:
        SolSettings(**{field: value})
    message = str(info.value)
    assert named in message and repr(value) in message
    assert any(word in message for word in ("[", "one of", ">=", " from "))  # the allowed range is stated
    assert isinstance(info.value, ValueError)


def test_extreme_valid_settings():
    SolSettings(tau_start=-100.0, tau_end=10.0, min_tokens=0, dense_percent=1.0, sink_conditioning="off")


# ---- curves -----------------------------------------------------------------------------------

@pytest.mark.parametrize("curve", CURVES)
def test_curve_endpoints_range_and_monotonicity(curve):
    values = [curve_weight(curve, p) for p in GRID]
    assert values[0] == 0.0 and values[-1] == pytest.approx(1.0, abs=1e-12)
    assert all(0.0 <= w <= 1.0 for w in values)
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))
    assert curve_weight(curve, -0.5) == values[0] and curve_weight(curve, 1.5) == values[-1]  # clamped


@pytest.mark.parametrize("curve, p, expected", [
    ("linear", 0.25, 0.25),
    ("cosine", 0.5, 0.5),
    ("cosine", 0.25, (1 - math.cos(math.pi / 4)) / 2),
    ("sqrt", 0.25, 0.5),
    ("smoothstep", 0.5, 0.5),
    ("smoothstep", 0.25, 0.15625),
    ("exponential", 0.5, math.expm1(2.0) / math.expm1(4.0)),
])
def test_curve_values(curve, p, expected):
    assert curve_weight(curve, p) == pytest.approx(expected, rel=1e-12)


def test_curve_shapes_differ_where_they_should():
    assert curve_weight("sqrt", 0.3) > curve_weight("linear", 0.3) > curve_weight("exponential", 0.3)
    assert curve_weight("cosine", 0.2) < 0.2 and curve_weight("cosine", 0.8) > 0.8


def test_step_jumps_at_half():
    assert curve_weight("step", 0.4999) == 0.0
    assert curve_weight("step", 0.5) == 1.0
    assert {curve_weight("step", p) for p in GRID} == {0.0, 1.0}


def test_unknown_curve():
    with pytest.raises(SolSettingsError, match="quadratic"):
        curve_weight("quadratic", 0.5)


# ---- tau_at / dense_percent -------------------------------------------------------------------

def test_dense_phase_then_full_sweep():
    s = SolSettings(tau_start=1.3, tau_end=0.8, curve="linear", dense_percent=0.2)
    assert tau_at(0.0, s) is None and tau_at(0.1999, s) is None
    assert tau_at(0.2, s) == pytest.approx(1.3)
    assert tau_at(0.6, s) == pytest.approx(1.05)
    assert tau_at(1.0, s) == pytest.approx(0.8)
    assert tau_at(None, s) is None  # unknown progress runs exact


def test_dense_percent_edges():
    everything = SolSettings(dense_percent=1.0)
    assert all(tau_at(p, everything) is None for p in GRID)
    nothing = SolSettings(dense_percent=0.0, curve="linear")
    assert tau_at(0.0, nothing) == pytest.approx(1.3) and tau_at(1.0, nothing) == pytest.approx(0.8)


def test_dense_percent_counts_steps():
    """30 steps, 0.2 dense: the first 6 model calls run exact (index progress i / 29)."""
    s = SolSettings(dense_percent=0.2)
    exact = [tau_at(i / 29, s) is None for i in range(30)]
    assert exact == [True] * 6 + [False] * 24


def test_step_curve_schedule():
    s = SolSettings(tau_start=1.2, tau_end=0.9, curve="step", dense_percent=0.0)
    assert tau_at(0.49, s) == pytest.approx(1.2) and tau_at(0.5, s) == pytest.approx(0.9)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(curve=st.sampled_from(CURVES), a=st.floats(-100, 10), b=st.floats(-100, 10),
       d=st.floats(0, 0.99), p1=st.floats(0, 1), p2=st.floats(0, 1))
def test_tau_stays_between_ends_and_moves_one_way(curve, a, b, d, p1, p2):
    s = SolSettings(tau_start=a, tau_end=b, curve=curve, dense_percent=d)
    lo, hi = sorted((p1, p2))
    t_lo, t_hi = tau_at(lo, s), tau_at(hi, s)
    if t_lo is None:
        assert lo < d
        return
    assert min(a, b) - 1e-9 <= t_lo <= max(a, b) + 1e-9
    assert t_hi is not None
    # progress moves tau from tau_start towards tau_end, never back
    assert (t_hi - t_lo) * (b - a) >= -1e-9


# ---- sigma progress ---------------------------------------------------------------------------

SIGMAS = [1.0, 0.9, 0.75, 0.5, 0.25, 0.1, 0.0]  # 6 model calls, then the final 0


def test_progress_on_grid_with_final_zero():
    assert [sigma_progress(s, SIGMAS) for s in SIGMAS[:-1]] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert sigma_progress(0.0, SIGMAS) == 1.0


def test_progress_between_grid_points_interpolates():
    assert sigma_progress(0.625, SIGMAS) == pytest.approx(0.5)  # halfway between 0.75 (0.4) and 0.5 (0.6)
    assert sigma_progress(0.95, SIGMAS) == pytest.approx(0.1)
    assert sigma_progress(0.05, SIGMAS) == 1.0  # below the last model sigma
    assert sigma_progress(1.4, SIGMAS) == 0.0  # above the first


def test_progress_accepts_tensors_and_batches():
    sigmas = torch.tensor(SIGMAS, dtype=torch.float32)
    assert sigma_progress(torch.tensor([0.5, 0.5]), sigmas) == pytest.approx(0.6)
    assert sigma_progress(torch.tensor(0.25), sigmas) == pytest.approx(0.8)


def test_progress_without_final_zero_and_single_sigma():
    assert sigma_progress(0.1, [1.0, 0.5, 0.1]) == 1.0
    assert sigma_progress(0.5, [1.0, 0.5, 0.1]) == pytest.approx(0.5)
    assert sigma_progress(0.7, [0.7]) == 0.0
    assert sigma_progress(0.7, [0.7, 0.0]) == 0.0


def test_progress_is_monotone_on_a_real_looking_schedule():
    g = torch.Generator().manual_seed(3)
    steps = torch.sort(torch.rand(40, generator=g), descending=True).values.tolist() + [0.0]
    probes = sorted(torch.rand(300, generator=g).tolist(), reverse=True)
    values = [sigma_progress(s, steps) for s in probes]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("sigma, sigmas", [(0.5, []), (float("nan"), [1.0, 0.0]), (0.5, [1.0, float("inf")])])
def test_progress_rejects_bad_tables(sigma, sigmas):
    with pytest.raises(SolSettingsError, match="sigmas"):
        sigma_progress(sigma, sigmas)


# ---- sink ranges ------------------------------------------------------------------------------

H3_TABLE = [(0, 300, "text"), (300, 1200, "cond"), (1200, 1240, "cond_audio"), (1240, 2140, "ref_img"),
            (2140, 2180, "ref_audio"), (2180, 2580, "audio"), (2580, 20580, "video")]


def test_sinks_cover_everything_but_the_target_video():
    assert sink_ranges_from_row_spans(H3_TABLE) == ((0, 2580),)


def test_sinks_keep_gaps_and_skip_empty_segments():
    table = [(0, 10, "text"), (10, 10, "cond"), (10, 50, "video"), (50, 60, "ref_audio"), (60, 90, "video")]
    assert sink_ranges_from_row_spans(table) == ((0, 10), (50, 60))
    assert sink_ranges_from_row_spans(table, kinds={"video"}) == ((10, 50), (60, 90))
    assert sink_ranges_from_row_spans([]) == ()


@pytest.mark.parametrize("row, fragment", [
    ((0, 10, "subtitles"), "subtitles"),
    ((10, 5, "text"), "start <= stop"),
    ((0, 10), "(start, stop, kind)"),
    ((-1, 10, "text"), "start <= stop"),
])
def test_sinks_reject_bad_rows(row, fragment):
    with pytest.raises(SolSettingsError) as info:
        sink_ranges_from_row_spans([row])
    assert fragment in str(info.value)


@pytest.mark.parametrize("steps, exact", [(1, 1), (2, 1), (4, 1), (8, 2), (20, 4), (30, 6)])
def test_exact_phase_scales_with_few_steps(steps, exact):
    """Turbo schedules (4 and 8 steps) keep an exact phase: the first step at least, dense_percent of the rest."""
    s = SolSettings(dense_percent=0.2)
    assert exact_step_count(steps, s) == exact
    sigmas = [1.0 - i / steps for i in range(steps)] + [0.0]     # the sampler's table: a trailing 0, never a call
    from_sigmas = [tau_at(sigma_progress(sig, sigmas), s) is None for sig in sigmas[:-1]]
    assert from_sigmas == [True] * exact + [False] * (steps - exact)
