"""A run's walk through the retake cache: the `RetakeChain` of a segmented job's passes.

`job_chain` / `segment_key` make a run's `RetakeChain` from `keys`' digests (no cache, or a key part without a
digest: every pass samples, and the report says why).
"""

from __future__ import annotations

from ...segments.retakes import RetakeCache, RetakeChain
from . import keys

__all__ = ["job_chain", "segment_key"]


def job_chain(retakes: RetakeCache | None, guider, sampler, sigmas, request, latent, noise, plan,
              context_keys, devices: str | None = None) -> RetakeChain:
    """This run's walk through the retake cache (off without a cache, or when the job has no digest)."""
    if retakes is None:
        return RetakeChain(None, None)
    try:
        digest, pins = keys.job_digest(guider, sampler, sigmas, request, latent, noise, plan, context_keys,
                                       devices or "")
    except keys.Uncacheable as error:  # named: a key part with no digest; the run samples every segment
        return RetakeChain(retakes, None, off_reason=str(error))
    return RetakeChain(retakes, digest, pins)


def segment_key(chain: RetakeChain, segment, seed: int, pass_latents, conds: dict) -> tuple[str | None, tuple]:
    """The next pass's key in `chain` and its pins (None once a key part has no digest: this pass and every later
    one sample)."""
    if chain.job is None:
        return chain.key(None), ()
    try:
        digest, pins = keys.segment_digest(segment, seed, pass_latents, conds)
    except keys.Uncacheable as error:  # named: this segment and every later one sample
        chain.off_reason = str(error)
        return chain.key(None), ()
    return chain.key(digest), pins
