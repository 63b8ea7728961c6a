"""A segmented job's prompts on its passes: a pass's own prompt on its conditioning.

`with_text` puts a segment prompt's text (Setup's `SegmentPrompts`) on a converted positive entry, keeping its
guides; `check_prompts` refuses prompts that do not belong to the guider before any pass; `longest_prompt` is
the guider every pass is forecast with.
"""

from __future__ import annotations

import copy

import torch

from ...errors import LongMediaInputError
from ...segments.prompts import SegmentPrompts
from ...segments.timeline import SegmentPlan

__all__ = ["with_text", "check_prompts", "is_setup_positive", "longest_prompt"]


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
