"""`easycache_bound(steps, ...) -> EasyCacheBound`: the most model calls ComfyUI's stock EasyCache node can skip in one
pass, read from its code (comfy_extras/nodes_easycache.py, ComfyUI 0.33.0; upstream 0.38's is the same file).

How many it does skip depends on the prompt (its change-rate estimate against reuse_threshold); this is the best case,
the rule below with the threshold never reached. The rule, per sampler step at sigma s (`transformer_options["sigmas"]`,
the step's sigma; a step's calls, one at cfg 1, are skipped together):

1. The window. `EasyCacheHolder.prepare_timesteps` (run by `easycache_sample_wrapper` at the start of every sample,
   on a fresh clone of the holder) sets start_t = `model_sampling.percent_to_sigma(start_percent)` and
   end_t = `percent_to_sigma(end_percent)`. `easycache_forward_wrapper` runs the model at once, touching no state,
   when `is_past_end_timestep` (not s > end_t); it can skip only when `should_do_easycache` (s <= start_t). So the
   window is end_t < s <= start_t, compared in float32 (`h3.sigmas`); before it and after it every call runs.
2. The calls that establish the state. Before the window `first_cond_uuid` is unset, so no state is kept but the
   cache diffs. Inside it, a call may skip only when `has_output_prev_norm()` and `has_relative_transformation_rate()`:
   - the window's first step sets `first_cond_uuid` (`initial_step`), has no `x_prev_subsampled` (no input change)
     and no output norm: it runs, and stores x_prev and the output norm;
   - the second computes the input change, but `relative_transformation_rate` is still None: it runs, and sets the
     rate (output change over input change);
   - from the third on a step is skipped when the accumulated rate stays under reuse_threshold; a skipped step
     returns before the state is updated, so with the threshold never reached every later step in the window skips.
   So at most window - 2 steps are skipped (none for a window of 2 or fewer), and every step before the window, the
   window's first two and every step after it run.

`check_metadata` resets the state if the latent's shape, dtype or device changes within a sample (then the reset's
rate of 0.0, not None, lets a skip come one step sooner); a LongMedia pass keeps its latent, so the rule holds.
The plan counts a skipped call as no DiT time (no weights read either); the wrapper's own work on a call (a
subsampled difference and a mean, and adding the cached difference) is small beside a DiT call and is not counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import LongMediaInputError, check_float, check_int
from ..h3.sigmas import H3_SHIFT, MAX_STEPS, f32, percent_to_sigma, schedule_sigmas

ESTABLISHING_STEPS = 2           # the window's first steps, which always run (rule 2)


@dataclass(frozen=True)
class EasyCacheSettings:
    """The EasyCache node's start_percent and end_percent (its defaults); its reuse_threshold moves only how many
    calls it skips, never the bound."""

    start_percent: float = 0.15
    end_percent: float = 0.95

    def __post_init__(self) -> None:
        check_float("start_percent", self.start_percent, 0.0, 1.0, "EasyCache's default is 0.15.")
        check_float("end_percent", self.end_percent, 0.0, 1.0, "EasyCache's default is 0.95.")


@dataclass(frozen=True)
class EasyCacheBound:
    """One pass's model calls under stock EasyCache at best: the steps inside its window, those it can skip at most
    (every window step after the first two), and the steps that always run. Steps are sampler step indices."""

    steps: int
    settings: EasyCacheSettings
    window: tuple[int, ...]        # the steps with end sigma < sigma <= start sigma
    skippable: tuple[int, ...]     # at most these steps skip the model

    @property
    def steps_skippable(self) -> int:
        return len(self.skippable)

    @property
    def steps_run(self) -> int:
        """Steps whose model calls run even at best: before the window, its first two, after it."""
        return self.steps - len(self.skippable)

    def describe(self) -> str:
        """The window's steps and the skippable ones, 1-based as a sampler's progress bar counts them."""
        def span(steps: tuple[int, ...]) -> str:
            return f"step {steps[0] + 1}" if len(steps) == 1 else f"steps {steps[0] + 1}-{steps[-1] + 1}"
        held = f"{span(self.window)} of {self.steps}" if self.window else f"no step of the {self.steps}"
        skips = f"{span(self.skippable)} can skip" if self.skippable else "none can skip"
        s = self.settings
        return f"window {s.start_percent:g}-{s.end_percent:g} holds {held}; {skips} (its first two always run)"

    def calls_line(self, calls_per_step: int = 1, passes: int = 1, stage: str = "") -> str:
        """The plan's EasyCache line: the model calls it can skip at most over `passes` passes of this bound (`stage`:
        which passes, when the job has others)."""
        s = self.settings
        window = ("ComfyUI's defaults: window" if s == EasyCacheSettings() else "window") + \
            f" {s.start_percent:g}-{s.end_percent:g}"
        each = f"; {self.steps_skippable} of {self.steps} steps in each of {passes} passes" if passes > 1 else ""
        return (f"EasyCache: at most {self.steps_skippable * calls_per_step * passes} of "
                f"{self.steps * calls_per_step * passes} calls{stage} skipped ({window}{each}); how many it skips depends on "
                "the prompt: this is the best case")

    def model_line(self, calls_per_step: int = 1) -> str:
        """The Sampler's report line where stock EasyCache is on its model: the calls of its one pass it can skip at
        most, as the whole-job plan counts them."""
        return (f"EasyCache on the model: at most {self.steps_skippable * calls_per_step} of "
                f"{self.steps * calls_per_step} calls skipped (best case), planned as no DiT time in the whole-job time: "
                f"{self.describe()}")

    def to_dict(self) -> dict:
        return asdict(self) | {"steps_skippable": self.steps_skippable, "steps_run": self.steps_run,
                               "window": list(self.window), "skippable": list(self.skippable)}


def easycache_bound(steps: int, settings: EasyCacheSettings | None = None, *, sigmas=None, shift: float = H3_SHIFT,
                    scheduler: str = "simple", window_sigmas: tuple[float, float] | None = None) -> EasyCacheBound:
    """The bound for one pass of `steps` steps under `settings` (the node's defaults if None): on `sigmas` (the pass's
    steps + 1 sigmas, or its `steps` model-call sigmas), else on BasicScheduler's `scheduler` sigmas for a model
    sampling of `shift` (H3's by default). window_sigmas: the window's (start, end) sigmas as the model's own
    `model_sampling.percent_to_sigma` gives them for `settings` (the Sampler reads them from the model at hand); None:
    `h3.sigmas.percent_to_sigma` at `shift`."""
    check_int("steps", steps, 1, MAX_STEPS, "Give the sampler's step count.")
    settings = EasyCacheSettings() if settings is None else settings
    grid = schedule_sigmas(steps, scheduler, shift) if sigmas is None else tuple(float(s) for s in sigmas)
    if len(grid) not in (steps, steps + 1):
        raise LongMediaInputError("sigmas", grid, f"{steps + 1} sigmas for {steps} steps (or the {steps} of its "
                                  "model calls)", "Pass the pass's own sigmas.")
    if window_sigmas is None:
        window_sigmas = (percent_to_sigma(settings.start_percent, shift), percent_to_sigma(settings.end_percent, shift))
    start_t, end_t = (f32(float(s)) for s in window_sigmas)
    window = tuple(i for i, s in enumerate(grid[:steps]) if end_t < f32(s) <= start_t)
    return EasyCacheBound(steps, settings, window, window[ESTABLISHING_STEPS:])


def pass_bound(steps: int, easycache: EasyCacheSettings | EasyCacheBound | None) -> EasyCacheBound | None:
    """A main pass's bound for `plan_job`: settings give it on H3's simple sigmas (`python -m longmedia plan
    --easycache`); a bound computed on the pass's own sigmas (the Sampler's) must be over its `steps` steps."""
    bound = easycache_bound(steps, easycache) if isinstance(easycache, EasyCacheSettings) else easycache
    if bound is not None and bound.steps != steps:
        raise LongMediaInputError("easycache", bound.steps, f"a bound over the main pass's {steps} steps",
                                  "Compute the bound on the pass's own sigmas.")
    return bound
