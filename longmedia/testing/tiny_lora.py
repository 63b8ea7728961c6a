"""Random LoRA files for the tiny H3 checkpoints, in the key format ComfyUI's LoRA loader maps for H3.

ComfyUI's `comfy.lora.model_lora_keys_unet` maps every `diffusion_model.<module>.weight` of the model's state dict
from the generic key `diffusion_model.<module>` (H3 has no special key conversion in `comfy/lora_convert.py`), and
`comfy.lora.load_lora` reads `<key>.lora_up.weight` [out, rank], `<key>.lora_down.weight` [rank, in] and the scalar
`<key>.alpha` (the update is strength * alpha / rank * up @ down). `write_tiny_lora` writes one such file covering
every linear of every DiT block (and of the token refiner's blocks) of a tiny checkpoint built at the same dims.

Every tensor is drawn from its own generator seeded by (seed, key), so a file is the same on every machine; the
values are random and never zero (a LoRA of zeros would hide a path that drops the patch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..h3.dims import H3Dims
from .tiny_h3 import TINY_DIMS, seeded_normal, tensor_specs

BLOCK_LINEARS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2", "adaln_proj.linear")
"""The linears of a block (`blocks.N.` or `token_refiner.blocks.N.`) a tiny LoRA patches, where the block has them."""
UP_GAIN = 0.25
"""Scale of the update relative to the base weight (~N(0, 1/fan_in)): large enough to move the output clearly."""


class TinyLoraError(ValueError):
    """Invalid tiny-LoRA request: the message names the input, its value and the allowed range."""


@dataclass(frozen=True)
class TinyLoraSpec:
    """What a tiny LoRA file holds: rank, alpha (None: alpha = rank, scale 1) and the seed of its values."""

    rank: int = 4
    alpha: float | None = None
    seed: int = 100

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 1:
            raise TinyLoraError(f"rank must be an integer >= 1, got {self.rank!r}: pass rank=4")
        if self.alpha is not None and not (math.isfinite(self.alpha) and self.alpha != 0):
            raise TinyLoraError(f"alpha must be a finite nonzero number or None (alpha = rank), got {self.alpha!r}")

    @property
    def scale(self) -> float:
        """alpha / rank, as ComfyUI applies it."""
        return (self.rank if self.alpha is None else self.alpha) / self.rank


def lora_targets(dims: H3Dims = TINY_DIMS) -> tuple[tuple[str, tuple[int, int]], ...]:
    """(model module name, (out, in)) of every block linear a tiny LoRA patches, in checkpoint order."""
    out = []
    for spec in tensor_specs(dims):
        layer = spec.key[: -len(".weight")]
        if spec.key.endswith(".weight") and layer.startswith(("blocks.", "token_refiner.blocks.")) and (
                layer.split(".", 2 if layer.startswith("blocks.") else 3)[-1] in BLOCK_LINEARS):
            out.append((layer, spec.shape))
    return tuple(out)


def tiny_lora_state_dict(dims: H3Dims = TINY_DIMS, spec: TinyLoraSpec = TinyLoraSpec(),
                         dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The LoRA's tensors (up and down stored in `dtype`: fp32 by default, bf16 as released LoRAs ship), keyed
    `diffusion_model.<module>.lora_up.weight` / `.lora_down.weight` / `.alpha`."""
    tensors: dict[str, torch.Tensor] = {}
    for layer, (out_f, in_f) in lora_targets(dims):
        key = f"diffusion_model.{layer}"
        down = seeded_normal(spec.seed, f"{key}.lora_down.weight", (spec.rank, in_f)) / math.sqrt(in_f)
        # up @ down has entries ~ N(0, UP_GAIN^2 / in_f) once alpha / rank is applied
        up = seeded_normal(spec.seed, f"{key}.lora_up.weight", (out_f, spec.rank)) * (
            UP_GAIN / math.sqrt(spec.rank) / spec.scale)
        tensors[f"{key}.lora_down.weight"] = down.to(dtype).contiguous()
        tensors[f"{key}.lora_up.weight"] = up.to(dtype).contiguous()
        tensors[f"{key}.alpha"] = torch.tensor(float(spec.rank if spec.alpha is None else spec.alpha))
    return tensors


def write_tiny_lora(path: str | Path, *, dims: H3Dims = TINY_DIMS, spec: TinyLoraSpec = TinyLoraSpec(),
                    dtype: torch.dtype = torch.float32) -> Path:
    """Write one tiny LoRA and return its file path (`path` ending in `.safetensors` is the file, else a directory
    that receives `tiny_h3_lora_r<rank>_s<seed>.safetensors`)."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.suffix != ".safetensors":
        path = path / f"tiny_h3_lora_r{spec.rank}_s{spec.seed}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tiny_lora_state_dict(dims, spec, dtype), str(path), metadata={"generator": "longmedia.testing.tiny_lora"})
    return path
