"""The Sol schedule: settings, sigma progress, tau curves and the key ranges that stay exact.

tau is Sol's routing threshold (a key block is computed exactly when its proxy score exceeds
mu + tau * sigma of its query block's proxy scores): lower tau keeps more blocks exact, and
tau = -100 is dense exact attention. `tau_at` returns None where the schedule runs exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import LongMediaInputError
from ..limits import MAX_SOL_MIN_TOKENS

CURVES = ("linear", "cosine", "sqrt", "smoothstep", "exponential", "step")
SINK_MODES = ("exact_kv", "exact_kv_and_rows", "off")
ROW_SPAN_KINDS = ("text", "cond", "cond_audio", "ref_img", "ref_audio", "audio", "video")
SINK_KINDS = frozenset({"text", "cond", "cond_audio", "ref_img", "ref_audio", "audio"})
"""Every packed H3 row span except the target video: conditioning, references and audio keys stay exact."""

TAU_RANGE = (-100.0, 10.0)
EXPONENTIAL_RATE = 4.0
STEP_AT = 0.5


class SolSettingsError(ValueError):
    """A Sol setting, sigma table or row-span table is outside its allowed range."""


class SolInputError(SolSettingsError, LongMediaInputError):
    """A Sol setting out of range: one of the nodes' sol_* inputs, refused as LongMedia's input error (named, its
    range and a fix; a NaN passes ComfyUI's own range check and lands here)."""


def _check_tau(name: str, value: object) -> float:
    lo, hi = TAU_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise SolInputError(name, value, f"a finite number from {lo:g} to {hi:g} (lower keeps more key blocks "
                            "exact, -100 is dense exact attention)", "Pick a value like 0.8-1.3.")
    return float(value)


@dataclass(frozen=True)
class SolSettings:
    """How `sol` and `scheduled_sol` run.

    tau_start / tau_end: tau at the start and end of the Sol part of the schedule (`sol` uses tau_start).
    curve: how tau moves from tau_start to tau_end over sigma progress (one of CURVES).
    min_tokens: sequences shorter than this run exact (Sol gains little there).
    dense_percent: the leading fraction of the schedule (0.2 = first 20 %) that runs exact (scheduled_sol).
    sink_conditioning: exact_kv (conditioning/reference/audio keys always exact), exact_kv_and_rows
    (their query rows too), or off.
    """

    tau_start: float = 1.3
    tau_end: float = 0.8
    curve: str = "cosine"
    min_tokens: int = 16384
    dense_percent: float = 0.2
    sink_conditioning: str = "exact_kv"

    def __post_init__(self) -> None:
        _check_tau("sol_tau_start", self.tau_start)
        _check_tau("sol_tau_end", self.tau_end)
        if self.curve not in CURVES:
            raise SolInputError("sol_curve", self.curve, f"one of {', '.join(CURVES)}", "Pick one of these curves.")
        m = self.min_tokens
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= MAX_SOL_MIN_TOKENS:
            raise SolInputError("sol_min_tokens", m, f"an integer from 0 to {MAX_SOL_MIN_TOKENS} (shorter sequences "
                                "run exact; 0 = always Sol)", "Leave it at 16384, or 0 to run Sol at any length.")
        d = self.dense_percent
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or not 0.0 <= d <= 1.0:
            raise SolInputError("sol_dense_percent", d, "a fraction from 0 to 1 (0.2 = the first 20 % of steps run "
                                "exact)", "For 20 % write 0.2, not 20.")
        if self.sink_conditioning not in SINK_MODES:
            raise SolInputError("sol_sink_conditioning", self.sink_conditioning, f"one of {', '.join(SINK_MODES)}",
                                "Pick one of these modes.")

    @property
    def sinks_keys(self) -> bool:
        return self.sink_conditioning != "off"

    @property
    def sinks_rows(self) -> bool:
        return self.sink_conditioning == "exact_kv_and_rows"

    @property
    def most_exact_tau(self) -> float:
        """The lower of the two taus: the setting that keeps the most key blocks exact."""
        return min(self.tau_start, self.tau_end)


def curve_weight(curve: str, progress: float) -> float:
    """Fraction of the way from tau_start to tau_end at `progress` in [0, 1] (0 at 0, 1 at 1, non-decreasing).

    linear: p. cosine: (1 - cos(pi p)) / 2. sqrt: sqrt(p) (moves early). smoothstep: 3p^2 - 2p^3.
    exponential: (e^(4p) - 1) / (e^4 - 1) (moves late). step: 0 before p = 0.5, 1 from there on.
    """
    p = min(1.0, max(0.0, float(progress)))
    if curve == "linear":
        return p
    if curve == "cosine":
        return 0.5 - 0.5 * math.cos(math.pi * p)
    if curve == "sqrt":
        return math.sqrt(p)
    if curve == "smoothstep":
        return p * p * (3.0 - 2.0 * p)
    if curve == "exponential":
        return math.expm1(EXPONENTIAL_RATE * p) / math.expm1(EXPONENTIAL_RATE)
    if curve == "step":
        return 0.0 if p < STEP_AT else 1.0
    raise SolSettingsError(f"curve must be one of {', '.join(CURVES)}, got {curve!r}")


def tau_at(progress: float | None, settings: SolSettings) -> float | None:
    """tau for `scheduled_sol` at sigma progress in [0, 1]; None = run exact (inside dense_percent).

    The Sol part [dense_percent, 1] is re-normalised to [0, 1] before the curve, so it always runs
    the full way from tau_start to tau_end. Unknown progress (None) runs exact.
    """
    if progress is None:
        return None
    p = min(1.0, max(0.0, float(progress)))
    d = settings.dense_percent
    if p < d or d >= 1.0:
        return None
    w = curve_weight(settings.curve, (p - d) / (1.0 - d))
    return settings.tau_start + (settings.tau_end - settings.tau_start) * w


def exact_step_count(steps: int, settings: SolSettings) -> int:
    """How many of `steps` model-call steps `scheduled_sol` runs exact: step i sits at progress i / (steps - 1)
    (`sigma_progress` on the sampler's table), exact while below dense_percent. The exact phase scales with the
    step count: 20 steps at 0.2 run 4 exact, 8 steps run 2, 4 steps run 1 (the first step always runs exact)."""
    n = max(1, int(steps))
    if n == 1:
        return 1
    return sum(1 for i in range(n) if tau_at(i / (n - 1), settings) is None)


def _as_floats(sigmas: object) -> list[float]:
    if hasattr(sigmas, "detach"):  # a torch tensor: one host copy, no torch import needed here
        sigmas = sigmas.detach().flatten().cpu().tolist()
    return [float(s) for s in sigmas]  # type: ignore[union-attr]


def sigma_progress(sigma: object, sigmas: object) -> float:
    """Where `sigma` sits in the sampler's sigma table: 0 at the first sigma, 1 at the last.

    A trailing 0 (the schedule's end, never a model call) is dropped, so the last step the model
    runs is 1. A sigma between grid points interpolates linearly between their step indices;
    above the first sigma is 0, below the last is 1. `sigma` may be a tensor (its first value is used).
    """
    values = _as_floats(sigma) if hasattr(sigma, "detach") or isinstance(sigma, (list, tuple)) else [float(sigma)]
    grid = _as_floats(sigmas)
    s = values[0] if values else math.nan
    if not grid or not all(math.isfinite(g) for g in grid) or not math.isfinite(s):
        raise SolSettingsError(
            f"sigmas must be a non-empty table of finite values and sigma finite, got sigma={s!r}, "
            f"sigmas={grid!r}; pass the sampler's sample_sigmas")
    while len(grid) > 1 and grid[-1] == 0.0:
        grid.pop()
    n = len(grid) - 1
    if n == 0:
        return 0.0
    for i in range(n):
        a, b = grid[i], grid[i + 1]
        lo, hi = min(a, b), max(a, b)
        if lo <= s <= hi:
            frac = 0.0 if a == b else (a - s) / (a - b)
            return (i + frac) / n
    first, last = grid[0], grid[-1]
    descending = first >= last
    before_start = s > first if descending else s < first
    return 0.0 if before_start else 1.0


def sink_ranges_from_row_spans(row_spans: Iterable[Sequence[object]],
                              kinds: Iterable[str] = SINK_KINDS) -> tuple[tuple[int, int], ...]:
    """Packed key ranges [start, stop) that stay exact: H3 row_spans of `kinds`, adjacent ones merged.

    `row_spans` is H3's packed row-span table: (start, stop, kind) rows with kinds from ROW_SPAN_KINDS.
    """
    keep = frozenset(kinds)
    ranges: list[tuple[int, int]] = []
    for row in row_spans:
        if len(row) != 3:
            raise SolSettingsError(f"row spans must be (start, stop, kind), got {row!r}")
        start, stop, kind = row
        if kind not in ROW_SPAN_KINDS:
            raise SolSettingsError(f"row-span kind must be one of {', '.join(ROW_SPAN_KINDS)}, got {kind!r} in {row!r}")
        if isinstance(start, bool) or isinstance(stop, bool) or not isinstance(start, int) \
                or not isinstance(stop, int) or not 0 <= start <= stop:
            raise SolSettingsError(f"row-span bounds must be integers with 0 <= start <= stop, got {row!r}")
        if kind not in keep or start == stop:
            continue
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], stop)
        else:
            ranges.append((start, stop))
    return tuple(ranges)
