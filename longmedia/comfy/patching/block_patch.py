"""ComfyUI adapter for the executor: installs streamed blocks on a cloned ModelPatcher.

Only official seams: `patches_replace["dit"][("double_block", i)]` through
`ModelPatcher.set_model_patch_replace` (a replacement installed before ours is chained, never overwritten: it
runs first and its call of the original block runs ours, as ComfyUI's chaining BlockSparseAttention does; a
replacement installed after ours that hands `call_args["attention"]` is honoured or refused by name), weights through `comfy.ops.CastBiasWeightContext` (so
dynamic-VRAM streaming and quantized Linears keep working), small weights through
`comfy.model_management.cast_to`, Cancel through `throw_exception_if_processing_interrupted`.
`comfy` is imported inside functions only.
"""

from __future__ import annotations

import contextlib
from typing import Callable

from ...errors import LongMediaInputError
from ...execution.chunks import ChunkSizes
from ...execution.linear import WeightAccess
from ...execution.probes import NO_OBSERVER, Observer
from ...execution.streamed_block import run_block
from .attention_override import PREFERRED_KEY
from .sparse_attention_node import NODE, NODE_MODULE
from .weight_origin import offload_stream_of, reported

AttentionFactory = Callable[[dict, int], Callable]  # (transformer_options, heads) -> AttentionFn
LAYOUT_KEY = "minimax_h3_layout"


class HandedAttentionError(LongMediaInputError):
    """A block patch handed the block its own attention (`call_args["attention"]`, as ComfyUI's BlockSparseAttention
    does) and LongMedia streams that block: the attention cannot run per query chunk, so it is refused by name.

    BlockSparseAttention's attention (both upstream lines, 01dafad3 and cf3103c5) is the block's whole attention
    phase, `attention(h, rope_freqs=..., transformer_options=...) -> out_proj(sparse_attn(qkv_proj(h)))` over the
    whole sequence: its producer projects q/k/v itself and takes no query-row range. Running it would drop our
    per-query-chunk plan; ignoring it would silently drop the user's sparse attention."""

    def __init__(self, index: int, attention: Callable, memory_mode: str | None) -> None:
        module = getattr(attention, "__module__", None) or type(attention).__module__
        name = getattr(attention, "__qualname__", None) or type(attention).__qualname__
        who = (f"ComfyUI's {NODE} node's sparse attention" if module == NODE_MODULE else
               f"a block patch's own attention {module}.{name} (handed in call_args['attention'], as {NODE} does)")
        self.block_index = index
        mode = f"memory_mode={memory_mode}" if memory_mode else "a streamed memory_mode"
        super().__init__(
            "model", f"DiT block {index} handed {who}",
            f"an attention LongMedia can run per query chunk when it streams blocks ({mode})",
            f"{NODE}'s attention is the whole attention phase (qkv projection to out_proj over the whole sequence, "
            "no query-row range), so streamed blocks cannot run it per query chunk. Set memory_mode=normal to keep "
            f"{NODE} on stock blocks, or remove the {NODE} node (attention_mode=scheduled_sol is LongMedia's sparse "
            "attention for streamed blocks).")


STREAMED_MARK = "longmedia_streamed_block"
"""Attribute on our replacement functions (its value: the block index); `previous` on them is what they chain."""


def chained_previous(existing: Callable | None) -> Callable | None:
    """What a new replacement of ours chains: a foreign one as it is; one of ours by what it chained (re-installing
    replaces our own instead of stacking on it)."""
    while existing is not None and getattr(existing, STREAMED_MARK, None) is not None:
        existing = getattr(existing, "previous", None)
    return existing


def comfy_weights(observer: Observer = NO_OBSERVER):
    """A WeightAccess over ComfyUI's cast context (feature-detected across ComfyUI versions); `observer` is told
    where each held weight came from (`weight_origin.py`).

    A streamed phase holds two weights across many kernels (qkv + out-proj, fc1 + fc2). Under dynamic VRAM a
    weight comfy-aimdo cannot fault in is handed out at the start of the cast buffer of an offload stream, and
    ComfyUI's `uncast_bias_weight` leaves that stream unordered (only a faulted or a non-dynamic weight makes
    its stream wait for compute). Stock reads each weight in the one kernel that follows its cast, and the next
    cast (`get_offload_stream`) orders the previous stream after it. Here the first weight of the pair is read
    after that point, so a later cast on its stream could overwrite it while the phase's kernels still read it.
    So each weight's offload stream is made to wait for the compute stream when the weight is handed back,
    which is what `uncast_bias_weight` does for the other kinds of weight. With a single offload stream
    (`--async-offload 1`) the pair would share one buffer: each weight is copied and its cast released at once.
    """
    import comfy.model_management as mm
    import comfy.ops as ops

    context = getattr(ops, "CastBiasWeightContext", None)
    quantized = requantized_type(ops)

    @contextlib.contextmanager
    def cast(module, like):
        if context is not None:
            ctx = context(module, like, offloadable=True, **cast_options(module, like, quantized))
            stream = offload_stream_of(ctx.state)
            with reported(observer, module, ctx.state), ctx as pair:
                try:
                    yield pair
                finally:
                    order_after_compute(stream, like, mm)
            return
        # named fallback: ComfyUI before CastBiasWeightContext
        weight, bias, state = ops.cast_bias_weight(module, like, offloadable=True,
                                                   **cast_options(module, like, quantized))
        try:
            with reported(observer, module, (weight, bias, state)):
                yield weight, bias
        finally:
            order_after_compute(offload_stream_of((weight, bias, state)), like, mm)
            ops.uncast_bias_weight(module, weight, bias, state)

    return owned(cast) if getattr(mm, "NUM_STREAMS", 2) == 1 else cast


def requantized_type(ops) -> type | None:
    """The quantized-tensor type whose casts are asked to requantize (a quantized weight patched at cast time comes
    back requantized, as ComfyUI's INT8 layers ask for); None where this ComfyUI's cast takes no `want_requant` or it
    has no quantized tensors. Read once per weight access, not per cast."""
    import inspect

    try:
        if "want_requant" not in inspect.signature(getattr(ops, "cast_bias_weight", None)).parameters:
            return None
    except (TypeError, ValueError):  # named reason: not a Python function here (no signature to read)
        return None
    try:
        from comfy.quant_ops import QuantizedTensor
    except ImportError:  # named reason: a ComfyUI without quantized tensors has no quantized weight
        return None
    return QuantizedTensor


def cast_options(module, like, quantized: type | None) -> dict:
    """The cast's keywords for `module`, as stock's layer asks for its weight (`quantized`: `requantized_type`).

    A quantized weight (INT8) is cast the way ComfyUI's quantized Linear and `linear_input_act` cast it: a LoRA
    applied at cast time (comfy-aimdo streaming a weight through a cast buffer under Dynamic VRAM) is applied in
    the activations' dtype and the result requantized (`want_requant=True`, `compute_dtype`), so the streamed
    phase holds the INT8 weight stock's layer runs (INT8 bytes, INT8 arithmetic) instead of a dequantized bf16
    one. Plain weights are cast as before (stock's plain Linear asks for no requantization)."""
    if quantized is None or not isinstance(getattr(module, "weight", None), quantized):
        return {}
    return {"compute_dtype": like.dtype, "want_requant": True}


def order_after_compute(stream, like, mm) -> None:
    """Order `stream` after the kernels enqueued so far on the compute stream (those that read the weight)."""
    if stream is not None:
        stream.wait_stream(mm.current_stream(like.device))


def owned(access: WeightAccess) -> WeightAccess:
    """`access` handing out copies: the cast is released before the copy is used."""

    @contextlib.contextmanager
    def owned(module, like):
        with access(module, like) as (weight, bias):
            weight = weight.clone() if weight is not None else None
            bias = bias.clone() if bias is not None else None
        yield weight, bias

    return owned


def comfy_cast_small(w, like):
    import comfy.model_management

    return comfy.model_management.cast_to(w, device=like.device)


def malloc_graph_paused() -> contextlib.AbstractContextManager:
    """ComfyUI's `pause_malloc_graph()` where it exists (0.38+), else a no-op context.

    From 0.38 the model's forward runs inside a comfy-aimdo malloc graph (CUDA with dynamic VRAM) and
    every block gets its own recorded allocation scope. Our chunk buffers (K/V, per-chunk activations,
    the final layer's row chunks) must not be recorded into it: their sizes follow our plan, not the
    stock block, so the streamed block and the chunked final layer run with recording paused. On the
    CPU, with dynamic VRAM off, or with --disable-comfy-compiler the host's pause is itself a no-op.
    """
    import comfy.model_prefetch

    pause = getattr(comfy.model_prefetch, "pause_malloc_graph", None)
    return pause() if pause is not None else contextlib.nullcontext()


def comfy_interrupt():
    import comfy.model_management

    comfy.model_management.throw_exception_if_processing_interrupted()


def streamed_replacement(block, index: int, chunks: ChunkSizes, attention_factory: AttentionFactory, *,
                         previous: Callable[[dict, dict], dict] | None = None, memory_mode: str | None = None,
                         on_block: Callable[[int, str], None] | None = None,
                         phase: Callable[[str], contextlib.AbstractContextManager] | None = None,
                         weights: WeightAccess | None = None, observer: Observer = NO_OBSERVER):
    """A `patches_replace["dit"][("double_block", index)]` function running `block` through the executor.

    `weights`: how the block holds its large weights (None: `comfy_weights(observer)` per call); `observer`: the
    run's diagnostics (`execution/probes.py`), none by default.

    previous: the replacement installed before ours (e.g. ComfyUI's BlockSparseAttention): it runs first, with
    our streamed block as its `extra["original_block"]`, so whatever it hands on reaches us. A call handing its
    own attention (`call_args["attention"]`, from `previous` or from a patch installed after ours that chains us)
    is refused by name (`HandedAttentionError`): no host attention of that shape can be run per query chunk.
    memory_mode: named in that refusal."""

    def streamed(args: dict) -> dict:
        topts = args.get("transformer_options", {})
        if args.get("attention") is not None:
            raise HandedAttentionError(index, args["attention"], memory_mode)
        if "layout" in args and LAYOUT_KEY not in topts:  # ComfyUI 0.38+ hands the packed layout here too
            topts = {**topts, LAYOUT_KEY: args["layout"]}
        preferred = getattr(block.attn, "comfy_attention", None)  # ComfyUI 0.38+: the checkpoint's attention config
        if getattr(preferred, "function", None) is not None:
            topts = {**topts, PREFERRED_KEY: preferred}  # this call's copy: `existing` hands it on as H3 does
        if on_block is not None:
            on_block(index, "start")
        held = weights if weights is not None else comfy_weights(observer)
        with malloc_graph_paused():
            x = run_block(block, args["img"], args["t_emb"], args["mod_segments"], args["rope_freqs"], chunks=chunks,
                          attention=attention_factory(topts, block.attn.heads), weights=held,
                          interrupt=comfy_interrupt, cast_small=comfy_cast_small, phase=phase, observer=observer)
        if on_block is not None:
            on_block(index, "end")
        return {"img": x}

    def replace(args: dict, extra: dict) -> dict:
        if previous is None:
            return streamed(args)
        return previous(args, {**extra, "original_block": streamed})

    setattr(replace, STREAMED_MARK, index)
    replace.previous = previous
    return replace


def block_start_replacement(index: int, on_block: Callable[[int], None], *,
                            previous: Callable[[dict, dict], dict] | None = None):
    """A `patches_replace["dit"][("double_block", index)]` function for a stock block whose weights stream from
    disk: it tells `on_block(index)` that the block starts (the host-RAM guard reads the next blocks' file ranges
    ahead, `execution/disk_prefetch.py`, and watches RAM available), then runs the block as ComfyUI would:
    `previous` (another node's replacement) when there is one, else ComfyUI's own `original_block` with the same
    arguments. No value is changed."""

    def replace(args: dict, extra: dict) -> dict:
        on_block(index)
        if previous is not None:
            return previous(args, extra)
        return extra["original_block"](args)

    setattr(replace, STREAMED_MARK, index)
    replace.previous = previous
    return replace


def outside_malloc_graph(forward: Callable) -> Callable:
    """`forward` run with ComfyUI's malloc graph recording paused (see `malloc_graph_paused`), same signature."""
    import functools

    @functools.wraps(forward)
    def paused(*args, **kwargs):
        with malloc_graph_paused():
            return forward(*args, **kwargs)

    return paused
