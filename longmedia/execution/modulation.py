"""H3's adaLN modulation and gated residual per span of packed rows, in place; shared by the streamed executor
and the clean-room reference block (tests/comfyui checks both against ComfyUI's `DiTBlock`).

`mod_rows` is ComfyUI's `mod_segments` table: (start, stop, row) where row is an int (one modulation row for
the whole span) or a per-token LongTensor of stop - start rows (ComfyUI 0.38+ with a denoise mask):
`vecs[row]` is then [stop - start, hidden], one row per token."""

from __future__ import annotations

import torch


def modulate_(h, shift, scale, mod_rows):
    """adaLN scale/shift per span (a, b, row), in place (H3's `_mod_scale_shift`)."""
    for a, b, row in mod_rows:
        h[a:b].mul_(1.0 + scale[row].to(h.dtype)).add_(shift[row].to(h.dtype))
    return h


def gate_(x, gate, other, mod_rows):
    """Gated residual x += other * gate per span (a, b, row), in place (H3's `_mod_gate`)."""
    for a, b, row in mod_rows:
        x[a:b].addcmul_(other[a:b], gate[row].to(x.dtype))
    return x


def clip_mod_rows(mod_rows, start, stop):
    """Modulation rows intersected with rows [start, stop), re-based to that range; per-token rows sliced to match."""
    out = []
    for a, b, row in mod_rows:
        lo, hi = max(a, start), min(b, stop)
        if lo < hi:
            out.append((lo - start, hi - start, row[lo - a:hi - a] if isinstance(row, torch.Tensor) else row))
    return out
