"""The resolved attention path and what a caller does with it: `AttentionChoice` (what the dispatcher,
dispatcher.py, returns), `build_attention_fn` (the AttentionFn for one sampler step), `call_extra_bytes` (the
bytes one call of the chosen path allocates beyond the caller's q/k/v/out, for the planner) and `call_held_bytes`
(the part of those the AttentionFn keeps until it is dropped: Sol's key summaries).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from .backends import default_registry
from .existing import existing_spec
from .host import HostAttention
from .protocol import AttentionFn
from .registry import BackendRegistry, BuildContext
from .schedule import SolSettings, SolSettingsError, sink_ranges_from_row_spans, tau_at


@dataclass(frozen=True)
class AttentionChoice:
    """The resolved attention path.

    backend: what runs (a Sol backend for Sol choices). exact_backend: what runs where the Sol
    schedule says exact (dense phase, short sequences); equals `backend` for exact choices.
    query_chunk_tokens: 0 = one call over the whole sequence fits the budget, else the most query
    rows per call that fit. working_bytes: the attention bytes predicted at that size.
    sol / scheduled / fixed_tau: the Sol settings, whether tau follows the schedule, and the fixed tau.
    host: what ComfyUI runs, when the caller said (sizes `existing`'s working set).
    """

    mode: str
    backend: str
    exact: bool
    exact_backend: str
    reasons: tuple[str, ...]
    seq_len: int
    query_chunk_tokens: int
    working_bytes: int
    budget_bytes: int | None
    quantized_kv: bool = False
    sol: SolSettings | None = None
    scheduled: bool = False
    fixed_tau: float | None = None
    host: HostAttention | None = None

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    @property
    def uses_sol(self) -> bool:
        return self.sol is not None

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.working_bytes <= self.budget_bytes

    @property
    def streams_queries(self) -> bool:
        return self.query_chunk_tokens > 0

    def tau_at(self, progress: float | None, seq_len: int | None = None) -> float | None:
        """Sol's tau at sigma progress in [0, 1] for a call over `seq_len` keys; None = run exact_backend."""
        if self.sol is None:
            return None
        if seq_len is not None and seq_len < self.sol.min_tokens:
            return None
        if self.scheduled:
            return tau_at(progress, self.sol)
        return self.fixed_tau


def call_extra_bytes(choice: AttentionChoice, *, query_rows: int, heads: int, head_dim: int, dtype: torch.dtype,
                     registry: BackendRegistry | None = None) -> int:
    """Bytes one call of the chosen path over `query_rows` queries allocates beyond the caller's q/k/v/out
    (scores, Sol's summaries/lists/mask/proxies): the larger of its Sol and exact backends'. The executor's
    query chunk, not the dispatcher's, sets `query_rows`; the planner adds this to the attention stage."""
    registry = default_registry() if registry is None else registry
    names = {choice.backend, choice.exact_backend} & set(registry.names)
    spec = {n: existing_spec(registry, choice.host) if n == "existing" else registry.get(n) for n in names}
    return max((spec[n].extra_bytes(seq_len=choice.seq_len, heads=heads, head_dim=head_dim,
                                            dtype_bytes=dtype.itemsize, query_rows=query_rows) for n in names),
               default=0)


def call_held_bytes(choice: AttentionChoice, *, heads: int, head_dim: int, dtype: torch.dtype,
                    registry: BackendRegistry | None = None) -> int:
    """Bytes the chosen path's AttentionFn keeps after its calls return (Sol's key summaries, memoised per K/V),
    the larger of its Sol and exact backends'. The executor builds one AttentionFn per block call and drops it
    when the block returns, so these are live in the block's MLP phase too; the planner adds them there."""
    registry = default_registry() if registry is None else registry
    names = {choice.backend, choice.exact_backend} & set(registry.names)
    return max((registry.get(n).held_bytes(seq_len=choice.seq_len, heads=heads, head_dim=head_dim,
                                           dtype_bytes=dtype.itemsize) for n in names),
               default=0)


def build_attention_fn(choice: AttentionChoice, *, progress: float | None = None, seq_len: int | None = None,
                       row_spans: Iterable[tuple[int, int, str]] | None = None, existing: AttentionFn | None = None,
                       sm_scale: float | None = None, registry: BackendRegistry | None = None,
                       force_exact: bool = False) -> AttentionFn:
    """The AttentionFn for one sampler step (Sol's tau depends on `progress`, see AttentionChoice.tau_at).

    seq_len: keys of the calls it will serve (default: the choice's). row_spans: H3's packed row-span
    table, needed when the choice runs Sol with sinks on. existing: ComfyUI's attention as an
    AttentionFn (longmedia.comfy.patching.attention_override.existing_attention_fn), for `existing`. force_exact: run exact_backend.
    """
    registry = default_registry() if registry is None else registry
    tau = None if force_exact else choice.tau_at(progress, choice.seq_len if seq_len is None else seq_len)
    if tau is None:
        return registry.build(choice.exact_backend, BuildContext(existing=existing, sm_scale=sm_scale))
    sinks: tuple[tuple[int, int], ...] = ()
    if choice.sol is not None and choice.sol.sinks_keys:
        if row_spans is None:
            raise SolSettingsError(
                f"sol_sink_conditioning={choice.sol.sink_conditioning!r} needs H3's packed row-span table "
                f"(row_spans=[(start, stop, kind), ...]); pass it, or set sol_sink_conditioning='off'")
        sinks = sink_ranges_from_row_spans(row_spans)
    rows = sinks if choice.sol is not None and choice.sol.sinks_rows else ()
    return registry.build(choice.backend, BuildContext(tau=tau, sink_ranges=sinks, exact_query_ranges=rows,
                                                       sm_scale=sm_scale))


__all__ = ["AttentionChoice", "build_attention_fn", "call_extra_bytes", "call_held_bytes"]
