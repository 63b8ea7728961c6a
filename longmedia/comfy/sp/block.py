"""The sequence-parallel block replacement, the same on every rank: `patches_replace["dit"][("double_block", i)]`.

Block 0 takes the full packed sequence ComfyUI hands it and keeps this rank's rows (`parallel.ShardedPass`);
every block first asks the ranks whether to stop (ComfyUI's Cancel on rank 0: all ranks stop before the same
block), then runs the exact streamed block on the rank's rows with the exchanging attention; the last block
gathers the full sequence once, so ComfyUI's final layer and AV unpacking see what they always see. Between
blocks ComfyUI passes this rank's rows along unchanged (H3's forward only hands a block's output to the next).
"""

from __future__ import annotations

from typing import Callable

from ...execution.chunks import ChunkSizes
from ...execution.linear import WeightAccess
from ...execution.probes import NO_OBSERVER, Observer
from ...parallel.group import RankGroup
from ...parallel.ulysses import ShardedPass, agreed_stop
from ..patching.block_patch import HandedAttentionError, comfy_cast_small, comfy_weights, malloc_graph_paused

SP_MARK = "longmedia_sp_block"


class RanksStopped(Exception):
    """Every rank agreed to stop before a block (rank 0's Cancel); a worker goes back to waiting."""


class PassState:
    """This rank's current pass (set at block 0 of each model call; per run, never module level)."""

    def __init__(self) -> None:
        self.sp: ShardedPass | None = None


def sp_replacement(block, index: int, last: int, group: RankGroup, state: PassState, chunks: ChunkSizes,
                   attention_factory: Callable[[dict, int], Callable], stop_requested: Callable[[], bool],
                   on_stop: Callable[[], None], *, query_chunk: int = 0, weights: WeightAccess | None = None,
                   on_block: Callable[[int, str], None] | None = None, observer: Observer = NO_OBSERVER):
    """`on_stop()` raises where the ranks agreed to stop (rank 0: ComfyUI's interrupt; a worker: RanksStopped)."""

    def replace(args: dict, extra: dict) -> dict:
        if args.get("attention") is not None:
            raise HandedAttentionError(index, args["attention"], "sequence parallel")
        x = args["img"]
        if index == 0:
            state.sp = ShardedPass(group, x.shape[0], args["mod_segments"], args["rope_freqs"])
            x = state.sp.enter(x)
        if agreed_stop(group, stop_requested()):
            state.sp = None
            on_stop()
            raise RanksStopped(f"the ranks stopped before block {index}")
        if on_block is not None:
            on_block(index, "start")
        held = weights if weights is not None else comfy_weights(observer)
        with malloc_graph_paused():
            x = state.sp.block(block, x, args["t_emb"], chunks=chunks, query_chunk=query_chunk,
                               inner=attention_factory(args.get("transformer_options", {}), block.attn.heads),
                               weights=held, cast_small=comfy_cast_small, observer=observer)
            if index == last:
                x = state.sp.leave(x)
                state.sp = None
        if on_block is not None:
            on_block(index, "end")
        return {"img": x}

    setattr(replace, SP_MARK, index)
    return replace


def install_sp_blocks(model_options: dict, blocks, group: RankGroup, chunks: ChunkSizes, attention_factory,
                      stop_requested, on_stop, **kwargs) -> dict:
    """Every block's SP replacement into a copy of `model_options` (ComfyUI's own setter); returns it."""
    from comfy.model_patcher import set_model_options_patch_replace

    from ...errors import LongMediaInputError

    installed = model_options.get("transformer_options", {}).get("patches_replace", {}).get("dit", {})
    foreign = sorted(k[1] for k, fn in installed.items() if k[0] == "double_block" and not hasattr(fn, SP_MARK))
    if foreign:
        raise LongMediaInputError("model", f"another node's patch of DiT blocks {foreign[:4]}",
                                  "no other double-block patch with sequence parallelism",
                                  "Sequence-parallel blocks hold a shard of the rows, which another node's block patch "
                                  "does not expect: remove that node, or leave the devices input empty.")
    state = PassState()
    last = len(blocks) - 1
    for i, block in enumerate(blocks):
        fn = sp_replacement(block, i, last, group, state, chunks, attention_factory, stop_requested, on_stop,
                            **kwargs)
        model_options = set_model_options_patch_replace(model_options, fn, "dit", "double_block", i)
    return model_options
