"""The ComfyUI side of the dispatcher: an `optimized_attention_override` and ComfyUI's attention as an AttentionFn.

ComfyUI's `wrap_attn` calls `transformer_options["optimized_attention_override"]` as
`override(func, q, k, v, heads, mask=None, skip_reshape=..., skip_output_reshape=...,
transformer_options=..., **kwargs)`, or, when H3 hands in AttentionTensorContainers and the
override has one, `override.container_function(q, k, v, heads, ...)` with the containers and no
`func`. Both are handled; ComfyUI versions without containers work too. comfy is imported lazily.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ...attention.backends import default_registry
from ...attention.choice import AttentionChoice, build_attention_fn
from ...attention.protocol import AttentionFn
from ...attention.registry import BackendRegistry
from ...attention.schedule import sigma_progress

OVERRIDE_KEY = "optimized_attention_override"
ROW_SPANS_KEY = "longmedia_row_spans"
LAYOUT_KEY = "minimax_h3_layout"  # ComfyUI 0.38+: the current call's PackedLayout, published by the model
PREFERRED_KEY = "longmedia_preferred_attention"
"""transformer_options key (one block call's copy only) for the block's ComfyAttention (ComfyUI 0.38+: a
checkpoint's attention config, e.g. comfy_kitchen_int8), handed on as `preferred_attention=` exactly as H3's
Attention.forward does."""


def host_layout_row_spans(options: Mapping[str, Any] | None, seq_len: int | None = None) -> tuple | None:
    """The packed row-span table ComfyUI publishes for this call (transformer_options[LAYOUT_KEY]), or None.

    Absent on ComfyUI before 0.38 and outside H3; a layout for another sequence length is not used.
    """
    row_spans = getattr((options or {}).get(LAYOUT_KEY), "segments", None)
    if not row_spans:
        return None
    table = tuple((int(a), int(b), str(kind)) for a, b, kind in row_spans)
    if seq_len is not None and table[-1][1] != seq_len:
        return None
    return table
"""transformer_options key for H3's packed row-span table ((start, stop, kind), ...): store a tuple
(ComfyUI's option merging extends lists)."""


DETECT = object()
"""Default of `existing_attention_fn(container=...)`: use ComfyUI's AttentionTensorContainer if it has one."""


class SolRowSpansWarning(UserWarning):
    """Sol with sinks was asked for but H3's row spans are unknown, so attention ran exact."""


def _attention_module():
    import comfy.ldm.modules.attention as attention  # lazy: longmedia never imports comfy at module level
    return attention


def installed_attention() -> Callable[..., torch.Tensor]:
    """The optimized_attention H3 calls: the minimax model module's binding when it is loaded."""
    h3 = sys.modules.get("comfy.ldm.minimax.model")
    bound = getattr(h3, "optimized_attention", None) if h3 is not None else None
    return bound if bound is not None else _attention_module().optimized_attention


def _container_type() -> type | None:
    return getattr(_attention_module(), "AttentionTensorContainer", None)


def _options_without(options: Mapping[str, Any] | None, override: object) -> dict[str, Any] | None:
    """A shallow copy of transformer_options with `override` replaced by what it wrapped (or removed)."""
    if options is None or options.get(OVERRIDE_KEY) is not override:
        return options if options is None else dict(options)
    copy = dict(options)
    previous = getattr(override, "previous", None)
    if previous is None:
        del copy[OVERRIDE_KEY]
    else:
        copy[OVERRIDE_KEY] = previous
    return copy


def _options_for_existing(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    current = None if options is None else options.get(OVERRIDE_KEY)
    if isinstance(current, LongMediaAttentionOverride):
        return _options_without(options, current)
    return options if options is None else dict(options)


def existing_attention_fn(transformer_options: Mapping[str, Any] | None, heads: int,
                          attention: Callable[..., torch.Tensor] | None = None,
                          container: type | None | object = DETECT) -> AttentionFn:
    """ComfyUI's installed attention as an AttentionFn: one `optimized_attention(q, k, v, heads,
    mask=None, skip_reshape=True, transformer_options=...)` call per query chunk, with q/k/v in
    AttentionTensorContainers where this ComfyUI has them, exactly as H3 calls it. A foreign override
    in transformer_options is honoured; ours is bypassed (it would route back here).
    heads: the model's head count; each call passes q's own head count (head groups hand in fewer).
    The block's ComfyAttention (options[PREFERRED_KEY], ComfyUI 0.38+) goes on as `preferred_attention=`.
    attention / container: injectable for tests (default: ComfyUI's, detected)."""
    fn = installed_attention() if attention is None else attention
    container = _container_type() if container is DETECT else container
    options = _options_for_existing(transformer_options)
    preferred = options.pop(PREFERRED_KEY, None) if options is not None else None
    extra = {} if preferred is None else {"preferred_attention": preferred}

    def existing(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
        del q_offset  # ComfyUI's backends do not take positions
        n_heads = q.shape[1]  # head groups hand in fewer heads than the model has: count them from q
        if container is not None:
            q, k, v = container(q), container(k), container(v)
        return fn(q, k, v, n_heads, mask=None, skip_reshape=True, transformer_options=options, **extra)
    return existing


def progress_from_options(transformer_options: Mapping[str, Any] | None) -> float | None:
    """Sigma progress in [0, 1] from ComfyUI's `sigmas` (current) and `sample_sigmas` (schedule); None if absent."""
    if not transformer_options:
        return None
    sigma, schedule = transformer_options.get("sigmas"), transformer_options.get("sample_sigmas")
    if sigma is None or schedule is None:
        return None
    return sigma_progress(sigma, schedule)


def _merge_text_runs(table: tuple) -> tuple:
    """Adjacent text rows as one row span: a table may split the text into runs (text_token_tags)."""
    out: list = []
    for a, b, kind in table:
        if out and kind == "text" and out[-1][2] == "text" and out[-1][1] == a:
            out[-1] = (out[-1][0], b, "text")
        else:
            out.append((a, b, kind))
    return tuple(out)


def _row_spans_for(seq_len: int, row_spans: Iterable[tuple[int, int, str]] | None) -> tuple | None:
    """The row spans of this call's packed sequence, else None (e.g. the text refiner's call).

    A table made for another prompt length (cond vs uncond) is shifted: only the leading text
    row span differs between them, everything after it moves by the difference.
    """
    if row_spans is None:
        return None
    table = _merge_text_runs(tuple((int(a), int(b), str(kind)) for a, b, kind in row_spans))
    if not table:
        return None
    delta = seq_len - table[-1][1]
    if delta == 0:
        return table
    text_rows = table[0][1] - table[0][0] + delta
    if table[0][2] != "text" or table[0][0] != 0 or text_rows < 1:
        return None
    return ((0, text_rows, "text"),) + tuple((a + delta, b + delta, kind) for a, b, kind in table[1:])


@dataclass(frozen=True)
class LongMediaAttentionOverride:
    """Routes H3's unstreamed attention calls to the resolved backend; anything else passes through.

    Routed: mask None, skip_reshape=True, batch 1, no GQA. Passed through (to `previous`, the override
    installed before ours, or ComfyUI's installed attention): every other call, and calls whose
    backend is `existing`. Sol needs the packed row-span table unless its sinks are off: the call's own
    (transformer_options[ROW_SPANS_KEY]) first, else the override's, shifted to the call's length;
    without one the call runs the exact backend and warns once.
    """

    choice: AttentionChoice
    previous: Callable[..., torch.Tensor] | None = None
    row_spans: tuple[tuple[int, int, str], ...] | None = None
    registry: BackendRegistry | None = None

    def __call__(self, func: Callable[..., torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._route(func, args, kwargs)

    def container_function(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """wrap_attn's container entry point: q, k, v arrive as AttentionTensorContainers, no func."""
        return self._route(None, args, kwargs)

    def _pass_through(self, func: Callable[..., torch.Tensor] | None, args: tuple, kwargs: dict) -> torch.Tensor:
        if func is not None:  # wrap_attn already took the tensors out of their containers
            if self.previous is not None:
                return self.previous(func, *args, **kwargs)
            return func(*args, **kwargs)
        if self.previous is not None and hasattr(self.previous, "container_function"):
            return self.previous.container_function(*args, **kwargs)
        installed = installed_attention()
        if self.previous is not None:
            tensors = tuple(_take(a) for a in args[:3])
            return self.previous(getattr(installed, "__wrapped__", installed), *tensors, *args[3:], **kwargs)
        # hand the containers to ComfyUI's own attention (and its container path), minus our override
        options = _options_without(kwargs.get("transformer_options"), self)
        return installed(*args, **{**kwargs, "transformer_options": options})

    def _route(self, func: Callable[..., torch.Tensor] | None, args: tuple, kwargs: dict) -> torch.Tensor:
        if len(args) < 4 or not _routable(args, kwargs):
            return self._pass_through(func, args, kwargs)
        q_peek, k_peek = _peek(args[0]), _peek(args[1])
        heads = int(args[3])
        seq_len = k_peek.shape[2]
        if q_peek.dim() != 4 or q_peek.shape[0] != 1 or q_peek.shape[1] != heads:
            return self._pass_through(func, args, kwargs)
        options = kwargs.get("transformer_options")
        progress = progress_from_options(options) if self.choice.scheduled else None
        tau = self.choice.tau_at(progress, seq_len)
        backend = self.choice.exact_backend if tau is None else self.choice.backend
        row_spans = None
        if tau is not None and self.choice.sol is not None and self.choice.sol.sinks_keys:
            given = host_layout_row_spans(options, seq_len)   # the host's published layout (0.38+) first,
            if given is None:                                 # then this call's own table, then the install's
                given = (options or {}).get(ROW_SPANS_KEY) or self.row_spans
            row_spans = _row_spans_for(seq_len, given)
            if row_spans is None:
                warnings.warn(SolRowSpansWarning(
                    f"Sol with sol_sink_conditioning={self.choice.sol.sink_conditioning!r} needs H3's packed "
                    f"row spans for this {seq_len}-token call (transformer_options[{ROW_SPANS_KEY!r}] or "
                    f"the override's row_spans); ran {self.choice.exact_backend} exact instead"), stacklevel=2)
                backend, tau = self.choice.exact_backend, None
        if backend == "existing":
            return self._pass_through(func, args, kwargs)
        q, k, v = (_take(a) for a in args[:3])
        fn = build_attention_fn(self.choice, progress=progress, seq_len=seq_len, row_spans=row_spans,
                                sm_scale=kwargs.get("scale"), force_exact=tau is None,
                                registry=self.registry if self.registry is not None else default_registry())
        out = fn(q, k, v, q_offset=0)
        if kwargs.get("skip_output_reshape", False):
            b, rows, _ = out.shape
            out = out.view(b, rows, heads, -1).transpose(1, 2)
        return out


def _peek(x: Any) -> torch.Tensor:
    return x.peek() if hasattr(x, "peek") and not isinstance(x, torch.Tensor) else x


def _take(x: Any) -> torch.Tensor:
    return x.take() if hasattr(x, "take") and not isinstance(x, torch.Tensor) else x


def _routable(args: tuple, kwargs: dict) -> bool:
    return (len(args) == 4 and kwargs.get("mask") is None and kwargs.get("skip_reshape", False)
            and not kwargs.get("enable_gqa", False))


def install_attention_override(transformer_options: dict[str, Any], choice: AttentionChoice, *,
                               row_spans: Iterable[tuple[int, int, str]] | None = None,
                               registry: BackendRegistry | None = None) -> LongMediaAttentionOverride:
    """Put our override into `transformer_options` (e.g. a cloned ModelPatcher's model_options["transformer_options"]).

    An override installed before ours is kept as `previous` and receives every call we pass through;
    re-installing replaces our earlier override instead of stacking on it.
    """
    previous = transformer_options.get(OVERRIDE_KEY)
    if isinstance(previous, LongMediaAttentionOverride):
        previous = previous.previous
    table = None if row_spans is None else tuple(tuple(row) for row in row_spans)
    override = LongMediaAttentionOverride(choice, previous=previous, row_spans=table,
                                          registry=default_registry() if registry is None else registry)
    transformer_options[OVERRIDE_KEY] = override
    return override
