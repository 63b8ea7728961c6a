"""H3's final layer in row chunks: the same row-wise math as stock, without whole-sequence temporaries.

Stock `FinalLayer.forward` normalises and modulates every target row at once and keeps an fp32 copy
of them: for long passes that, not a block, sets the peak. `chunked_final_forward(layer, rows)`
returns a forward with the host's own signature that does the same per-row operations `rows` rows
at a time. The ComfyUI adapter installs it with
`ModelPatcher.add_object_patch("diffusion_model.final_layer.forward", ...)` on a clone: the module
tree and its weights stay as they are, and ComfyUI restores the method when the clone unloads.

Two host generations, told apart by the host class's `forward` signature (never by version):
- plain: `forward(x, t_emb, video_seg, audio_seg)`, one output head per stream;
- PDD: `forward(x, t_emb, video_seg, audio_seg, sigma, sample_sigmas, shifts)`. `video_out` and
  `audio_out` may hold a bank of n heads stacked by rows (row block 0 a full head, blocks 1..n-1
  offsets from it); a step uses head 0 plus the dt-weighted offsets of the heads its sigma interval
  spans on the un-shifted grid. The mixed head is formed once per call, then applied per row chunk.
A mod_rows span's row is an int (one modulation row) or a per-token LongTensor; chunks slice the tensor.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from .linear import WeightAccess, plain_weights
from .probes import FINAL_PHASE, NO_OBSERVER, Observer

DEFAULT_ROWS = 8192
PDD_ARGS = ("sigma", "sample_sigmas", "shifts")


def host_takes_pdd_args(layer) -> bool:
    """True when the host FinalLayer's forward takes (sigma, sample_sigmas, shifts): the PDD generation."""
    params = inspect.signature(type(layer).forward).parameters
    return all(name in params for name in PDD_ARGS)


def bank_size(head) -> int:
    """Heads stacked in an output Linear: its stored rows over its declared out_features (1 = a plain head)."""
    return int(head.weight.shape[0]) // int(head.out_features)


def unshift_sigma(sigma: float, shift: float) -> float:
    """The base-grid sigma b of a flow-shifted sigma s = shift*b / (1 + (shift-1)*b)."""
    return sigma / (shift + sigma * (1.0 - shift))


def pdd_span(n: int, sigma: float, sample_sigmas: torch.Tensor, shift: float) -> tuple[int, int]:
    """[start, stop) of the bank's heads that this step spans: from `sigma` to the next schedule entry."""
    if sample_sigmas is None:
        raise ValueError("an H3 checkpoint with a PDD head bank needs the sampler's sigma schedule "
                         "(transformer_options['sample_sigmas']); run it through a ComfyUI sampler")
    i = int((sample_sigmas - sigma).abs().argmin())
    following = float(sample_sigmas[min(i + 1, sample_sigmas.shape[0] - 1)])
    start = min(round((1.0 - unshift_sigma(float(sigma), shift)) * n), n - 1)
    stop = max(round((1.0 - unshift_sigma(following, shift)) * n), start + 1)
    return start, stop


def pdd_step_weights(n: int, start: int, stop: int, flow_shift: float) -> torch.Tensor:
    """Weights (float64) of heads start..stop-1: each head's share of the shifted-time step it covers."""
    b = torch.linspace(1.0, 0.0, n + 1, dtype=torch.float64)
    t = 1.0 - flow_shift * b / (1.0 + (flow_shift - 1.0) * b)
    dt = (t[1:] - t[:-1])[start:stop]
    return dt / dt.sum()


def mixed_head(weight: torch.Tensor, bias: torch.Tensor, n: int, start: int, stop: int,
               flow_shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of the step's effective head: head 0 plus the weighted offsets of heads max(start,1)..stop-1."""
    w = pdd_step_weights(n, start, stop, flow_shift).to(weight)
    rows = weight.reshape(n, -1, weight.shape[1])
    brows = bias.reshape(n, -1)
    first = max(start, 1)
    share = w[first - start:]
    return (rows[0] + torch.tensordot(share, rows[first:stop], dims=1),
            brows[0] + torch.tensordot(share.to(brows), brows[first:stop], dims=1))


def _row_at(row, a: int, start: int, stop: int):
    """A span's modulation row for rows [start, stop) of a span starting at `a`."""
    return row[start - a:stop - a] if isinstance(row, torch.Tensor) else row


def chunked_final_forward(layer, rows: int = DEFAULT_ROWS, interrupt: Callable[[], None] | None = None,
                          weights: WeightAccess | None = None, observer: Observer = NO_OBSERVER) -> Callable:
    """A drop-in forward for `layer` (H3's FinalLayer: norm, adaln_proj, video_out, audio_out).

    `weights` hands out a banked head's (weight, bias) to mix (ComfyUI's cast context in the adapter);
    a plain head is called as the module itself, exactly as stock does. `observer` sees each call's input and
    outputs as the phase "final layer" (`probes.py`; by default nothing does).
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    weights = weights or plain_weights
    pdd = host_takes_pdd_args(layer)

    def stream(x, shift, scale, seg, head, mixing):
        a, b, row = seg
        out = None
        for start in range(a, b, rows):
            if interrupt is not None:
                interrupt()
            stop = min(start + rows, b)
            r = _row_at(row, a, start, stop)
            h = (layer.norm(x[start:stop]) * (1.0 + scale[r]) + shift[r]).to(torch.float32)
            y = head(h) if mixing is None else torch.nn.functional.linear(h, *mixing)
            del h
            if out is None:
                out = y.new_empty(b - a, y.shape[1])
            out[start - a:stop - a] = y
        return out if out is not None else x.new_empty(0, head.out_features, dtype=torch.float32)

    def mixing_for(head, n, span, flow_shift, like):
        if n == 1:
            return None
        with weights(head, like) as (w, b):
            return mixed_head(w, b, n, span[0], span[1], flow_shift)

    @torch.no_grad()
    def run(x, t_emb, video_seg, audio_seg, sigma=None, sample_sigmas=None, shifts=None):
        observer.phase_in(FINAL_PHASE, x)
        shift, scale = layer.adaln_proj(t_emb)
        n = bank_size(layer.video_out)
        if n > 1 and not pdd:
            raise ValueError(f"final_layer.video_out holds {n} heads but this ComfyUI's FinalLayer has no PDD "
                             "head bank: update ComfyUI to a version whose FinalLayer.forward takes sample_sigmas")
        span = pdd_span(n, sigma, sample_sigmas, shifts[0]) if n > 1 else (0, 1)
        like = x.new_empty(0, dtype=torch.float32)
        video = stream(x, shift, scale, video_seg, layer.video_out,
                       mixing_for(layer.video_out, n, span, shifts[0] if n > 1 else 1.0, like))
        audio = stream(x, shift, scale, audio_seg, layer.audio_out,
                       mixing_for(layer.audio_out, n, span, shifts[1] if n > 1 else 1.0, like))
        observer.phase_out(FINAL_PHASE, x, video, audio)
        return video, audio

    if pdd:
        def forward(x, t_emb, video_seg, audio_seg, sigma, sample_sigmas, shifts):
            return run(x, t_emb, video_seg, audio_seg, sigma, sample_sigmas, shifts)
    else:
        def forward(x, t_emb, video_seg, audio_seg):
            return run(x, t_emb, video_seg, audio_seg)
    return forward
