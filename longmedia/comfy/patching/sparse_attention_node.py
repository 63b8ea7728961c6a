"""A model that arrives patched by ComfyUI's stock `BlockSparseAttention` node (comfy_extras, ComfyUI 0.38+).

That node clones the model and installs (a) an attention override it puts back on top every step from
an ON_PREPARE_STATE callback keyed "block_sparse_attention", and (b) for H3 a replacement of every
`patches_replace["dit"][("double_block", i)]`, which hands the block its own sparse attention in
`call_args["attention"]` when the call is eligible (CUDA, bf16, head_dim 128, kitchen's Sol): the whole
attention phase, `attention(h, rope_freqs=..., transformer_options=...)`, qkv projection to out_proj over
the whole sequence, with no query-row range. The chaining line (cf3103c5) calls a replacement installed
before it as `previous(call_args, extra)`; the older line (01dafad3) overwrites it. LongMedia never
silently undoes, double-patches or drops it:

- stock blocks (memory_mode normal, no manual chunks): composed. Its block patches and override stay
  as installed and run H3's attention (LongMedia installs no block replacement); LongMedia installs no
  attention override of its own (BSA re-installs its own on top every step and its producer bypasses
  any override), so the plan's attention becomes `existing`.
- streamed blocks: refused by name before any work: its attention cannot run per query chunk. At run
  time `block_patch.streamed_replacement` chains a replacement installed before it and refuses a handed
  attention by name, in either install order (`HandedAttentionError`).
The plan's reasons say which happened.
"""

from __future__ import annotations

import dataclasses

from ...errors import LongMediaInputError
from ...planning.types import ExecutionPlan

NODE = "BlockSparseAttention"
NODE_MODULE = "comfy_extras.nodes_sparse_attention"
CALLBACK_KEY = "block_sparse_attention"


def _from_node(fn) -> bool:
    return getattr(fn, "__module__", "") == NODE_MODULE


def block_sparse_evidence(patcher, model_options: dict) -> tuple[str, ...]:
    """What shows the stock BlockSparseAttention node patched this model; empty when it did not."""
    found = []
    get_callbacks = getattr(patcher, "get_callbacks", None)
    if get_callbacks is not None:
        import comfy.patcher_extension as ext

        if get_callbacks(ext.CallbacksMP.ON_PREPARE_STATE, CALLBACK_KEY):
            found.append(f"its ON_PREPARE_STATE callback {CALLBACK_KEY!r}")
    for options in (model_options, getattr(patcher, "model_options", {})):
        topts = (options or {}).get("transformer_options", {})
        if _from_node(topts.get("optimized_attention_override")):
            found.append("its attention override")
        blocks = topts.get("patches_replace", {}).get("dit", {})
        patched = sorted(k[1] for k, fn in blocks.items() if isinstance(k, tuple) and k[0] == "double_block"
                         and _from_node(fn))
        if patched:
            found.append(f"its patches on {len(patched)} double blocks")
    return tuple(dict.fromkeys(found))


def reconcile(plan: ExecutionPlan, evidence: tuple[str, ...]) -> ExecutionPlan:
    """The plan composed with a BlockSparseAttention model, or LongMediaInputError when it cannot be."""
    if not evidence:
        return plan
    seen = ", ".join(evidence)
    if not plan.chunks.is_stock:
        raise LongMediaInputError(
            "model", f"patched by {NODE} ({seen})",
            f"a model without ComfyUI's {NODE} node when LongMedia streams blocks "
            f"(memory_mode={plan.memory_mode})",
            f"{NODE} hands each block its sparse attention as the whole attention phase (qkv projection to "
            "out_proj over the whole sequence, no query-row range), which streamed blocks cannot run per query "
            f"chunk. Set memory_mode=normal to keep {NODE} on stock blocks, or remove the {NODE} node (LongMedia's "
            "attention_mode=scheduled_sol is its sparse attention for streamed blocks).")
    reason = (f"{NODE} (ComfyUI node) on the model ({seen}): composed — its block patches and attention "
              f"override run H3's attention as installed (called, not replaced); LongMedia's "
              f"{plan.attention.backend} attention not installed")
    attention = dataclasses.replace(plan.attention, backend="existing", choice=None,
                                    reasons=plan.attention.reasons + (reason,))
    return dataclasses.replace(plan, attention=attention, reasons=plan.reasons + (reason,))
