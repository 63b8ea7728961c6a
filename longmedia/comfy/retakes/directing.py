"""Directing a segmented job: a pass's own prompt on its conditioning, and a run's walk through the retake cache.

`with_text` puts a segment prompt's text (Setup's `SegmentPrompts`) on a converted positive entry, keeping its
guides; `check_prompts` refuses prompts that do not belong to the guider before any pass; `longest_prompt` is
the guider every pass is forecast with. `job_chain` / `segment_key` make a run's `RetakeChain` from
`segment_keys`' digests (no cache, or a key part without a digest: every pass samples, and the report says why).
"""

from __future__ import annotations

import copy

import torch

from ...errors import LongMediaInputError
from ...segments.prompts import SegmentPrompts
from ...segments.retakes import RetakeCache, RetakeChain
from ...segments.timeline import SegmentPlan
from . import keys

__all__ = ["with_text", "check_prompts", "longest_prompt", "job_chain", "segment_key"]


def with_text(entry: dict, text) -> dict:
    """A converted conditioning entry with the text of CONDITIONING `text` (its first entry's tensor and keys);
    the entry's guides stay."""
    tensor, extra = text[0][0], text[0][1]
    out = dict(entry)
    out.update({k: v for k, v in extra.items() if k != "minimax_keyframes"})
    out["cross_attn"] = tensor
    return out


def check_prompts(prompts: SegmentPrompts | None, conds: dict, plan: SegmentPlan) -> None:
    """Per-segment prompts fit the plan, and the guider's positive is Setup's (segment 0's prompt), before any pass."""
    if prompts is None:
        return
    if prompts.count != plan.count:
        raise LongMediaInputError("job", f"{prompts.count} segment prompts", f"{plan.count} (one per segment of the "
                                  "job's plan)", "Connect the job of the Setup that made this latent.")
    if not is_setup_positive(prompts, conds):
        raise LongMediaInputError("guider", "positive conditioning other than Setup's",
                                  "Setup's positive output (its job carries a prompt per segment)",
                                  "Connect Setup's positive to the guider, or clear Setup's segment_prompts.")


def is_setup_positive(prompts: SegmentPrompts, conds: dict) -> bool:
    """Is the guider's positive text Setup's (segment 0's prompt)?"""
    first, want = conds["positive"][0].get("cross_attn"), prompts.conditioning[0][0][0]
    return first is want or (getattr(first, "shape", None) == want.shape and torch.equal(first, want))


def longest_prompt(guider, prompts: SegmentPrompts | None):
    """`guider`, or a copy whose positive text is the longest segment prompt's (the rows every pass is planned for)."""
    if prompts is None:
        return guider
    longest = max(prompts.conditioning, key=lambda c: c[0][0].shape[1])
    g = copy.copy(guider)
    conds = dict(guider.original_conds)
    conds["positive"] = [with_text(conds["positive"][0], longest)] + list(conds["positive"][1:])
    g.original_conds = conds
    return g


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
