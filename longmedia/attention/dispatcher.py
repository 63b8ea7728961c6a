"""Which attention runs: `resolve_attention` turns a mode and the job's facts into an AttentionChoice (choice.py).

Modes: `existing` (ComfyUI's installed attention, never swapped), `auto` (keeps the attention the user
chose for ComfyUI, `host_attention`, where it can run in the planned path; otherwise exact whenever the
budget allows: the fastest exact backend that fits, unstreamed or per query chunk, then exact over int8
K/V; Sol only when no exact path fits), `sol` (Sol at tau = tau_start), `scheduled_sol` (tau over
the sampler's sigma progress, see schedule.py). The Sol modes pick among backends routed by tau
(`takes_tau`); `streamed` (the caller calls attention per query chunk) rules out whole-sequence ones.

`budget_bytes_for_attention` covers what the attention path holds: K and V for the whole sequence
(of the `heads` held at once), one call's query and output rows, and whatever scores or summaries
the backend materialises (BackendSpec.working_bytes). None = no limit.

`int8_kv_storage` says whether the caller keeps K/V as int8 plus scales when a quantised-K/V backend is
chosen; only then does that backend save memory. LongMedia's streamed executor keeps K/V in the compute
dtype (the planner passes False), so there those backends are passed over, with that reason.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

import torch

from .backends import default_registry
from .choice import AttentionChoice
from .existing import existing_backend_is_exact, existing_spec
from .host import HostAttention
from .registry import BackendRegistry, BackendSpec, BackendUnavailableError, Capability
from .schedule import SolSettings, SolSettingsError
from .speeds import MeasuredSpeeds

MODES = ("auto", "existing", "sol", "scheduled_sol")
QUERY_ROW_LADDER = (16384, 8192, 4096, 2048, 1024, 512, 256, 128, 64)
"""Rows per query chunk tried, largest first, when one call over the whole sequence does not fit."""


class AttentionModeError(ValueError):
    """An attention mode or a fact handed to the dispatcher is outside its allowed range."""


def _gib(n: int | float) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class _Fit:
    spec: BackendSpec
    query_chunk_tokens: int
    working_bytes: int

    @property
    def fits(self) -> bool:
        return self.query_chunk_tokens >= 0


def _fit(spec: BackendSpec, budget: int | None, seq_len: int, heads: int, head_dim: int, dtype_bytes: int) -> _Fit:
    """The largest call that fits: the whole sequence (0), else a ladder row count; -1 = nothing fits."""
    def need(rows: int) -> int:
        return spec.working_bytes(seq_len=seq_len, heads=heads, head_dim=head_dim, dtype_bytes=dtype_bytes,
                                  query_rows=rows)
    whole = need(seq_len)
    if budget is None or whole <= budget:
        return _Fit(spec, 0, whole)
    if spec.call_shape != "query_chunks":
        return _Fit(spec, -1, whole)
    for rows in QUERY_ROW_LADDER:
        if rows < seq_len and need(rows) <= budget:
            return _Fit(spec, rows, need(rows))
    return _Fit(spec, -1, need(min(QUERY_ROW_LADDER[-1], seq_len)))


def _describe_fit(fit: _Fit, budget: int | None) -> str:
    if fit.query_chunk_tokens == 0:
        room = "" if budget is None else f" within {_gib(budget)}"
        return f"one call over the whole sequence needs {_gib(fit.working_bytes)}{room}"
    if fit.query_chunk_tokens > 0:
        return (f"streamed in query chunks of <= {fit.query_chunk_tokens} rows, "
                f"{_gib(fit.working_bytes)} within {_gib(budget or 0)}")
    if fit.spec.call_shape != "query_chunks":
        return f"one call over the whole sequence needs {_gib(fit.working_bytes)}, over {_gib(budget or 0)}"
    return f"needs {_gib(fit.working_bytes)} even at {QUERY_ROW_LADDER[-1]} query rows, over {_gib(budget or 0)}"


def _check_inputs(mode: str, seq_len: int, heads: int, head_dim: int, dtype: torch.dtype,
                  device_capability: Capability | None, budget: int | None) -> None:
    if mode not in MODES:
        raise AttentionModeError(f"attention_mode must be one of {', '.join(MODES)}, got {mode!r}")
    for name, value in (("seq_len", seq_len), ("heads", heads), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise AttentionModeError(f"{name} must be an integer >= 1, got {value!r}")
    if not isinstance(dtype, torch.dtype):
        raise AttentionModeError(f"dtype must be a torch.dtype (e.g. torch.bfloat16), got {dtype!r}")
    if device_capability is not None and (len(tuple(device_capability)) != 2
                                          or not all(isinstance(x, int) for x in device_capability)):
        raise AttentionModeError(
            f"device_capability must be (major, minor) like (9, 0), or None for CPU, got {device_capability!r}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise AttentionModeError(
            f"budget_bytes_for_attention must be an integer >= 0 (None = no limit), got {budget!r}")


@dataclass(frozen=True)
class _Facts:
    seq_len: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    capability: Capability | None
    budget: int | None
    int8_kv_storage: bool = True
    streamed: bool = False
    speeds: MeasuredSpeeds | None = None

    @property
    def dtype_bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def measured(self) -> MeasuredSpeeds | None:
        """The speed timing's timings where they were taken for this job's head_dim, dtype and length class."""
        s = self.speeds
        if s is None or not s.covers(head_dim=self.head_dim, dtype=_dtype_name(self.dtype), seq_len=self.seq_len):
            return None
        return s

    def rank(self, spec: BackendSpec) -> tuple:
        """Sort key, fastest first: float K/V before int8 K/V; timed backends by their measured seconds, then the
        untimed ones by the registry's static speed_rank."""
        seconds = None if self.measured is None else self.measured.seconds_of(spec.name)
        if seconds is None:
            return spec.quantized_kv, 1, 0.0, spec.speed_rank
        return spec.quantized_kv, 0, seconds, spec.speed_rank

    def order_note(self) -> str:
        """How the exact backends were ordered, for the reasons."""
        if self.measured is not None:
            return self.measured.summary()
        s = self.speeds
        if s is None:
            return "exact backends in the static rank (attention/backends.py): no speed timing was handed in"
        if s.refused or not s.seconds:
            return s.summary()
        return (f"exact backends in the static rank (attention/backends.py): the speed timing timed head_dim "
                f"{s.head_dim}, {s.dtype}, {s.length_class} class, not this call's")

    def fit(self, spec: BackendSpec) -> _Fit:
        return _fit(spec, self.budget, self.seq_len, self.heads, self.head_dim, self.dtype_bytes)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _usable(registry: BackendRegistry, available: frozenset[str], facts: _Facts, exact: bool
            ) -> tuple[list[BackendSpec], list[tuple[BackendSpec, str]]]:
    """Backends of the wanted exactness that are installed and support the inputs, fastest first,
    and the others with why they cannot run."""
    usable, rejected = [], []
    for spec in registry.backends:
        if spec.exact != exact or spec.name == "existing" or (not exact and not spec.takes_tau):
            continue  # approximate backends not routed by tau (kitchen_int8) are no Sol
        if spec.name not in available:
            rejected.append((spec, f"{spec.name} (not available here)"))
            continue
        if spec.quantized_kv and not facts.int8_kv_storage:
            rejected.append((spec, f"{spec.name} (saves memory only over K/V stored as int8; this caller holds K/V "
                                   f"in {facts.dtype})"))
            continue
        if spec.call_shape == "qkv_producer":
            rejected.append((spec, f"{spec.name} (a QKV producer, not an attention call)"))
            continue
        if spec.call_shape == "whole_sequence" and facts.streamed:
            rejected.append((spec, f"{spec.name} (takes whole-sequence calls only; the planned path calls "
                                   "attention per query chunk)"))
            continue
        ok, why = spec.supports(dtype=facts.dtype, head_dim=facts.head_dim, seq_len=facts.seq_len,
                                device_capability=facts.capability)
        if ok:
            usable.append(spec)
        else:
            rejected.append((spec, f"{spec.name} ({why})"))
    usable.sort(key=facts.rank)
    return usable, rejected


def _resolve_exact(registry: BackendRegistry, available: frozenset[str], facts: _Facts
                   ) -> tuple[_Fit | None, list[tuple[BackendSpec, str]], list[_Fit]]:
    """The fastest exact backend that fits (or None); every exact backend passed over, with why."""
    usable, passed = _usable(registry, available, facts, exact=True)
    tried = []
    for spec in usable:
        fit = facts.fit(spec)
        if fit.fits:
            return fit, passed, tried
        tried.append(fit)
        passed.append((spec, f"{spec.name} ({_describe_fit(fit, facts.budget)})"))
    return None, passed, tried


def _faster_than(spec: BackendSpec, passed: list[tuple[BackendSpec, str]], facts: _Facts) -> list[str]:
    return [why for other, why in sorted(passed, key=lambda p: facts.rank(p[0])) if facts.rank(other) < facts.rank(spec)]


def _all_why(passed: list[tuple[BackendSpec, str]]) -> str:
    return "; ".join(why for _, why in passed)


def _choice(mode: str, fit: _Fit, facts: _Facts, reasons: Iterable[str], **fields) -> AttentionChoice:
    fields.setdefault("exact", fit.spec.exact)
    fields.setdefault("exact_backend", fit.spec.name)
    return AttentionChoice(mode=mode, backend=fit.spec.name, reasons=tuple(reasons), seq_len=facts.seq_len,
                           query_chunk_tokens=max(fit.query_chunk_tokens, 0), working_bytes=fit.working_bytes,
                           budget_bytes=facts.budget, quantized_kv=fit.spec.quantized_kv, **fields)


def _smallest(fits: list[_Fit]) -> _Fit:
    return min(fits, key=lambda f: f.working_bytes)


def resolve_attention(mode: str = "auto", *, seq_len: int, heads: int, head_dim: int, dtype: torch.dtype,
                      device_capability: Capability | None, budget_bytes_for_attention: int | None = None,
                      available: Collection[str] | None = None, sol_settings: SolSettings | None = None,
                      registry: BackendRegistry | None = None, existing_name: str | None = None,
                      int8_kv_storage: bool = True, host_attention: HostAttention | None = None,
                      streamed: bool = False, speeds: MeasuredSpeeds | None = None) -> AttentionChoice:
    """Pick the attention path for one job.

    device_capability: CUDA (major, minor), None = CPU. available: backend names installed here
    (None = check the registry now). existing_name: ComfyUI's installed attention function's name,
    used to tell whether `existing` is exact (default: host_attention's). int8_kv_storage: the caller stores
    K/V as int8 + scales when a quantised-K/V backend is chosen (False: those backends are passed over).
    host_attention: what ComfyUI runs (None = unknown: auto picks the fastest exact backend as before).
    streamed: the caller calls attention once per query chunk (whole-sequence backends cannot serve it).
    speeds: the speed timing's timings on this device (speed_timing.py); where they cover this job's head_dim, dtype
    and length class they order the exact backends, else (None, refused, another class) the static speed_rank does.
    """
    _check_inputs(mode, seq_len, heads, head_dim, dtype, device_capability, budget_bytes_for_attention)
    registry = default_registry() if registry is None else registry
    avail = registry.available_names() if available is None else frozenset(available)
    settings = SolSettings() if sol_settings is None else sol_settings
    if not isinstance(settings, SolSettings):
        raise SolSettingsError(f"sol_settings must be a SolSettings, got {type(settings).__name__}")
    if host_attention is not None and not isinstance(host_attention, HostAttention):
        raise AttentionModeError(f"host_attention must be a HostAttention or None, got {host_attention!r}")
    if speeds is not None and not isinstance(speeds, MeasuredSpeeds):
        raise AttentionModeError(f"speeds must be a MeasuredSpeeds or None, got {speeds!r}")
    facts = _Facts(seq_len, heads, head_dim, dtype,
                   None if device_capability is None else tuple(device_capability), budget_bytes_for_attention,
                   bool(int8_kv_storage), bool(streamed), speeds)
    if existing_name is None and host_attention is not None:
        existing_name = host_attention.function

    if mode == "existing":
        fit = facts.fit(existing_spec(registry, host_attention))
        label = host_attention.label if host_attention is not None else (existing_name or
                                                                         "ComfyUI's optimized_attention")
        reasons = [f"existing: {label} runs as installed (one call per query chunk when streamed), never swapped",
                   _describe_fit(fit, facts.budget)]
        if not existing_backend_is_exact(existing_name):
            reasons.append(f"{label} quantises attention: not exact")
        return _choice(mode, fit, facts, reasons, exact=existing_backend_is_exact(existing_name), host=host_attention)

    exact_fit, passed, tried = _resolve_exact(registry, avail, facts)
    if mode == "auto":
        kept, lead = _keep_host(registry, facts, host_attention)
        if kept is not None:
            return kept
        choice = _resolve_auto(registry, avail, facts, settings, exact_fit, passed, tried)
        return replace(choice, reasons=lead + choice.reasons, host=host_attention)
    return _resolve_sol(mode, registry, avail, facts, settings, exact_fit, passed, tried)


def _keep_host(registry: BackendRegistry, facts: _Facts, host: HostAttention | None
               ) -> tuple[AttentionChoice | None, tuple[str, ...]]:
    """auto and ComfyUI's attention: (the choice keeping it, ()) where the user chose it and it can run in the
    planned path; else (None, the reason auto swaps it, which leads the swapped choice's reasons)."""
    if host is None:
        return None, ()
    if host.swappable:
        whose = "its default pick" if not host.chosen else "PyTorch attention"
        return None, (f"auto: ComfyUI runs {host.label}, {whose}: swapped for auto's own choice, below",)
    spec = existing_spec(registry, host)
    ok, why = spec.supports(dtype=facts.dtype, head_dim=facts.head_dim, seq_len=facts.seq_len,
                            device_capability=facts.capability)
    fit = facts.fit(spec) if ok else None
    if fit is None or not fit.fits:
        cannot = why if fit is None else _describe_fit(fit, facts.budget)
        return None, (f"auto: {host.label}, the attention chosen for ComfyUI, cannot run in the planned path "
                      f"({cannot}): swapped",)
    how = "called once per query chunk by the streamed executor" if facts.streamed else "as installed"
    reasons = [f"auto: keeps {host.label}, the attention chosen for ComfyUI ({how})", _describe_fit(fit, facts.budget)]
    if not host.exact:
        reasons.append(f"{host.function} quantises attention: not exact")
    return _choice("auto", fit, facts, reasons, exact=host.exact, host=host), ()


def _resolve_auto(registry: BackendRegistry, avail: frozenset[str], facts: _Facts, settings: SolSettings,
                  exact_fit: _Fit | None, passed: list[tuple[BackendSpec, str]], tried: list[_Fit]
                  ) -> AttentionChoice:
    if exact_fit is not None:
        kind = "exact over int8 K/V" if exact_fit.spec.quantized_kv else "exact"
        reasons = [f"auto: {exact_fit.spec.name} is the fastest {kind} backend that fits",
                   _describe_fit(exact_fit, facts.budget)]
        return _choice("auto", exact_fit, facts,
                       reasons + [facts.order_note()]
                       + [f"passed over {why}" for why in _faster_than(exact_fit.spec, passed, facts)])
    if not tried:
        raise BackendUnavailableError(
            f"no exact attention backend supports dtype={facts.dtype}, head_dim={facts.head_dim}, "
            f"seq_len={facts.seq_len}, device_capability={facts.capability}: {_all_why(passed)}")
    smallest = _smallest(tried)
    no_exact = (f"no exact path fits the budget: the smallest, {smallest.spec.name}, "
                f"{_describe_fit(smallest, facts.budget)}")
    sol_specs, sol_passed = _usable(registry, avail, facts, exact=False)
    sol_notes = [why for _, why in sol_passed]
    # the packed sequence always runs Sol; shorter calls (the text refiner) still run exact
    auto_sol = replace(settings, min_tokens=min(settings.min_tokens, facts.seq_len), dense_percent=0.0)
    for spec in sol_specs:
        fit = facts.fit(spec)
        if fit.fits:
            tau = settings.most_exact_tau
            reasons = [f"auto: {no_exact}", f"so Sol ({spec.name}) at fixed tau={tau:g}, the most exact of "
                       f"sol_tau_start/sol_tau_end, sinks {settings.sink_conditioning}", _describe_fit(fit, facts.budget)]
            return _choice("auto", fit, facts, reasons, exact_backend=smallest.spec.name, sol=auto_sol,
                           fixed_tau=tau)
        sol_notes.append(f"{spec.name} ({_describe_fit(fit, facts.budget)})")
    reasons = [f"auto: {no_exact}", "no Sol backend fits either" + (f" ({'; '.join(sol_notes)})" if sol_notes else ""),
               f"running {smallest.spec.name} over budget: shorten the segment, hold fewer heads at once "
               f"(ultra_low_vram head groups), or free VRAM"]
    return _choice("auto", smallest, facts, reasons)


def _resolve_sol(mode: str, registry: BackendRegistry, avail: frozenset[str], facts: _Facts, settings: SolSettings,
                 exact_fit: _Fit | None, passed: list[tuple[BackendSpec, str]], tried: list[_Fit]
                 ) -> AttentionChoice:
    if exact_fit is None and not tried:
        raise BackendUnavailableError(
            f"{mode} needs an exact backend for its exact phases; none supports dtype={facts.dtype}, "
            f"head_dim={facts.head_dim}, device_capability={facts.capability}: {_all_why(passed)}")
    exact = exact_fit if exact_fit is not None else _smallest(tried)
    exact_note = (f"exact phases run {exact.spec.name} ({_describe_fit(exact, facts.budget)}); "
                  f"{facts.order_note()}")
    if facts.seq_len < settings.min_tokens:
        reasons = [f"{mode}: seq_len {facts.seq_len} < sol_min_tokens {settings.min_tokens}: runs exact", exact_note]
        return _choice(mode, exact, facts, reasons)
    sol_specs, sol_passed = _usable(registry, avail, facts, exact=False)
    sol_notes = [why for _, why in sol_passed]
    if not sol_specs:
        reasons = [f"{mode}: no Sol backend usable here ({'; '.join(sol_notes)}): runs exact", exact_note]
        return _choice(mode, exact, facts, reasons)
    fit = facts.fit(sol_specs[0])
    head = f"{mode}: {fit.spec.name}"
    if sol_notes:
        head += f" (passed over {'; '.join(sol_notes)})"
    if mode == "sol":
        reasons = [f"{head} at fixed tau={settings.tau_start:g}"]
    else:
        reasons = [f"{head}: tau {settings.tau_start:g} -> {settings.tau_end:g} over sigma progress "
                   f"({settings.curve}), the first {settings.dense_percent:.0%} of the schedule exact"]
    reasons += [f"sinks: {settings.sink_conditioning}", f"shorter than {settings.min_tokens} tokens runs exact",
                _describe_fit(fit, facts.budget), exact_note]
    return _choice(mode, fit, facts, reasons, exact_backend=exact.spec.name, sol=settings,
                   scheduled=mode == "scheduled_sol", fixed_tau=settings.tau_start if mode == "sol" else None)


__all__ = ["MODES", "QUERY_ROW_LADDER", "AttentionModeError", "resolve_attention"]
