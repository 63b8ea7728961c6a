"""Where in stock H3's forward an out-of-memory error happened, read from its traceback.

In normal mode nothing of the model is replaced (that is what keeps it bit-exact), so no `phase()`
context wraps the blocks. The traceback still says where it was: each frame's `self` is the module
whose `forward` ran (a `DiTBlock` of `diffusion_model.blocks`, its `attn` / `mlp` and their Linears,
the `final_layer`), and a frame of `comfy.model_prefetch.prefetch_queue_pop` is weight transport.
The innermost frame that names a place wins (a block running inside a prefetch call is the block's).
Nothing is imported from ComfyUI: modules are matched by identity against the model's own.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from types import TracebackType

PREFETCH = ("comfy.model_prefetch", "prefetch_queue_pop")
ATTENTION_MODULES = ("comfy.ldm.modules.attention", "longmedia.attention", "longmedia.kernels",
                     "longmedia.comfy.patching.attention_override")
FINAL_LAYER_MODULE = "longmedia.execution.final_layer"


@dataclass(frozen=True)
class TracedPhase:
    """A phase of report/oom.PHASES and the block it belongs to (None outside the blocks)."""

    phase: str
    block_index: int | None


def _frames(tb: TracebackType | None):
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def _block_part(block, module, index: int) -> TracedPhase | None:
    """The phase of `module` when it is `block` itself or one of its parts; None when it is not in the block."""
    attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
    if module is block:
        return TracedPhase("qkv", index)  # adaLN, norm1 and modulation before the attention (refined below)
    if mlp is not None and (module is mlp or any(module is m for m in mlp.modules())):
        return TracedPhase("mlp", index)
    if module is getattr(block, "norm2", None):
        return TracedPhase("mlp", index)
    if attn is not None:
        if module is attn:
            return TracedPhase("qkv", index)  # projection, norms and rope (refined by deeper frames)
        if module is getattr(attn, "out_proj", None):
            return TracedPhase("attention", index)
        if any(module is m for m in attn.modules()):
            return TracedPhase("qkv", index)
    if any(module is m for m in block.modules()):  # adaLN projection, norm1
        return TracedPhase("qkv", index)
    return None


def traced_phase(tb: TracebackType | None, blocks, final_layer) -> TracedPhase | None:
    """The phase an OOM with traceback `tb` happened in, or None when no frame names one (then the caller's
    own bookkeeping applies: before block 0)."""
    blocks = list(blocks or ())
    found: TracedPhase | None = None
    current_block: int | None = None
    for frame, lineno in _frames(tb):
        module_name = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        owner = frame.f_locals.get("self")
        if (module_name, name) == PREFETCH:
            target = frame.f_locals.get("module")
            index = next((i for i, b in enumerate(blocks) if b is target), None)
            found = TracedPhase("prefetch_transport", index)
            continue
        if module_name == FINAL_LAYER_MODULE or (owner is not None and owner is final_layer):
            found = TracedPhase("final_output", None)
            continue
        if any(module_name == m or module_name.startswith(m + ".") for m in ATTENTION_MODULES) \
                and current_block is not None:
            found = TracedPhase("attention", current_block)
            continue
        if owner is None:
            continue
        for i, block in enumerate(blocks):
            part = _block_part(block, owner, i)
            if part is None:
                continue
            current_block = i
            if owner is block:  # DiTBlock.forward itself: its source line says which half it was in
                line = linecache.getline(frame.f_code.co_filename, lineno)
                if "self.mlp" in line or "self.norm2" in line:
                    part = TracedPhase("mlp", i)
                elif "self.attn" in line:  # the attention's gated residual (a call inside attn refines it)
                    part = TracedPhase("attention", i)
            elif owner is getattr(block, "attn", None):
                line = linecache.getline(frame.f_code.co_filename, lineno)
                if "optimized_attention" in line or "out_proj" in line:
                    part = TracedPhase("attention", i)
            found = part
            break
    return found
