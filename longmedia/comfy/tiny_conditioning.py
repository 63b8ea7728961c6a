"""H3 CONDITIONING for tests, without the stock 32 B text encoder.

ComfyUI's CLIPLoader always builds the full-size Qwen3-VL-32B encoder, so tests build a tiny one
in-process from ComfyUI's own classes: the stock `MiniMaxH3Tokenizer` (real qwen tokenizer, the H3
presentation rules) and `MiniMaxH3ClipModel` / `MiniMaxQwen3VL` (the `minimax_token_tags` output),
with a tiny Qwen3-VL text stack (hidden = the DiT's text_dim) and a tiny vision tower, filled with
seeded random weights. `encode_prompt` then makes exactly the calls the stock H3 nodes make
(`clip.tokenize` + `clip.encode_from_tokens_scheduled`), so the CONDITIONING has the stock layout:
`[[hidden_states [1, L, text_dim], {"pooled_output": ..., "minimax_token_tags": long [L]}]]`.

`random_conditioning` is the ComfyUI-free fallback (random states, all-text tags) for core tests.
ComfyUI is imported lazily inside the functions that need it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from ..h3.dims import H3Dims
from ..testing.tiny_h3 import TINY_DIMS, seeded_normal

TEXT_TAG = 1
VISION_TAG = 0
QWEN_HEAD_DIM = 128  # fixed by ComfyUI's Qwen3 config (its mrope sections sum to 64 = 128 / 2)
QWEN_VOCAB = 151936
TE_NAME = "qwen3vl_32b"


class TinyConditioningError(ValueError):
    """Invalid tiny-conditioning request: the message names the input, its value and the allowed range."""


@dataclass(frozen=True)
class TinyTextEncoderDims:
    """Sizes of the tiny Qwen3-VL encoder; `hidden` must equal the DiT's text_dim."""

    hidden: int = TINY_DIMS.text_dim
    intermediate: int = 192
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    vision_hidden: int = 32
    vision_heads: int = 2
    vision_intermediate: int = 64
    vision_depth: int = 2
    vision_deepstack: tuple[int, ...] = (1,)
    vision_position_embeddings: int = 64

    @classmethod
    def for_dims(cls, dims: H3Dims) -> "TinyTextEncoderDims":
        return replace(cls(), hidden=dims.text_dim)

    @property
    def text_config(self) -> dict[str, Any]:
        """Field overrides of ComfyUI's `Qwen3VL_32BConfig` dataclass."""
        return {"hidden_size": self.hidden, "intermediate_size": self.intermediate,
                "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads}

    def vision_config(self) -> dict[str, Any]:
        """Config dict of ComfyUI's `Qwen3VLVisionModel` (patch 16, temporal 2, merge 2 as stock)."""
        return {"hidden_size": self.vision_hidden, "num_heads": self.vision_heads,
                "intermediate_size": self.vision_intermediate, "depth": self.vision_depth,
                "deepstack_visual_indexes": list(self.vision_deepstack), "patch_size": 16,
                "temporal_patch_size": 2, "in_channels": 3, "spatial_merge_size": 2,
                "num_position_embeddings": self.vision_position_embeddings, "out_hidden_size": self.hidden}

    def validate(self) -> None:
        for name, value in asdict(self).items():
            if name == "vision_deepstack":
                if any(not 0 <= i < self.vision_depth for i in value):
                    raise TinyConditioningError(
                        f"vision_deepstack={value} must index vision blocks 0..{self.vision_depth - 1}")
            elif not isinstance(value, int) or value < 1:
                raise TinyConditioningError(f"TinyTextEncoderDims.{name} must be an integer >= 1, got {value!r}")
        if self.heads % self.kv_heads:
            raise TinyConditioningError(f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        side = math.isqrt(self.vision_position_embeddings)
        if side * side != self.vision_position_embeddings:
            raise TinyConditioningError(
                f"vision_position_embeddings must be a square, got {self.vision_position_embeddings}: use e.g. 64")


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


def tiny_conditioning(prompt: str, *, dims: H3Dims = TINY_DIMS, seed: int = 0) -> list:
    """Encode one prompt with a freshly built tiny encoder (build it once with `tiny_text_encoder` for many)."""
    return encode_prompt(tiny_text_encoder(dims, seed=seed), prompt)


def random_conditioning(text_len: int, *, dims: H3Dims = TINY_DIMS, seed: int = 0,
                        tags: torch.Tensor | None = None, scale: float = 1.0) -> list:
    """ComfyUI-free CONDITIONING: N(0, scale^2) states [1, text_len, text_dim] and text tags (1)."""
    if not isinstance(text_len, int) or text_len < 1:
        raise TinyConditioningError(f"text_len must be an integer >= 1, got {text_len!r}")
    states = seeded_normal(seed, f"cond:{text_len}:{dims.text_dim}", (1, text_len, dims.text_dim)) * scale
    if tags is None:
        tags = torch.full((text_len,), TEXT_TAG, dtype=torch.long)
    elif tuple(tags.shape) != (text_len,):
        raise TinyConditioningError(f"tags must have shape ({text_len},), got {tuple(tags.shape)}")
    return [[states, {"pooled_output": None, "minimax_token_tags": tags.to(torch.long)}]]


def save_conditioning(conditioning: list, path: str | Path) -> Path:
    """Write CONDITIONING with `torch.save` (tensors, dicts, lists, None only: loads with weights_only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = [[cond, {k: v for k, v in extra.items()}] for cond, extra in conditioning]
    torch.save(plain, path)
    return path


def load_conditioning(path: str | Path) -> list:
    """Read a file written by `save_conditioning` (weights_only: no code runs on load)."""
    loaded = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(loaded, list) or not all(isinstance(c, (list, tuple)) and len(c) == 2 for c in loaded):
        raise TinyConditioningError(f"{path} does not hold CONDITIONING ([[tensor, dict], ...]); write it "
                                    "with save_conditioning")
    return [[cond, dict(extra)] for cond, extra in loaded]
