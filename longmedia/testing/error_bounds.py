"""Kernel error bounded by the error of a same-dtype torch reference (FlashAttention's test habit).

A fixed tolerance says nothing about the dtype: 2e-2 is loose for fp32 and may be tight for a long bf16 row.
Instead, measure how far a plain torch computation in the kernel's own dtype lands from a high-precision
reference on the same inputs, and require the kernel to land within `factor` times that (plus a small absolute
floor, for outputs the low-precision torch path happens to get exact):

    max|kernel - reference| <= factor * max|torch_in_dtype - reference| + floor
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def max_abs_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest elementwise difference, computed in float64."""
    return float((a.double() - b.double()).abs().max())


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v computed entirely in q's dtype ([..., S, D] layout): the same-dtype torch baseline
    (FlashAttention's `attention_ref(..., upcast=False)`)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores, dim=-1).to(v.dtype) @ v


@dataclass(frozen=True)
class ErrorBound:
    """One comparison: the kernel's error, the same-dtype baseline's error, and the limit they make."""

    error: float       # max |kernel - reference|
    baseline: float    # max |same-dtype torch - reference|
    factor: float
    floor: float

    @property
    def limit(self) -> float:
        return self.factor * self.baseline + self.floor

    @property
    def holds(self) -> bool:
        return self.error <= self.limit

    def __str__(self) -> str:
        return (f"kernel error {self.error:.3g} vs limit {self.limit:.3g} "
                f"(= {self.factor:g} x same-dtype torch error {self.baseline:.3g} + {self.floor:g})")


def error_bound(out: torch.Tensor, reference: torch.Tensor, baseline_out: torch.Tensor, *, factor: float = 2.0,
                floor: float = 1e-6, baseline_reference: torch.Tensor | None = None) -> ErrorBound:
    """`out` (the kernel) and `baseline_out` (torch in the kernel's dtype) against a high-precision `reference`.

    baseline_reference: what `baseline_out` approximates when it is not `reference` (an approximate kernel such as
    Sol is held to its own high-precision reference, while the dtype's noise is measured on exact attention)."""
    base_ref = reference if baseline_reference is None else baseline_reference
    if out.shape != reference.shape or baseline_out.shape != base_ref.shape:
        raise ValueError(f"shapes differ: kernel {tuple(out.shape)} vs reference {tuple(reference.shape)}, "
                         f"baseline {tuple(baseline_out.shape)} vs {tuple(base_ref.shape)}")
    return ErrorBound(max_abs_error(out, reference), max_abs_error(baseline_out, base_ref), factor, floor)
