"""A tiny H3 text encoder for tests, without the stock 32 B one (test support: never shipped).

ComfyUI's CLIPLoader always builds the full-size Qwen3-VL-32B encoder, so tests build a tiny one
in-process from ComfyUI's own classes: the stock `MiniMaxH3Tokenizer` (real qwen tokenizer, the H3
presentation rules) and `MiniMaxH3ClipModel` / `MiniMaxQwen3VL` (the `minimax_token_tags` output),
with a tiny Qwen3-VL text stack (hidden = the DiT's text_dim) and a tiny vision tower, filled with
seeded random weights. `encode_prompt` then makes exactly the calls the stock H3 nodes make
(`clip.tokenize` + `clip.encode_from_tokens_scheduled`), so the CONDITIONING has the stock layout.
Its sizes and the ComfyUI-free random CONDITIONING are `longmedia.testing.conditioning`. The test server loads
this module with the test nodes; pytest imports it as `testnodes.tiny_text_encoder`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from longmedia.h3.dims import H3Dims
from longmedia.testing.conditioning import TinyConditioningError, TinyTextEncoderDims
from longmedia.testing.tiny_h3 import TINY_DIMS, seeded_normal

TE_NAME = "qwen3vl_32b"


def _tiny_te_class(te: TinyTextEncoderDims) -> type:
    """A `MiniMaxH3TEModel` whose Qwen3-VL is built at the tiny sizes (ComfyUI classes throughout)."""
    import comfy.sd1_clip
    import comfy.text_encoders.llama as llama
    import comfy.text_encoders.minimax as minimax
    import comfy.text_encoders.qwen3vl as qwen3vl

    class TinyMiniMaxQwen3VL(minimax.MiniMaxQwen3VL):
        # Qwen3VL.__init__ sizes its vision tower from a fixed table; build both parts here instead.
        def __init__(self, config_dict, dtype, device, operations):
            torch.nn.Module.__init__(self)
            config = llama.Qwen3VL_32BConfig(**config_dict)
            self.num_layers = config.num_hidden_layers
            self.model = llama.Llama2_(config, device=device, dtype=dtype, ops=operations)
            self.visual = qwen3vl.Qwen3VLVisionModel(te.vision_config(), device=device, dtype=dtype, ops=operations)
            self.dtype = dtype

    class TinyMiniMaxH3ClipModel(minimax.MiniMaxH3ClipModel):
        # same SDClipModel arguments as the stock class, with the tiny model class and config
        def __init__(self, device="cpu", layer="last", layer_idx=None, dtype=None, model_options=None):
            model_options = {} if model_options is None else model_options
            comfy.sd1_clip.SDClipModel.__init__(
                self, device=device, layer="last", layer_idx=None, textmodel_json_config=dict(te.text_config),
                dtype=dtype, special_tokens={"pad": 151643}, layer_norm_hidden_state=False,
                model_class=TinyMiniMaxQwen3VL, enable_attention_masks=False, return_attention_masks=False,
                model_options=model_options)

    class TinyMiniMaxH3TEModel(minimax.MiniMaxH3TEModel):
        def __init__(self, device="cpu", dtype=None, model_options=None):
            options = {**(model_options or {}), f"{TE_NAME}_class": TinyMiniMaxH3ClipModel}
            super().__init__(device=device, dtype=dtype, model_options=options)

    return TinyMiniMaxH3TEModel


def _random_te_tensor(key: str, shape: Sequence[int], seed: int) -> torch.Tensor:
    if len(shape) == 0:  # SDClipModel's logit_scale: unused by Qwen
        return torch.tensor(1.0)
    x = seeded_normal(seed, "te:" + key, shape)
    if "embed_tokens" in key or "pos_embed" in key:
        return x
    if len(shape) == 1:
        is_norm = "norm" in key and key.endswith("weight")
        return 1.0 + 0.1 * x if is_norm else 0.02 * x
    return x / math.sqrt(math.prod(shape[1:]))


def tiny_te_state_dict(shapes: dict[str, Sequence[int]], seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded random fp32 weights for the tiny encoder's keys (linears ~ N(0, 1/fan_in), norms ~ 1)."""
    return {k: _random_te_tensor(k, tuple(s), seed) for k, s in sorted(shapes.items())}


def tiny_text_encoder(dims: H3Dims = TINY_DIMS, *, seed: int = 0, te: TinyTextEncoderDims | None = None,
                      dtype: torch.dtype = torch.float32) -> Any:
    """A `comfy.sd.CLIP` for H3 at text width `dims.text_dim`, with seeded random weights."""
    import comfy.sd
    import comfy.supported_models_base
    import comfy.text_encoders.minimax as minimax

    te = te or TinyTextEncoderDims.for_dims(dims)
    if te.hidden != dims.text_dim:
        raise TinyConditioningError(
            f"te.hidden={te.hidden} must equal dims.text_dim={dims.text_dim}: build it with "
            "TinyTextEncoderDims.for_dims(dims)")
    te.validate()
    target = comfy.supported_models_base.ClipTarget(minimax.MiniMaxH3Tokenizer, _tiny_te_class(te))
    clip = comfy.sd.CLIP(target=target, model_options={"dtype": dtype})
    shapes = {k: tuple(v.shape) for k, v in clip.cond_stage_model.state_dict().items()}
    missing, unexpected = clip.load_sd(tiny_te_state_dict(shapes, seed), full_model=True)
    if missing or unexpected:
        raise TinyConditioningError(f"tiny text encoder weights do not fit: missing {missing}, unexpected {unexpected}")
    return clip


def encode_prompt(clip: Any, prompt: str, images: Sequence[torch.Tensor] = ()) -> list:
    """CONDITIONING of `prompt` (+ keyframe images [1, H, W, 3]) the way the stock H3 nodes encode it."""
    tokens = clip.tokenize(prompt, images=list(images))
    return clip.encode_from_tokens_scheduled(tokens)
