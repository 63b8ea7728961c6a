"""`model_step_cache(guider, sigmas) -> ModelStepCache`: the step cache on the guider's model, as the Sampler's
whole-job plan counts it (the same rule `python -m longmedia plan --easycache` plans, `planning/step_cache.py`).

ComfyUI's EasyCache and LazyCache nodes (comfy_extras/nodes_easycache.py; 0.33.0 and upstream 0.38 alike) put their
holder in `model_options["transformer_options"]["easycache"]`, and `easycache_sample_wrapper` reads it from the
guider's `model_options` at the start of every sample, then sets its window from
`guider.model_patcher.model.model_sampling.percent_to_sigma` (`prepare_timesteps`). Read here the same way:

- stock EasyCache (its holder's `name` "EasyCache", numeric start_percent and end_percent): the bound on this pass's
  own sigmas (a Hi-Res or Refiner tail, a denoise below 1) and the window's sigmas from the model's own
  `percent_to_sigma`, so a model sampling with another shift gets its own window;
- LazyCache: not planned. Its rule differs: it keeps its state from every call, so with a step before the window only
  the window's first step must run (EasyCache's first two always do), and its best case skips one call more; the
  plan counts every call, and the report says so;
- any other holder under that key: not planned, named in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

from ...planning.step_cache import EasyCacheBound, EasyCacheSettings, easycache_bound

KEY = "easycache"                 # the transformer_options key both stock nodes use
PLANNED = "EasyCache"             # EasyCacheHolder.name
NOT_PLANNED = "the whole-job time counts every model call"


@dataclass(frozen=True)
class ModelStepCache:
    """bound: stock EasyCache's calls it can skip at most on this pass (None: none planned); note: a cache on the
    model that the plan does not count, in words for the report (None: none)."""

    bound: EasyCacheBound | None = None
    note: str | None = None


def model_step_cache(guider, sigmas) -> ModelStepCache:
    """The step cache on `guider`'s model over the pass's `sigmas` (its steps + 1 sigmas)."""
    options = getattr(guider, "model_options", None) or {}
    holder = (options.get("transformer_options") or {}).get(KEY)
    if holder is None:
        return ModelStepCache()
    name = getattr(holder, "name", None)
    start, end = (getattr(holder, f, None) for f in ("start_percent", "end_percent"))
    window = f" (window {start:g}-{end:g})" if _percent(start) and _percent(end) else ""
    if name == "LazyCache":
        return ModelStepCache(note=f"LazyCache on the model{window}: its skips are not planned (its rule differs from "
                                   f"EasyCache's, which the plan reads); {NOT_PLANNED}")
    if name != PLANNED or not window:
        return ModelStepCache(note=f"a step cache on the model ({type(holder).__name__}) is not planned; {NOT_PLANNED}")
    settings = EasyCacheSettings(float(start), float(end))
    sampling = guider.model_patcher.model.model_sampling  # what EasyCacheHolder.prepare_timesteps reads
    edges = tuple(float(sampling.percent_to_sigma(p)) for p in (settings.start_percent, settings.end_percent))
    grid = [float(s) for s in sigmas.reshape(-1).tolist()]
    if len(grid) < 2:  # no step: ComfyUI samples nothing
        return ModelStepCache()
    return ModelStepCache(bound=easycache_bound(len(grid) - 1, settings, sigmas=grid, window_sigmas=edges))


def _percent(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and 0.0 <= float(value) <= 1.0
