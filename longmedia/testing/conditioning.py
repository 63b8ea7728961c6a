"""Random H3 CONDITIONING and the tiny text encoder's sizes, without ComfyUI: what tests and the card bench feed
the Sampler where no text encoder runs (`tests/comfyui/testnodes/tiny_text_encoder.py` builds the tiny encoder
itself, from ComfyUI's classes, at these sizes).

CONDITIONING has the stock H3 layout: `[[hidden_states [1, L, text_dim], {"pooled_output": ...,
"minimax_token_tags": long [L]}]]`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..h3.dims import H3Dims
from .tiny_h3 import TINY_DIMS, seeded_normal

TEXT_TAG = 1
VISION_TAG = 0


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
