"""H3's per-segment adaLN modulation and gated residual, in place; shared by the streamed executor and
the clean-room reference block (tests/comfyui checks both against ComfyUI's `DiTBlock`).

A segment's row is an int (one modulation row for the whole segment) or a per-token LongTensor of
b - a rows (ComfyUI 0.38+ with a denoise mask): `vecs[row]` is then [b - a, hidden], one row per token."""

from __future__ import annotations


def modulate_(h, shift, scale, segments):
    """adaLN scale/shift per packed segment (a, b, row), in place (H3's `_mod_scale_shift`)."""
    for a, b, row in segments:
        h[a:b].mul_(1.0 + scale[row].to(h.dtype)).add_(shift[row].to(h.dtype))
    return h


def gate_(x, gate, other, segments):
    """Gated residual x += other * gate per packed segment (a, b, row), in place (H3's `_mod_gate`)."""
    for a, b, row in segments:
        x[a:b].addcmul_(other[a:b], gate[row].to(x.dtype))
    return x
