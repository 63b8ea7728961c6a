"""The field's starting-point segment lengths per card size and reference budget (advice, not a measurement).

`policy.segment_suggestion` starts from this range and keeps the longest length whose pass fits the card.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import check_choice, check_float
from ..h3.references import REFERENCE_BUDGETS


@dataclass(frozen=True)
class SegmentRange:
    """Starting-point segment length for a card size and reference budget (not a measurement)."""

    vram_gb: float
    reference_budget: str
    min_seconds: float
    max_seconds: float
    seconds: float            # the suggested value: middle of the range, on half seconds
    transfer_bound: bool      # weights stream over PCIe every step: expect transfer-bound passes
    reasons: tuple[str, ...]


_TIERS = ((24.0, 5.0, 15.0, "24 GB and up: 5-15 s (the top of H3's ~124-362-frame trained range)"),
          (16.0, 5.0, 10.0, "16 GB: 5-10 s per segment"),
          (12.0, 5.0, 8.0, "12 GB: 5-8 s per segment with a low reference budget"),
          (0.0, 4.0, 6.0, "8 GB: 4-6 s per segment, transfer-bound"))


def suggest_segment_seconds(vram_gb: float, reference_budget: str = "low") -> SegmentRange:
    """Starting-point segment length: 16 GB 5-10 s, 12 GB 5-8 s (low references), 8 GB 4-6 s."""
    vram_gb = check_float("vram_gb", vram_gb, 1.0, 4096.0, "Give the card's memory in GB.")
    check_choice("reference_budget", reference_budget, tuple(REFERENCE_BUDGETS))
    tier = next(t for t in _TIERS if vram_gb >= t[0])
    low, high, reasons = tier[1], tier[2], [tier[3]]
    if vram_gb < 8.0:
        reasons.append(f"{vram_gb:g} GB is below the pack's 8 GB target: the 8 GB range is optimistic here")
    if 8.0 <= vram_gb < 16.0 and reference_budget in ("medium", "high", "max"):
        low, high = _TIERS[-1][1], _TIERS[-1][2]
        reasons.append(f"reference_budget={reference_budget!r} takes rows a {vram_gb:g} GB card needs for "
                       "video: starting from the 8 GB range")
    elif reference_budget == "max":
        reasons.append("reference_budget='max' leaves references uncapped: shorten segments if the plan does not fit")
    seconds = round((low + high) / 2 * 2) / 2
    return SegmentRange(vram_gb, reference_budget, low, high, seconds, vram_gb < 12.0, tuple(reasons))
