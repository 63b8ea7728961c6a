"""The chunked final layer equals H3's final-layer math (clean-room replica of its forward)."""

import pytest
import torch
from torch import nn

from longmedia.execution.final_layer import chunked_final_forward

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes


class FinalLayer(nn.Module):
    """H3's FinalLayer math: adaLN shift/scale over RMSNorm, fp32 output heads per target stream."""

    def __init__(self, hidden=64, t_dim=24, video_dim=96, audio_dim=32, dtype=torch.bfloat16):
        super().__init__()
        self.hidden = hidden
        self.norm = nn.RMSNorm(hidden, eps=1e-5, dtype=dtype)
        self.adaln = nn.Linear(t_dim, 2 * hidden, dtype=dtype)
        self.video_out = nn.Linear(hidden, video_dim, dtype=torch.float32)
        self.audio_out = nn.Linear(hidden, audio_dim, dtype=torch.float32)
        self.requires_grad_(False)

    def adaln_proj(self, t_emb):
        return self.adaln(nn.functional.silu(t_emb)).chunk(2, dim=-1)

    def forward(self, x, t_emb, video_seg, audio_seg):
        shift, scale = self.adaln_proj(t_emb)
        (va, vb, vr), (aa, ab, ar) = video_seg, audio_seg
        hv = (self.norm(x[va:vb]) * (1.0 + scale[vr]) + shift[vr]).to(torch.float32)
        ha = (self.norm(x[aa:ab]) * (1.0 + scale[ar]) + shift[ar]).to(torch.float32)
        return self.video_out(hv), self.audio_out(ha)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64, 10_000])
def test_chunked_final_forward_matches_stock(dtype, rows):
    g = torch.Generator().manual_seed(rows)
    layer = FinalLayer(dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    x = torch.randn(300, 64, generator=g).to(dtype)
    t_emb = torch.randn(3, 24, generator=g).to(dtype)
    video_seg, audio_seg = (110, 300, 0), (40, 110, 2)
    with torch.no_grad():
        v, a = layer(x, t_emb, video_seg, audio_seg)
    cv, ca = chunked_final_forward(layer, rows)(x, t_emb, video_seg, audio_seg)
    assert v.abs().sum() > 0 and cv.shape == v.shape and ca.shape == a.shape
    torch.testing.assert_close(cv, v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ca, a, rtol=1e-5, atol=1e-5)


def test_rows_must_be_positive():
    with pytest.raises(ValueError, match="rows"):
        chunked_final_forward(FinalLayer(), 0)
