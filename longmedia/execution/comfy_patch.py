"""ComfyUI adapter for the executor: installs streamed blocks on a cloned ModelPatcher.

Only official seams: `patches_replace["dit"][("double_block", i)]` through
`ModelPatcher.set_model_patch_replace`, weights through `comfy.ops.CastBiasWeightContext` (so
dynamic-VRAM streaming and quantized Linears keep working), small weights through
`comfy.model_management.cast_to`, Cancel through `throw_exception_if_processing_interrupted`.
`comfy` is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable

from .chunks import ChunkSizes
from .streamed_block import run_block

AttentionFactory = Callable[[dict, int], Callable]  # (transformer_options, heads) -> AttentionFn


def _comfy(name: str):
    return importlib.import_module(name)


def comfy_weights():
    """A WeightAccess over ComfyUI's cast context (feature-detected across ComfyUI versions)."""
    ops = _comfy("comfy.ops")
    context = getattr(ops, "CastBiasWeightContext", None)
    if context is not None:
        return lambda module, like: context(module, like, offloadable=True)

    @contextlib.contextmanager
    def legacy(module, like):  # named fallback: ComfyUI before CastBiasWeightContext
        weight, bias, stream = ops.cast_bias_weight(module, like, offloadable=True)
        try:
            yield weight, bias
        finally:
            ops.uncast_bias_weight(module, weight, bias, stream)

    return legacy


def comfy_cast_small(w, like):
    return _comfy("comfy.model_management").cast_to(w, device=like.device)


def comfy_interrupt():
    _comfy("comfy.model_management").throw_exception_if_processing_interrupted()


@dataclass(frozen=True)
class StreamedBlocks:
    """What was installed: chunk sizes per block index."""

    chunks: tuple[ChunkSizes, ...]

    @property
    def streamed_indices(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.chunks) if not c.is_stock)


def streamed_replacement(block, index: int, chunks: ChunkSizes, attention_factory: AttentionFactory, *,
                         on_block: Callable[[int, str], None] | None = None,
                         phase: Callable[[str], contextlib.AbstractContextManager] | None = None):
    """A `patches_replace["dit"][("double_block", index)]` function running `block` through the executor."""

    def replace(args: dict, extra: dict) -> dict:
        topts = args.get("transformer_options", {})
        if on_block is not None:
            on_block(index, "start")
        x = run_block(block, args["img"], args["t_emb"], args["mod_segments"], args["rope_freqs"], chunks=chunks,
                      attention=attention_factory(topts, block.attn.heads), weights=comfy_weights(),
                      interrupt=comfy_interrupt, cast_small=comfy_cast_small, phase=phase)
        if on_block is not None:
            on_block(index, "end")
        return {"img": x}

    return replace


def _existing(transformer_options: dict, heads: int):
    from ..attention.comfy_override import existing_attention_fn

    return existing_attention_fn(transformer_options, heads)


def install_streamed_blocks(patcher, chunks_per_block: list[ChunkSizes], *,
                            attention_factory: AttentionFactory = _existing,
                            on_block: Callable[[int, str], None] | None = None) -> StreamedBlocks:
    """Install the executor on `patcher` (a clone: the caller's model stays untouched).

    Blocks whose chunk sizes are all zero are left to ComfyUI's own forward.
    """
    blocks = patcher.model.diffusion_model.blocks
    if len(chunks_per_block) != len(blocks):
        raise ValueError(f"chunks_per_block has {len(chunks_per_block)} entries, the model has {len(blocks)} blocks")
    for i, chunks in enumerate(chunks_per_block):
        if not chunks.is_stock:
            patcher.set_model_patch_replace(streamed_replacement(blocks[i], i, chunks, attention_factory,
                                                                 on_block=on_block), "dit", "double_block", i)
    return StreamedBlocks(tuple(chunks_per_block))
