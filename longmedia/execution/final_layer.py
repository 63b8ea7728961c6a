"""H3's final layer in row chunks: the same row-wise math as stock, without whole-sequence temporaries.

Stock `FinalLayer.forward` normalises and modulates every target row at once and keeps an fp32 copy
of them: for long passes that, not a block, sets the peak. `chunked_final_forward(layer, rows)`
returns a forward with the stock signature (x, t_emb, video_seg, audio_seg) -> (video, audio) that
does the same per-row operations `rows` rows at a time. The ComfyUI adapter installs it with
`ModelPatcher.add_object_patch("diffusion_model.final_layer.forward", ...)` on a clone: the module
tree and its weights stay as they are, and ComfyUI restores the method when the clone unloads.
"""

from __future__ import annotations

from typing import Callable

import torch

DEFAULT_ROWS = 8192


def chunked_final_forward(layer, rows: int = DEFAULT_ROWS,
                          interrupt: Callable[[], None] | None = None) -> Callable:
    """A drop-in forward for `layer` (H3's FinalLayer: norm, adaln_proj, video_out, audio_out)."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")

    @torch.no_grad()
    def forward(x, t_emb, video_seg, audio_seg):
        shift, scale = layer.adaln_proj(t_emb)
        outs = []
        for (a, b, row), head in ((video_seg, layer.video_out), (audio_seg, layer.audio_out)):
            out = None
            for start in range(a, b, rows):
                if interrupt is not None:
                    interrupt()
                stop = min(start + rows, b)
                h = (layer.norm(x[start:stop]) * (1.0 + scale[row]) + shift[row]).to(torch.float32)
                y = head(h)
                del h
                if out is None:
                    out = y.new_empty(b - a, y.shape[1])
                out[start - a:stop - a] = y
            outs.append(out if out is not None else x.new_empty(0, head.out_features, dtype=torch.float32))
        return outs[0], outs[1]

    return forward
