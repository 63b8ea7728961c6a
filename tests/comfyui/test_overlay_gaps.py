"""Where the upstream tree CI builds (0.33.0 with upstream 0.38.1's H3 files laid over it) is not upstream, or keeps an
upstream defect: each gap is named by a test here, so a change of the overlay (or an upstream fix) shows up.

Skipped, by feature name, on 0.33.0 (no per-token rows: not the overlay)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from longmedia.testing.tiny_h3 import TINY_DIMS, write_tiny_h3


@pytest.fixture(scope="module")
def h3(comfy_inprocess):
    import comfy.ldm.minimax.model as model

    if "audio_denoise_mask" not in inspect.signature(model.MiniMaxH3Model.forward).parameters:
        pytest.skip("this ComfyUI lacks the feature: MiniMaxH3Model.forward takes audio_denoise_mask (per-token "
                    "modulation rows): it is not the upstream overlay")
    return model


def test_the_overlay_keeps_0_33_s_version_string_so_the_generation_is_read_from_features(h3, comfyui_root: Path):
    # upstream 0.38.1's comfyui_version.py is not overlaid: a pack that read the version would call this tree 0.33.0
    text = (comfyui_root / "comfyui_version.py").read_text()
    assert '"0.33.0"' in text
    from longmedia.comfy.host.features import host_features

    features = host_features()
    assert features.per_token_rows and features.pdd_heads  # read from signatures, not from the version string


def test_the_overlay_keeps_0_33_s_inpaint_wrapper_so_upstream_s_masked_blend_is_not_reached(h3, comfyui_root: Path):
    # samplers.py is not overlaid: 0.33's KSamplerX0Inpaint calls scale_latent_inpaint without denoise_mask, so upstream
    # model_base's x-blend branch for a masked latent never runs on this tree (LongMedia's keep-audio pass goes through
    # 0.33's wrapper here)
    source = (comfyui_root / "comfy" / "samplers.py").read_text()
    call = next(line for line in source.splitlines() if "scale_latent_inpaint(" in line)
    assert "denoise_mask" not in call.split("scale_latent_inpaint(", 1)[1]


def test_upstream_s_video_row_mask_defect_is_kept_verbatim(h3, tmp_path):
    # a video denoise mask with rows below 1 reaches `sigma_v.to(...)` with sigma_v a Python float (both stored
    # upstream model.py lines have it): video inpainting masks fail upstream; audio masks (LongMedia's keep-audio
    # passes) do not
    import comfy.sd

    patcher = comfy.sd.load_diffusion_model(str(write_tiny_h3(tmp_path, variant="fp32")))
    model = patcher.model.diffusion_model
    g = torch.Generator().manual_seed(5)
    video = torch.randn(1, TINY_DIMS.video_channels, 3, 6, 8, generator=g)
    audio = torch.randn(1, TINY_DIMS.audio_channels, 2, 12, generator=g)
    context = torch.randn(1, 11, TINY_DIMS.text_dim, generator=g)
    video_mask = torch.rand(1, 1, 3, 6, 8, generator=g)
    audio_mask = torch.rand(1, 1, 2, 12, generator=g)
    call = dict(transformer_options={}, minimax_payload={"text_token_tags": torch.ones(11, dtype=torch.long)})
    with torch.inference_mode():
        out = model([video, audio], torch.tensor([850.0]), context, audio_denoise_mask=audio_mask, **call)
        assert all(torch.isfinite(t).all() for t in out)
        with pytest.raises(AttributeError, match="'float' object has no attribute 'to'"):
            model([video, audio], torch.tensor([850.0]), context, denoise_mask=video_mask, **call)
