"""Attention backends as declarations: what each supports, what it costs in memory, how to build it.

In the manner of comfy-kitchen's backend registry, but immutable: a `BackendRegistry` is a frozen
tuple of `BackendSpec`s; tests and callers derive new registries (`with_backends`, `without`)
instead of mutating a shared one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

import torch

from .protocol import AttentionFn

Capability = tuple[int, int]
CALL_SHAPES = ("query_chunks", "whole_sequence", "qkv_producer")


class AttentionBackendError(RuntimeError):
    """An attention backend cannot be built or run."""


class UnknownBackendError(ValueError):
    """A backend name is not in the registry."""


class BackendUnavailableError(AttentionBackendError):
    """A backend is declared but not usable here (missing package, kernel or input)."""


@dataclass(frozen=True)
class BuildContext:
    """What a backend factory may need beyond its declaration.

    existing: ComfyUI's installed attention as an AttentionFn (the `existing` backend only).
    tau: Sol's routing threshold (Sol backends only). sink_ranges / exact_query_ranges: packed
    ranges [start, stop) whose keys / query rows Sol keeps exact. sm_scale: None = 1/sqrt(head_dim).
    topk_ratio: kitchen's Sol only: > 0 keeps that fraction of key blocks per query block (SLA top-k)
    instead of routing by tau.
    """

    existing: AttentionFn | None = None
    tau: float | None = None
    sink_ranges: tuple[tuple[int, int], ...] = ()
    exact_query_ranges: tuple[tuple[int, int], ...] = ()
    sm_scale: float | None = None
    topk_ratio: float = 0.0


def always_available() -> tuple[bool, str]:
    return True, "pure torch"


@dataclass(frozen=True)
class BackendSpec:
    """One attention backend.

    dtypes: compute dtypes of q (and of k/v unless `quantized_kv`). head_dims: allowed head sizes
    (empty = any). cpu: runs on CPU; min_capability: lowest CUDA compute capability (None = no CUDA).
    max_tokens: longest key sequence (None = no limit). kv_element_bytes: bytes per K/V element held
    (None = the compute dtype's size); kv_scale_bytes: extra bytes per (token, head) of each of K and V.
    score_bytes: bytes materialised per (head, query, key): 0 for fused kernels. workspace(seq_len=,
    heads=, head_dim=, dtype_bytes=, query_rows=): bytes one call allocates besides q/k/v/out and the
    scores (Sol's summaries, lists, mask and proxies; None = nothing). held(seq_len=, heads=, head_dim=,
    dtype_bytes=): the part of that workspace the AttentionFn keeps after its calls return, until the AttentionFn
    itself is dropped (Sol's key summaries, memoised per K/V; the executor drops it when the block call returns,
    so they are live in the block's MLP phase too; None = nothing). speed_rank: lower is faster (ties
    keep declaration order). availability: (installed?, why) on this machine. factory: builds the AttentionFn.
    max_head_dim: largest head size (None = no limit; head_dims, when given, lists the allowed ones).
    takes_tau: approximate and routed by Sol's tau (what the Sol modes pick from).
    call_shape: "query_chunks" (any query rows against all keys: what the streamed executor calls),
    "whole_sequence" (q rows must equal the keys: one call over the whole sequence only) or "qkv_producer"
    (not an attention call: it needs the block's own projections, so no AttentionFn of ours can run it).
    requires: the package (and version) it needs beyond torch, for reports. rel_l2_bound: approximate
    backends only, the relative L2 error against exact attention the declaration promises at its default
    settings (int8 quantisation; Sol at tau <= 1) on H3-like inputs. max_capability: the highest CUDA compute
    capability its kernels are built for (None = no upper bound; flash-attn-4 stops at 11.x).
    """

    name: str
    exact: bool
    dtypes: frozenset[torch.dtype]
    factory: Callable[[BuildContext], AttentionFn]
    head_dims: tuple[int, ...] = ()
    cpu: bool = False
    min_capability: Capability | None = (8, 0)
    max_tokens: int | None = None
    kv_element_bytes: float | None = None
    kv_scale_bytes: int = 0
    score_bytes: int = 0
    workspace: Callable[..., int] | None = None
    held: Callable[..., int] | None = None
    speed_rank: int = 100
    availability: Callable[[], tuple[bool, str]] = always_available
    description: str = ""
    max_head_dim: int | None = None
    takes_tau: bool = False
    call_shape: str = "query_chunks"
    requires: str = ""
    rel_l2_bound: float | None = None
    max_capability: Capability | None = None

    def __post_init__(self) -> None:
        if self.call_shape not in CALL_SHAPES:
            raise ValueError(f"call_shape must be one of {', '.join(CALL_SHAPES)}, got {self.call_shape!r}")

    @property
    def quantized_kv(self) -> bool:
        return self.kv_element_bytes is not None and self.kv_element_bytes < 2

    def supports(self, *, dtype: torch.dtype, head_dim: int, seq_len: int,
                 device_capability: Capability | None) -> tuple[bool, str]:
        """Whether the declaration covers these inputs, and why not if it does not."""
        if dtype not in self.dtypes:
            names = ", ".join(sorted(str(d).removeprefix("torch.") for d in self.dtypes))
            return False, f"takes {names}, not {str(dtype).removeprefix('torch.')}"
        if self.head_dims and head_dim not in self.head_dims:
            return False, f"takes head_dim in {self.head_dims}, not {head_dim}"
        if self.max_head_dim is not None and head_dim > self.max_head_dim:
            return False, f"takes head_dim <= {self.max_head_dim}, not {head_dim}"
        if self.max_tokens is not None and seq_len > self.max_tokens:
            return False, f"takes at most {self.max_tokens} tokens, not {seq_len}"
        if device_capability is None:
            if not self.cpu:
                return False, "needs a CUDA device"
        elif self.min_capability is None:
            return False, "runs on CPU only"
        elif tuple(device_capability) < self.min_capability:
            want = ".".join(map(str, self.min_capability))
            have = ".".join(map(str, device_capability))
            return False, f"needs compute capability >= {want}, the device has {have}"
        elif self.max_capability is not None and tuple(device_capability) > self.max_capability:
            top = ".".join(map(str, self.max_capability))
            have = ".".join(map(str, device_capability))
            return False, f"runs up to compute capability {top}, the device has {have}"
        return True, "supported"

    def kv_bytes_per_token_head(self, head_dim: int, dtype_bytes: int) -> float:
        """Bytes of K and V together for one token of one head (512 for bf16 at head_dim 128)."""
        element = dtype_bytes if self.kv_element_bytes is None else self.kv_element_bytes
        return 2 * (head_dim * element + self.kv_scale_bytes)

    def extra_bytes(self, *, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
        """Bytes one call over `query_rows` queries allocates beyond the caller's q/k/v/out: the score
        matrix it materialises and its workspace. What the planner adds to the block's attention stage."""
        rows = min(query_rows, seq_len)
        scores = heads * rows * seq_len * self.score_bytes
        work = 0 if self.workspace is None else self.workspace(seq_len=seq_len, heads=heads, head_dim=head_dim,
                                                                dtype_bytes=dtype_bytes, query_rows=rows)
        return int(scores + work)

    def held_bytes(self, *, seq_len: int, heads: int, head_dim: int, dtype_bytes: int) -> int:
        """Bytes the AttentionFn keeps between and after its calls (part of `extra_bytes` while a call runs): what
        the planner adds to the block's MLP phase, which runs before the block call returns."""
        return 0 if self.held is None else int(self.held(seq_len=seq_len, heads=heads, head_dim=head_dim,
                                                         dtype_bytes=dtype_bytes))

    def working_bytes(self, *, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
        """Bytes the attention path holds for one call over `query_rows` queries against `seq_len` keys:
        K and V for the whole sequence, the call's query and output rows, and `extra_bytes`."""
        rows = min(query_rows, seq_len)
        kv = seq_len * heads * self.kv_bytes_per_token_head(head_dim, dtype_bytes)
        q_and_out = 2 * rows * heads * head_dim * dtype_bytes
        return int(kv + q_and_out) + self.extra_bytes(seq_len=seq_len, heads=heads, head_dim=head_dim,
                                                      dtype_bytes=dtype_bytes, query_rows=rows)


@dataclass(frozen=True)
class Availability:
    name: str
    available: bool
    reason: str


@dataclass(frozen=True)
class BackendRegistry:
    """An ordered, immutable set of backend declarations."""

    backends: tuple[BackendSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique in a registry, got duplicates {duplicates}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.backends)

    def get(self, name: str) -> BackendSpec:
        for spec in self.backends:
            if spec.name == name:
                return spec
        raise UnknownBackendError(f"attention backend {name!r} is not registered; known: {', '.join(self.names)}")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def with_backends(self, *specs: BackendSpec) -> BackendRegistry:
        """A registry with `specs` added, or replacing same-named declarations in place."""
        new = {s.name: s for s in specs}
        kept = tuple(new.pop(b.name, b) for b in self.backends)
        return BackendRegistry(kept + tuple(new.values()))

    def without(self, *names: str) -> BackendRegistry:
        for name in names:
            self.get(name)
        return BackendRegistry(tuple(b for b in self.backends if b.name not in names))

    def replace(self, name: str, **changes: object) -> BackendRegistry:
        """A registry whose `name` declaration has `changes` applied (e.g. a fake availability check in tests)."""
        return self.with_backends(replace(self.get(name), **changes))

    def check_availability(self, names: Collection[str] | None = None) -> tuple[Availability, ...]:
        """Run each backend's availability check (software only: packages and kernels installed)."""
        results = []
        for spec in self.backends:
            if names is not None and spec.name not in names:
                continue
            ok, reason = spec.availability()
            results.append(Availability(spec.name, bool(ok), str(reason)))
        return tuple(results)

    def available_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.check_availability() if r.available)

    def build(self, name: str, context: BuildContext = BuildContext()) -> AttentionFn:
        """The AttentionFn of backend `name`; raises BackendUnavailableError when its availability check fails."""
        spec = self.get(name)
        ok, reason = spec.availability()
        if not ok:
            raise BackendUnavailableError(f"attention backend {name!r} is unavailable here: {reason}")
        return spec.factory(context)
