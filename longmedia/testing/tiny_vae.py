"""Tiny H3 video and audio VAEs: ComfyUI's own classes at tiny size, wrapped by ComfyUI's own `comfy.sd.VAE`.

ComfyUI's loader (`comfy.sd.VAE(sd=...)`) recognises the H3 VAEs from their keys and builds them at full
size (the video decoder alone has 2.4 B parameters: too big for a CPU test). Here that same loader builds
the wrapper from a state dict of meta tensors, so its H3 branch sets every attribute stock decode reads
(latent shapes, `memory_used_decode`, dtypes, the patcher); then the model is swapped for a tiny instance
of the same class (`MiniMaxH3VideoVAE` with a one-layer `ViT3DDecoder`; `MiniMaxH3AudioVAE` with narrow
widths) with seeded random weights, and the patcher is rebuilt around it. The decode code that runs is
ComfyUI's, unchanged.

This floor never imports ComfyUI: the caller passes ComfyUI's modules in (`comfy.sd` and
`comfy.ldm.minimax.vae` / `comfy.ldm.minimax.audio_vae`).
"""

from __future__ import annotations

from types import ModuleType

import torch

# MiniMaxH3VideoVAE keeps H3's 16x spatial / 4x temporal ratios and 17-frame chunks; only widths shrink.
TINY_VIDEO_VAE = {"ch": 32, "ch_mult": (1, 1, 1, 1, 1, 1)}          # GroupNorm needs 32 channels
TINY_VIDEO_DECODER = {"num_layers": 1, "heads": 2, "dim_head": 8}
TINY_AUDIO_VAE = {"encoder_dim": 4, "latent_dim": 16, "decoder_dim": 128}   # 128 halves 7 times to 1 channel
WEIGHT_SCALE = 0.2
OUTPUT_SCALE = 0.6      # the video decoder's last projection: pixels spread over [0, 1], few clamped


def _fill(module: torch.nn.Module, seed: int, skip: tuple[str, ...] = (), draw_device: str = "cpu",
          weight_scale: float = WEIGHT_SCALE) -> None:
    """Every parameter (and every buffer named in none of `skip`) from one seeded generator on `draw_device`,
    scaled small, copied into the module where it lives."""
    gen = torch.Generator(draw_device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = OUTPUT_SCALE if name.startswith("decoder.proj_out") else weight_scale
            p.copy_(torch.randn(p.shape, generator=gen, device=draw_device) * scale)
        for name, b in module.named_buffers():
            if b.is_floating_point() and not any(name.startswith(s) for s in skip):
                b.copy_(torch.randn(b.shape, generator=gen, device=draw_device) * weight_scale)


def _wrap(comfy_sd: ModuleType, full_size: type, tiny: torch.nn.Module, fill=None):
    """ComfyUI's VAE wrapper as its loader builds it for `full_size`'s checkpoint, holding `tiny` instead;
    `fill(model)`, when given, draws the weights after the model is in the wrapper's dtype, so host RAM holds them
    once, at that dtype, as after ComfyUI loads a VAE file (not a float32 copy beside them)."""
    with torch.device("meta"):
        shape_model = full_size()
        _materialize_lazy_linears(shape_model)      # else its weightless Linears' keys read as missing
        sd = dict(shape_model.state_dict())
        vae = comfy_sd.VAE(sd=sd)
    if type(vae.first_stage_model) is not full_size:
        raise RuntimeError(f"comfy.sd.VAE did not recognise {full_size.__name__}'s keys: got "
                           f"{type(vae.first_stage_model).__name__}")
    vae.first_stage_model = tiny.eval().to(vae.vae_dtype)
    if fill is not None:
        fill(vae.first_stage_model)
    vae.patcher = type(vae.patcher)(vae.first_stage_model, load_device=vae.device,
                                    offload_device=vae.patcher.offload_device)
    vae.size = None
    vae.model_size()
    return vae


def tiny_video_vae(comfy_sd: ModuleType, minimax_vae: ModuleType, seed: int = 0):
    """A `comfy.sd.VAE` over a tiny `MiniMaxH3VideoVAE`: latents [1, 24, T, h, w] -> frames (17k+5, 16h, 16w)."""
    cls = minimax_vae.MiniMaxH3VideoVAE
    model = cls(**TINY_VIDEO_VAE)
    model.decoder = minimax_vae.ViT3DDecoder(patch_size=model.vae_ratio, patch_size_t=model.vae_ratio_t,
                                             in_channels=24, out_channels=3, **TINY_VIDEO_DECODER)
    _materialize_lazy_linears(model)
    _fill(model, seed, skip=("latents_", "pixel_"))      # H3's latent statistics and ImageNet pixels stay
    return _wrap(comfy_sd, cls, model)


def tiny_audio_vae(comfy_sd: ModuleType, minimax_audio_vae: ModuleType, seed: int = 0):
    """A `comfy.sd.VAE` over a tiny `MiniMaxH3AudioVAE`: latents [1, 32, 2, T] -> stereo at 32 kHz (800 per T)."""
    cls = minimax_audio_vae.MiniMaxH3AudioVAE
    model = cls(**TINY_AUDIO_VAE)
    _materialize_lazy_linears(model)
    _fill(model, seed)
    with torch.no_grad():
        model.latents_std.abs_().add_(0.5)
    return _wrap(comfy_sd, cls, model)


def full_video_vae(comfy_sd: ModuleType, minimax_vae: ModuleType, seed: int = 0, draw_device: str = "cpu"):
    """A `comfy.sd.VAE` over ComfyUI's `MiniMaxH3VideoVAE` at full size (the real architecture and decode path)
    with seeded random weights, scaled by 1/sqrt(fan-in) so activations stay finite through every layer; drawn on
    `draw_device` (a GPU draws 2.4 B values in seconds), held on the CPU until ComfyUI loads it."""
    cls = minimax_vae.MiniMaxH3VideoVAE
    model = cls()      # ComfyUI builds it with its no-init layers: allocation only
    _materialize_lazy_linears(model)      # untouched: no RAM is taken until the fill writes them
    return _wrap(comfy_sd, cls, model,
                 fill=lambda m: _fill_fan_in(m, seed, draw_device, skip=("latents_", "pixel_")))


def full_audio_vae(comfy_sd: ModuleType, minimax_audio_vae: ModuleType, seed: int = 0, draw_device: str = "cpu"):
    """A `comfy.sd.VAE` over ComfyUI's `MiniMaxH3AudioVAE` at full size with seeded random weights."""
    cls = minimax_audio_vae.MiniMaxH3AudioVAE
    model = cls()
    _materialize_lazy_linears(model)

    def fill(m: torch.nn.Module) -> None:
        _fill_fan_in(m, seed, draw_device)
        with torch.no_grad():
            m.latents_std.abs_().add_(0.5)

    return _wrap(comfy_sd, cls, model, fill=fill)


def _materialize_lazy_linears(module: torch.nn.Module) -> None:
    """Under Dynamic VRAM (comfy-aimdo on), ComfyUI's no-init `Linear` is built without weight or bias: they arrive
    with the state dict. Such layers would be skipped by the fill and fail at decode ("'NoneType' object has no
    attribute 'device'"), so each gets an empty weight (and bias) of its shape through the module's own
    `load_state_dict`, the path ComfyUI's loader takes; the fill then draws them."""
    lazy = {}
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.Linear) and m.weight is None:
            lazy[f"{name}.weight"] = torch.empty(m.out_features, m.in_features)
            if getattr(m, "comfy_need_lazy_init_bias", False):
                lazy[f"{name}.bias"] = torch.empty(m.out_features)
    if lazy:
        result = module.load_state_dict(lazy, strict=False, assign=True)
        if result.unexpected_keys:
            raise RuntimeError(f"lazy Linear weights not taken by their modules: {result.unexpected_keys[:4]}")


def _fill_fan_in(module: torch.nn.Module, seed: int, draw_device: str, skip: tuple[str, ...] = ()) -> None:
    """Weights N(0, 1/fan_in), biases and norms small, other float buffers (outside `skip`) N(0, 0.2^2)."""
    gen = torch.Generator(draw_device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            fan_in = max(1, p[0].numel()) if p.ndim > 1 else 0
            scale = fan_in ** -0.5 if fan_in else WEIGHT_SCALE
            value = torch.randn(p.shape, generator=gen, device=draw_device) * scale
            if p.ndim == 1 and ("norm" in name or name.endswith("scale1") or name.endswith("scale2")):
                value += 1.0
            p.copy_(value)
        for name, b in module.named_buffers():
            if b.is_floating_point() and not any(name.startswith(s) for s in skip):
                b.copy_(torch.randn(b.shape, generator=gen, device=draw_device) * WEIGHT_SCALE)
