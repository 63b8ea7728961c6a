"""Which kind of work a profiled kernel (or, on the CPU, an op) is: ordered regex rules (bench.block_profile's table).

A name goes to the first rule that matches. A rule marked `scoped` also matches when one of the ops the kernel
ran inside matches (its `scopes`, innermost first: the op that launched it, then that op's callers, up to
bench.block_profile's attention-call annotation), so the work of a fused op counts with the op even where its
kernels carry generic names. The rules, in order:

1. attention (scoped): flash / fmha / sdpa / attention / attn / softmax, our Triton kernels (`_qstream_fwd`,
   `_sol_fwd`, `_summaries_fwd`). Scoped, and bench.block_profile runs every attention call of the streamed
   block inside ATTENTION_SCOPE, so everything an attention call launches is attention: Sol's routing
   (torch matmuls, top-k) and the copies a backend makes of its inputs included (the top kernels show them).
2. GEMM (the name only): gemm / gemv / matmul / cutlass / xmma / nvjet / cublas / wgmma, torch's `_int_mm` and
   `_scaled_mm`, and the CPU's `aten::mm`, `addmm`, `bmm`, `baddbmm`, `linear`. Names only, so that the quantising
   inside a quantised linear (next rule) is not counted as GEMM. Before the next rules, so an int8 GEMM is GEMM.
3. quantise/dequantise (scoped): quantiz- / quantis- / dequant, int8, fp8 / float8 / e4m3 / e5m2 casts, and
   comfy-kitchen's int8 linear (`comfy_kitchen::int8_linear` and kin): what a quantised linear does besides its
   GEMM (the activations' absmax, scaling and rounding; the output's rescale) is quantise/dequantise.
4. rope (scoped): rope / rotary. comfy-kitchen's fused q/k RMSNorm + RoPE (`rms_rope_split_half_`) is rope.
5. norms & modulation (scoped): norm / rms, modulat-, gate, SiLU / SwiGLU / sigmoid / GELU (the MLP's activation
   counts here), and the elementwise arithmetic the block's adaLN modulation, gates and residuals are made of:
   torch's add / sub / mul / div / addcmul / rsqrt / pow / mean, on the GPU their functors (`CUDAFunctor_add`,
   `MulFunctor`, `BinaryFunctor`), and Inductor's fused Triton kernels that name such an op
   (`triton_poi_fused_add_mul_0`).
6. copies/casts (scoped): memcpy / memset / copy / cast (not torch's `..._nocast` kernel template, which every
   elementwise kernel is built on, nor broadcast), `aten::to` / `_to_copy` / `contiguous` / `clone` / `cat` /
   `stack`, fills and zeros (writes of memory with no arithmetic).
7. other: everything else (views and allocations on the CPU, reductions and sorts outside the scopes above).

On the GPU the kernels carry their own names (comfy-kitchen's `quantize_int8_rowwise_kernel`, its `rope_kernel`,
cuBLAS and CUTLASS GEMMs). On the CPU an op's name is all there is: comfy-kitchen's eager int8 linear called
directly (the streamed block does; stock's goes through the `comfy_kitchen::int8_linear` op) runs plain torch ops
outside any named op, so its quantising lands in norms & modulation and other there. The CPU table proves the
script, not where the GPU's time goes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

CATEGORIES = ("attention", "gemm", "quantise", "rope", "norms_modulation", "copies", "other")
LABELS = {"attention": "attention", "gemm": "GEMM", "quantise": "quantise/dequantise", "rope": "rope",
          "norms_modulation": "norms & modulation", "copies": "copies/casts", "other": "other"}
ATTENTION_SCOPE = "block_profile: attention call"
"""The record_function bench.block_profile wraps each attention call of the streamed block in (rule 1 matches it)."""


@dataclass(frozen=True)
class Rule:
    """One category's pattern (case-insensitive `re.search`); `scoped`: the enclosing ops' names count too."""

    category: str
    pattern: re.Pattern
    scoped: bool


def _rule(category: str, pattern: str, scoped: bool = True) -> Rule:
    return Rule(category, re.compile(pattern, re.IGNORECASE), scoped)


RULES = (
    _rule("attention", r"flash|fmha|sdpa|scaled_dot_product|attention|attn|softmax|_qstream_fwd|_sol_fwd"
                       r"|_summaries_fwd"),
    _rule("gemm", r"gemm|gemv|matmul|cutlass|xmma|nvjet|cublas|wgmma|_int_mm|_scaled_mm"
                  r"|aten::(?:(?:add|b|baddb)?mm|linear)$",
          scoped=False),
    _rule("quantise", r"quantiz|quantis|dequant|int8|fp8|float8|e4m3|e5m2"),
    _rule("rope", r"(?<![a-z])rope|rotary"),
    _rule("norms_modulation", r"norm|rms|modulat|(?<![a-z])gate|silu|swiglu|sigmoid|gelu|addcmul|rsqrt"
                              r"|functor(?:onself)?_(?:add|sub|mul|div)|(?:add|sub|mul|div|binary)functor"
                              r"|aten::(?:add|sub|mul|div|pow|mean)_?$"
                              r"|triton_\w*fused\w*_(?:add|sub|mul|div|rsqrt|mean|pow|silu|sigmoid)"),
    _rule("copies", r"memcpy|memset|copy|(?<!no)(?<!broad)cast|catarray|fill_kernel|fillfunctor"
                    r"|aten::(?:to|_to_copy|contiguous|clone|cat|stack|fill_|zero_)$"),
)


def category_of(name: str, scopes: Sequence[str] = ()) -> str:
    """The category of kernel (or op) `name` run inside `scopes` (innermost first): the first rule that matches."""
    for rule in RULES:
        if rule.pattern.search(name) or (rule.scoped and any(rule.pattern.search(s) for s in scopes)):
            return rule.category
    return "other"


__all__ = ["ATTENTION_SCOPE", "CATEGORIES", "LABELS", "RULES", "Rule", "category_of"]
