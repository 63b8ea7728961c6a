"""The `existing` backend declared for what ComfyUI runs (`HostAttention`): its exactness and working set."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .host import CUDA_ONLY, QUANTISED_COPIES, HostAttention, is_exact_function
from .registry import BackendRegistry, BackendSpec


def existing_backend_is_exact(name: str | None) -> bool:
    """Whether ComfyUI's installed attention (by function name, e.g. `attention_sage`) is exact.

    Quantised backends (sage, comfy-kitchen int8, fp8/fp4) are not; unknown (None) counts as exact,
    as ComfyUI's default backends (pytorch, flash, xformers, split, sub-quadratic) are.
    """
    return is_exact_function(name)


def _quantised_copies(*, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
    del dtype_bytes
    return heads * (query_rows + 2 * seq_len) * head_dim  # int8 q, k, v copies


def existing_spec(registry: BackendRegistry, host: HostAttention | None) -> BackendSpec:
    """The `existing` declaration for what ComfyUI runs: attention_basic materialises the scores, sage and
    kitchen's int8 quantise a copy of q/k/v per call, the CUDA-only kernels need CUDA; the rest are fused
    or size their own slices to the free memory (split, sub-quadratic)."""
    spec = registry.get("existing")
    if host is None:
        return spec
    changes: dict[str, Any] = {"exact": host.exact}
    if host.kind == "basic":
        changes["score_bytes"] = 8
    if host.kind in QUANTISED_COPIES:
        changes["workspace"] = _quantised_copies
    if host.kind in CUDA_ONLY:
        changes["cpu"] = False
    return replace(spec, **changes)
