"""The LoRAs on a loaded model, as the plan counts them: the bytes of the patch tensors ComfyUI holds on a
ModelPatcher (`patcher.patches`: key -> [(strength, adapter or tensors, ...)], what stock LoraLoaderModelOnly adds),
read only. Each tensor counts once, however many keys share it."""

from __future__ import annotations

from typing import Any

import torch

from ...h3.dims import H3Dims
from ...planning.patches import PatchBytes

BLOCK_KEY = "diffusion_model.blocks."
MAX_DEPTH = 4  # adapter -> weights tuple -> tensors: the deepest ComfyUI nests them


def _tensors(value: Any, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < MAX_DEPTH:
        if isinstance(value, (tuple, list)):
            for item in value:
                yield from _tensors(item, depth + 1)
        elif hasattr(value, "weights"):   # comfy.weight_adapter's adapters (LoRAAdapter, ...)
            yield from _tensors(value.weights, depth + 1)


def model_patch_bytes(patcher: Any, dims: H3Dims) -> PatchBytes:
    """`PatchBytes` of the model's patches (every tensor in RAM; the blocks' share spread over the blocks);
    PatchBytes() where the patcher has none."""
    patches = getattr(patcher, "patches", None) or {}
    seen: set[int] = set()
    total = blocks = 0
    for key, entries in patches.items():
        for entry in entries:
            for t in _tensors(entry[1] if isinstance(entry, (tuple, list)) and len(entry) > 1 else entry):
                if id(t) in seen:
                    continue
                seen.add(id(t))
                n = t.numel() * t.element_size()
                total += n
                blocks += n if str(key).startswith(BLOCK_KEY) else 0
    if not total:
        return PatchBytes()
    return PatchBytes(total, blocks // max(1, dims.num_blocks), f"{len(patches)} patched weights on the model")


__all__ = ["model_patch_bytes"]
