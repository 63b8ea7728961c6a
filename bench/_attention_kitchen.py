"""bench/attention.py's comfy-kitchen rows (int8_attention, sol_attn at several taus and SLA top-k ratios), the
"matched accuracy" comparison, and the JSON rows it writes as it goes. Kitchen runs through LongMedia's
registry backends (longmedia/attention/kitchen.py), so the bench times what the dispatcher would build."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from longmedia.attention import kitchen
from longmedia.attention.registry import BuildContext

KITCHEN_PREFIX = "kitchen "
OURS_PREFIXES = ("triton exact", "triton sol", "torch reference exact", "torch reference sol")


def status(device: torch.device) -> tuple[bool, str]:
    """(run kitchen rows?, why): on CUDA the registry's probe; on CPU (--smoke) kitchen's eager sol_attn only."""
    if device.type == "cuda":
        ok, why = kitchen.kitchen_availability("sol_attn", "sol_attn_is_available")()
        ok8, why8 = kitchen.kitchen_availability("int8_attention", "int8_attention_is_available")()
        return ok and ok8, why if not ok else why8
    have = kitchen.installed_version()
    if have is None or have < kitchen.MIN_VERSION:
        return False, f"comfy-kitchen {'.'.join(map(str, have)) if have else 'not installed'} (needs {kitchen.REQUIRES})"
    return True, f"comfy-kitchen {'.'.join(map(str, have))} eager sol_attn on CPU (int8_attention is CUDA-only)"


def _unmerged(fn: Callable[[], torch.Tensor], heads: int) -> Callable[[], torch.Tensor]:
    """The registry's AttentionFns return [1, S, H*D]; the bench compares [1, H, S, D] views of it."""
    def call() -> torch.Tensor:
        out = fn()
        b, s, _ = out.shape
        return out.view(b, s, heads, -1).transpose(1, 2)
    return call


def _spec(name: str):
    """A comfy-kitchen backend's declaration (its factory builds the call), by its registry name."""
    return next(s for s in kitchen.kitchen_backends() if s.name == name)


def methods(device: torch.device, q, k, v, text: int, taus: tuple[float, ...], topks: tuple[float, ...]
            ) -> list[tuple[str, Callable[[], torch.Tensor], str]]:
    """(name, call, note) for kitchen's kernels; Sol keeps the text rows exact as keys and queries, like ours."""
    heads, seq = q.shape[1], k.shape[2]
    sinks = ((0, text),) if text else ()
    out = []
    if device.type == "cuda":
        int8 = _spec("kitchen_int8").factory(BuildContext())
        out.append((f"{KITCHEN_PREFIX}int8_attention", _unmerged(lambda: int8(q, k, v, q_offset=0), heads),
                    "INT8 Q/K/V and P"))
    declared = kitchen.sol_workspace(seq_len=seq, heads=heads, head_dim=q.shape[-1], dtype_bytes=2, query_rows=seq)
    out_bytes = q.numel() * q.element_size()
    note = f"declared extra {(declared + out_bytes) / 2**30:.2f} GiB incl. output"
    for label, ctx in ([(f"tau={t}", BuildContext(tau=t, sink_ranges=sinks, exact_query_ranges=sinks)) for t in taus]
                       + [(f"top-k {r}", BuildContext(topk_ratio=r, sink_ranges=sinks, exact_query_ranges=sinks))
                          for r in topks]):
        fn = _spec("kitchen_sol").factory(ctx)
        out.append((f"{KITCHEN_PREFIX}sol_attn {label}", _unmerged(lambda fn=fn: fn(q, k, v, q_offset=0), heads), note))
    return out


def _fastest(rows, bound: float):
    good = [r for r in rows if r.rel_l2 <= bound]
    return min(good, key=lambda r: r.ms) if good else None


def matched_accuracy(rows) -> list[str]:
    """For each kitchen row: our fastest Sol tau (of the --taus sweep) with rel-L2 <= kitchen's, and the fastest
    exact path auto would run (our exact kernel or an SDPA row), each with its speed ratio over kitchen; said
    plainly when no tau of ours is that accurate."""
    lines = []
    for seq in sorted({r.seq for r in rows}):
        timed = [r for r in rows if r.seq == seq and r.ms is not None and r.rel_l2 is not None]
        sol = [r for r in timed if r.method.startswith(OURS_PREFIXES) and " sol " in r.method]
        exact = [r for r in timed if (r.method.startswith(OURS_PREFIXES) and " exact" in r.method
                                      and "int8 K/V" not in r.method) or r.method.startswith("sdpa")]
        for theirs in (r for r in timed if r.method.startswith(KITCHEN_PREFIX)):
            parts = [f"S={seq}: {theirs.method} {theirs.ms:.1f} ms at rel-L2 {theirs.rel_l2:.3g}"]
            for kind, pool in (("our Sol", sol), ("exact", exact)):
                best = _fastest(pool, theirs.rel_l2)
                if best is None:
                    parts.append(f"{kind}: none at rel-L2 <= {theirs.rel_l2:.3g}" +
                                 (" (add lower --taus)" if pool is sol else ""))
                else:
                    parts.append(f"{kind} ({best.method}) {best.ms:.1f} ms at rel-L2 "
                                 f"{best.rel_l2:.3g} = {theirs.ms / best.ms:.2f}x kitchen's speed")
            lines.append("; ".join(parts))
    return lines


class JsonRows:
    """Appends one JSON line per finished row (to `path`, default $OUT/attention_rows.jsonl when $OUT is set)."""

    def __init__(self, path: str | None, header: dict):
        if path is None and os.environ.get("OUT"):
            path = str(Path(os.environ["OUT"]) / "attention_rows.jsonl")
        self.path = Path(path) if path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"header": header}) + "\n")

    def write(self, row) -> None:
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(asdict(row)) + "\n")
