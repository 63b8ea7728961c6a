"""The whole-job byte formulas against ComfyUI's real modules: live bytes on the CPU, small widths.

`longmedia.planning.stage_formulas` plans the text encoder (comfy/text_encoders/llama.py's Llama2_
as Qwen3VL_32BConfig builds it) and H3's video decode (comfy/ldm/minimax/vae.py) from their
architecture. Here the same ComfyUI classes are built with small widths, run on random weights and
inputs inside torch.inference_mode() under a live-bytes tracker, and each formula must land within
+-15% of the measured peak. The full-size parameter counts the formulas use are counted on the real
modules built on the meta device.
"""

from __future__ import annotations

import pytest

from longmedia.planning import stage_formulas as F

TOLERANCE = 0.15


@pytest.fixture(scope="module")
def torch_mod(comfy_inprocess):
    import torch

    return torch


def _live_peak(torch, fn):
    from longmedia.testing.live_bytes import LiveBytes

    with torch.inference_mode(), LiveBytes() as lb:
        out = fn()
    return lb.peak_bytes, out


def measure_video_decode(torch, latent_t, lat_h, lat_w, heads=2, dim_head=16, layers=2, tile=64, overlap=16,
                         seed=0):
    """(measured peak, formula, output) of MiniMaxH3VideoVAE.decode with a small ViT decoder and tiles."""
    import comfy.ldm.minimax.vae as V

    torch.manual_seed(seed)
    vae = V.MiniMaxH3VideoVAE(ch=32, ch_mult=(1,) * 6, tile_size=tile, tile_overlap_min=overlap)
    vae.decoder = V.ViT3DDecoder(num_layers=layers, heads=heads, dim_head=dim_head, operations=V.ops)
    with torch.no_grad():
        for p in vae.parameters():
            p.normal_(0.0, 0.02)
        vae.latents_std.uniform_(0.5, 1.5)
        vae.latents_mean.normal_()
    z = torch.randn(1, 24, latent_t, lat_h, lat_w)
    out = torch.empty(vae.decode_output_shape(z.shape))      # the host buffer stock allocates: not device bytes
    peak, _ = _live_peak(torch, lambda: vae.decode(z, output_buffer=out))
    dims = F.VideoVAEDims(dim=heads * dim_head, layers=layers, tile=tile, tile_overlap_min=overlap)
    formula = F.video_decode_activation_bytes(out.shape[2], lat_w * 16, lat_h * 16, dims, dtype_bytes=4)
    return peak, formula, out


VIDEO_CASES = {   # latent T, latent H, latent W, heads, dim_head, layers, tile, overlap
    "one chunk, one tile": (7, 4, 4, 2, 16, 2, 64, 16),
    "two chunks, one tile, wide ViT": (12, 4, 4, 4, 64, 1, 64, 16),
    "two chunks, 2x2 tiles": (12, 8, 6, 2, 16, 2, 64, 16),
    "five chunks, 2x3 tiles": (22, 6, 10, 4, 32, 1, 64, 16),
    "three chunks, 128 px tiles": (17, 12, 8, 4, 32, 2, 128, 32),
}


@pytest.mark.parametrize("case", list(VIDEO_CASES))
def test_video_decode_formula_within_15_percent(torch_mod, case):
    peak, formula, out = measure_video_decode(torch_mod, *VIDEO_CASES[case])
    assert torch_mod.isfinite(out).all() and out.std() > 0
    assert abs(formula / peak - 1) <= TOLERANCE, (case, peak, formula)


def measure_text_encoder(torch, tokens, hidden=64, inter=320, heads=8, kv=2, head_dim=16, layers=2, seed=0):
    """(measured peak, dims) of ComfyUI's Llama2_ under Qwen3VL_32BConfig with small widths."""
    import comfy.ops
    from comfy.text_encoders.llama import Llama2_, Qwen3VL_32BConfig

    torch.manual_seed(seed)
    cfg = Qwen3VL_32BConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                            num_attention_heads=heads, num_key_value_heads=kv)
    cfg.head_dim = head_dim
    model = Llama2_(cfg, dtype=torch.float32, ops=comfy.ops.disable_weight_init)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    ids = torch.randint(0, 1000, (1, tokens))
    peak, out = _live_peak(torch, lambda: model(ids, dtype=torch.float32)[0])
    assert torch.isfinite(out).all() and out.std() > 0 and tuple(out.shape) == (1, tokens, hidden)
    dims = F.TextEncoderDims(hidden=hidden, intermediate=inter, layers=layers, heads=heads, kv_heads=kv,
                             head_dim=head_dim, vocab=1000)
    return peak, dims


TEXT_CASES = {   # tokens, hidden, intermediate, heads, kv heads, head_dim, layers
    "16 tokens": (16, 64, 320, 8, 2, 16, 2),
    "64 tokens": (64, 64, 320, 8, 2, 16, 2),
    "256 tokens": (256, 64, 320, 8, 2, 16, 2),
    "256 tokens, wider": (256, 128, 640, 8, 2, 16, 2),
    "512 tokens, 3 layers": (512, 64, 320, 8, 2, 16, 3),
    "MLP-bound": (48, 64, 1280, 4, 2, 16, 2),
}


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_text_encoder_formula_within_15_percent(torch_mod, case):
    tokens, *rest = TEXT_CASES[case]
    peak, dims = measure_text_encoder(torch_mod, tokens, *rest)
    # ComfyUI's CPU attention materialises the scores; the GPU plan assumes a fused kernel that does not
    formula = F.text_encoder_activation_bytes(tokens, dims, dtype_bytes=4, materialised_scores=True)
    assert abs(formula / peak - 1) <= TOLERANCE, (case, peak, formula)
    if case == "MLP-bound":     # where the MLP sets the peak, the fused-attention formula agrees too
        fused = F.text_encoder_activation_bytes(tokens, dims, dtype_bytes=4)
        assert abs(fused / peak - 1) <= TOLERANCE, (peak, fused)


def test_full_size_parameter_counts_match_comfy_modules(torch_mod):
    torch = torch_mod
    import comfy.ldm.minimax.audio_vae as A
    import comfy.ldm.minimax.vae as V
    import comfy.ops
    from comfy.text_encoders.minimax import MiniMaxQwen3VL

    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    with torch.device("meta"):
        te = MiniMaxQwen3VL({}, torch.bfloat16, "meta", comfy.ops.disable_weight_init)
        video = V.MiniMaxH3VideoVAE()
        audio = A.MiniMaxH3AudioVAE()
    d = F.QWEN3VL_32B
    assert count(te) == d.param_count and count(te.visual) == d.vision_params
    assert count(te.model.layers[0]) == d.layer_params and count(te.model.embed_tokens) == d.embed_params
    v = F.H3_VIDEO_VAE
    assert count(video.decoder) + count(video.post_quant_conv) == v.decoder_params
    assert count(video.encoder) + count(video.quant_conv) == v.encoder_params
    assert count(video.decoder.transformer_blocks[0]) == v.decoder_block_params
    assert (video.tokens_chunk_size, video.token_overlap, video.frame_pre_padding) == \
        (v.chunk_tokens, v.token_overlap, v.frame_pre_padding)
    assert count(audio) == F.AUDIO_VAE_PARAMS
    assert count(audio.decoder) + count(audio.dec_in_proj) == F.AUDIO_VAE_DECODER_PARAMS


def test_split_tiles_matches_the_vae(torch_mod):
    import comfy.ldm.minimax.vae as V

    with torch_mod.device("meta"):
        vae = V.MiniMaxH3VideoVAE()
    for length in (256, 257, 512, 768, 1088, 1344, 1920, 3840):
        starts, sizes, overlaps = vae.split_tiles(length)
        assert F.split_tiles(length, 256, 64, 16) == (len(starts), tuple(overlaps)), length


def print_tables() -> None:
    """The docs/lab/2026-12-02-executor-kernels-planner.md tables: every case above, measured vs formula, and full-size figures."""
    import os
    from pathlib import Path

    import harness  # run as a script: this folder is sys.path[0]
    import pytest

    root = harness.comfyui_root() or Path(os.environ.get(harness.ENV_VAR, "/tmp/comfyui"))
    harness.import_comfy_in_process(root, pytest.MonkeyPatch())
    import torch

    print("| module | case | measured peak | formula | formula / measured |\n|---|---|---|---|---|")
    for case, args in VIDEO_CASES.items():
        peak, formula, _ = measure_video_decode(torch, *args)
        print(f"| video decode | {case} | {peak / 2**20:.2f} MiB | {formula / 2**20:.2f} MiB | {formula / peak:.3f} |")
    for case, (tokens, *rest) in TEXT_CASES.items():
        peak, dims = measure_text_encoder(torch, tokens, *rest)
        formula = F.text_encoder_activation_bytes(tokens, dims, dtype_bytes=4, materialised_scores=True)
        print(f"| text encoder | {case} | {peak / 2**20:.2f} MiB | {formula / 2**20:.2f} MiB | {formula / peak:.3f} |")
    print("\n| full size (fp16) | decode formula | stock memory_used_decode | stock / formula |\n|---|---|---|---|")
    for w, h, frames in ((1344, 768, 243), (1344, 768, 481), (1920, 1088, 243), (768, 512, 121)):
        formula = F.video_decode_activation_bytes(frames, w, h)
        stock = F.stock_video_decode_estimate(frames, w, h)
        print(f"| {w}x{h}, {frames} frames | {formula / 2**30:.2f} GiB | {stock / 2**30:.2f} GiB | "
              f"{stock / formula:.2f} |")


if __name__ == "__main__":
    print_tables()
