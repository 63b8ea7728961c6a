"""Sol block-sparse attention: key summaries, routing rules and a plain fp32 torch reference.

The method (Sol-Attn, arXiv:2607.24027, written here from its description): keys and queries are
cut into blocks of `block` rows on the packed sequence. For each query block, the proxy score of
key block j is (mean query of the block) . (mean key of block j) * sm_scale. Key block j is
computed exactly (real keys, online softmax) when its proxy exceeds mu + tau * sigma (mean and
population std of that query block's proxies over all key blocks, sigma floored by SIGMA_EPS), when
it lies within +-1 block of the query block (the diagonal band), when it overlaps a sink range, or
when the query block overlaps an exact-query range. Every other key block enters the softmax as
`count` copies of its mean key carrying the block's summed V, so no key leaves the denominator.
tau = -100 makes every block exact (a value is never 100 population stds below the mean of fewer
than 10001 values), i.e. dense attention.

Ranges are (start, stop) half-open packed indices; `q_offset` is the packed index of q's first row.
Routing is per whole block: a chunk whose bounds are multiples of `block` reproduces exactly the
rows of the unchunked call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .launch import AttentionArgumentError, LaunchConfig, check_kv, check_out, check_qkv, empty_output
from .qstream_reference import default_sm_scale, dequantized

SIGMA_EPS = 1e-6
"""Added to the proxy variance (natural-log score units) so equal proxies still give a finite sigma."""

SUMMARY_BLOCKS_PER_STEP = 64  # key blocks summarised per step: bounds the fp32 temporaries

PROXY_BUDGET_BYTES = 64 << 20
"""Largest fp32 temporaries (mean queries, an fp32 copy of the key means, the proxies) of one step of heads
while a Sol launch builds its routing mask."""

LIST_BUDGET_BYTES = 128 << 20
"""Largest exact-block list one Sol launch may use; longer query ranges are split into block-aligned launches
(the launch's uint8 routing mask is a quarter of that)."""


def proxy_heads(batch: int, q_blocks: int, key_blocks: int, head_dim: int, heads: int) -> int:
    """Heads whose routing proxies are computed in one step (all of them for short sequences)."""
    return max(1, min(heads, PROXY_BUDGET_BYTES // _proxy_bytes_per_head(batch, q_blocks, key_blocks, head_dim)))


def _proxy_bytes_per_head(batch: int, q_blocks: int, key_blocks: int, head_dim: int) -> int:
    return 4 * batch * (q_blocks * key_blocks + (q_blocks + key_blocks) * head_dim + 2 * q_blocks)


def sol_summary_bytes(heads: int, seq_len: int, head_dim: int, elem_bytes: int = 2, block: int = 64,
                      batch: int = 1) -> int:
    """Bytes of the key summaries of one K/V (mean key and summed value per key block, `elem_bytes` each)."""
    return 2 * batch * heads * -(-seq_len // block) * head_dim * elem_bytes


def sol_workspace_bytes(heads: int, rows: int, seq_len: int, head_dim: int, elem_bytes: int = 2,
                        block: int = 64, batch: int = 1) -> int:
    """Bytes the Sol kernel allocates besides its output: key summaries (when not passed in), and per launch
    the per-program exact-block list (capped by LIST_BUDGET_BYTES), the uint8 routing mask and one step of
    fp32 proxies; excludes the caller's q/k/v/out."""
    nk = -(-seq_len // block)
    nq = -(-rows // block) + 1  # an unaligned q_offset can add one partial block
    summaries = sol_summary_bytes(heads, seq_len, head_dim, elem_bytes, block, batch)
    per_block = 4 * batch * heads * nk  # one int32 per (program, key block)
    launch_blocks = min(nq, max(2, LIST_BUDGET_BYTES // per_block))
    list_bytes = per_block * launch_blocks
    mask_bytes = batch * heads * launch_blocks * nk
    proxies = proxy_heads(batch, launch_blocks, nk, head_dim, heads) * _proxy_bytes_per_head(
        batch, launch_blocks, nk, head_dim)
    return summaries + list_bytes + mask_bytes + proxies + 4 * batch * heads * nq + 5 * nk + nq


@dataclass(frozen=True)
class SolKeySummaries:
    """Per key block: mean key and summed value, [B, H, num_blocks, D]; reusable across query chunks."""

    key_means: torch.Tensor
    value_sums: torch.Tensor
    block: int
    seq_len: int

    @property
    def num_blocks(self) -> int:
        return self.key_means.shape[2]

    def counts(self) -> torch.Tensor:
        """Keys in each block (fp32 [num_blocks]): `block`, except a ragged last block."""
        c = torch.full((self.num_blocks,), float(self.block), dtype=torch.float32, device=self.key_means.device)
        c[-1] = float(self.seq_len - (self.num_blocks - 1) * self.block)
        return c

    def to(self, dtype: torch.dtype) -> "SolKeySummaries":
        if self.key_means.dtype == dtype and self.value_sums.dtype == dtype:
            return self
        return SolKeySummaries(self.key_means.to(dtype), self.value_sums.to(dtype), self.block, self.seq_len)


@dataclass(frozen=True)
class SolStats:
    """How much Sol computed exactly: exact key blocks per query block, [B, H, query_blocks] int32."""

    exact_blocks: torch.Tensor
    key_blocks: int

    @property
    def density(self) -> float:
        """Fraction of (query block, key block) pairs computed exactly; 1.0 is dense attention."""
        return float(self.exact_blocks.double().mean().item()) / self.key_blocks


def check_block(block: int) -> None:
    if not isinstance(block, int) or block < 16 or block & (block - 1):
        raise AttentionArgumentError(f"block must be a power of two >= 16 (64 for H3), got {block!r}")


def sol_key_summaries(k: torch.Tensor, v: torch.Tensor, *, block: int = 64, k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> SolKeySummaries:
    """Mean key and summed value of every `block` keys (fp32 math, stored as `dtype`; pass q's dtype on GPU)."""
    check_block(block)
    check_kv(k, v, k_scale, v_scale)
    b, h, s, d = k.shape
    nk = -(-s // block)
    means = torch.empty(b, h, nk, d, dtype=dtype, device=k.device)
    sums = torch.empty(b, h, nk, d, dtype=dtype, device=k.device)
    for c0 in range(0, nk, SUMMARY_BLOCKS_PER_STEP):
        c1 = min(nk, c0 + SUMMARY_BLOCKS_PER_STEP)
        r0, r1 = c0 * block, min(s, c1 * block)
        ks = None if k_scale is None else k_scale[:, :, r0:r1]
        vs = None if v_scale is None else v_scale[:, :, r0:r1]
        pad = (c1 - c0) * block - (r1 - r0)
        kk = torch.nn.functional.pad(dequantized(k[:, :, r0:r1], ks), (0, 0, 0, pad))
        vv = torch.nn.functional.pad(dequantized(v[:, :, r0:r1], vs), (0, 0, 0, pad))
        counts = torch.full((c1 - c0,), float(block), device=k.device)
        counts[-1] -= pad
        means[:, :, c0:c1] = (kk.view(b, h, c1 - c0, block, d).sum(3) / counts[:, None]).to(dtype)
        sums[:, :, c0:c1] = vv.view(b, h, c1 - c0, block, d).sum(3).to(dtype)
    return SolKeySummaries(means, sums, block, s)


def _check_ranges(name: str, ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out = []
    for r in ranges:
        if len(r) != 2 or int(r[0]) < 0 or int(r[1]) < int(r[0]):
            raise AttentionArgumentError(f"{name} entries must be (start, stop) with 0 <= start <= stop, got {r!r}")
        out.append((int(r[0]), int(r[1])))
    return tuple(out)


def block_ranges(ranges: Sequence[tuple[int, int]], first_block: int, num_blocks: int,
                 block: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of local block indices i (block first_block + i, 0 <= i < num_blocks) that overlap
    any (start, stop) token range: plain Python, so a caller can mark them with slices (no host sync)."""
    out = []
    for start, stop in ranges:
        if stop <= start:
            continue
        lo = max(start // block - first_block, 0)
        hi = min((stop - 1) // block - first_block + 1, num_blocks)
        if lo < hi:
            out.append((lo, hi))
    return out


def block_flags(ranges: Sequence[tuple[int, int]], first_block: int, num_blocks: int, block: int,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """int8 [num_blocks]: 1 where block first_block + i overlaps any (start, stop) range."""
    flags = torch.zeros(num_blocks, dtype=torch.int8)
    for lo, hi in block_ranges(ranges, first_block, num_blocks, block):
        flags[lo:hi] = 1
    return flags.to(device)


def check_sol_args(q: torch.Tensor, k: torch.Tensor, tau: float, q_offset: int, block: int,
                   summaries: SolKeySummaries | None, sink_ranges, exact_query_ranges):
    """Shared validation; returns (sink_ranges, exact_query_ranges) as tuples of int pairs."""
    check_block(block)
    tau = float(tau)
    if tau != tau or abs(tau) == float("inf"):
        raise AttentionArgumentError(f"tau must be finite (1.0 typical, -100 = dense), got {tau!r}")
    if isinstance(q_offset, bool) or not isinstance(q_offset, int) or q_offset < 0:
        raise AttentionArgumentError(f"q_offset must be an integer >= 0 (packed index of q's first row), got {q_offset!r}")
    if summaries is not None and (summaries.block != block or summaries.seq_len != k.shape[2]
                                  or tuple(summaries.key_means.shape[:2]) != tuple(k.shape[:2])
                                  or summaries.key_means.device != k.device):
        raise AttentionArgumentError(
            f"summaries were made for block {summaries.block}, seq_len {summaries.seq_len}, "
            f"shape {tuple(summaries.key_means.shape)} on {summaries.key_means.device}; this call has block {block} "
            f"and k {tuple(k.shape)} on {k.device}: "
            "recompute them with sol_key_summaries(k, v, block=block)")
    return _check_ranges("sink_ranges", sink_ranges), _check_ranges("exact_query_ranges", exact_query_ranges)


def query_block_span(q_offset: int, rows: int, block: int) -> tuple[int, int]:
    """(first global query block, number of query blocks) covered by rows [q_offset, q_offset + rows)."""
    first = q_offset // block
    return first, -(-(q_offset - first * block + rows) // block)


def sol_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, tau: float, q_offset: int = 0,
                  sink_ranges: Sequence[tuple[int, int]] = (), exact_query_ranges: Sequence[tuple[int, int]] = (),
                  k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                  sm_scale: float | None = None, block: int = 64, config: LaunchConfig | None = None,
                  return_stats: bool = False, summaries: SolKeySummaries | None = None,
                  out: torch.Tensor | None = None):
    """fp32 reference of Sol; returns out ([B, H, Sq, D], storage [B, Sq, H, D]) or (out, SolStats)."""
    del config
    check_qkv(q, k, v, k_scale, v_scale)
    sinks, exact_q = check_sol_args(q, k, tau, q_offset, block, summaries, sink_ranges, exact_query_ranges)
    if out is None:
        out = empty_output(q)
    check_out(out, q)
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = default_sm_scale(d, sm_scale)
    kf, vf = dequantized(k, k_scale), dequantized(v, v_scale)
    summ = (summaries or sol_key_summaries(kf, vf, block=block)).to(torch.float32)
    kc, vsum, counts = summ.key_means, summ.value_sums, summ.counts()
    nk = summ.num_blocks
    key_block = torch.arange(skv, device=q.device) // block
    sink_flags = block_flags(sinks, 0, nk, block, q.device).bool()
    first, nq = query_block_span(q_offset, sq, block)
    qexact = block_flags(exact_q, first, nq, block).bool()
    exact_counts = torch.zeros(b, h, nq, dtype=torch.int32, device=q.device)
    for i in range(nq):
        g = first + i
        r0, r1 = max(0, g * block - q_offset), min(sq, (g + 1) * block - q_offset)
        rows = q[:, :, r0:r1].float()
        proxy = rows.mean(dim=2, keepdim=True) @ kc.transpose(-1, -2) * scale            # [B, H, 1, nk]
        mu = proxy.mean(dim=-1, keepdim=True)
        sigma = torch.sqrt(proxy.var(dim=-1, unbiased=False, keepdim=True) + SIGMA_EPS)
        diag = (torch.arange(nk, device=q.device) - g).abs() <= 1
        exact = (proxy > mu + tau * sigma) | diag | sink_flags | bool(qexact[i])       # [B, H, 1, nk]
        exact_counts[:, :, i] = exact.sum(dim=-1)[:, :, 0].to(torch.int32)
        s_exact = (rows @ kf.transpose(-1, -2) * scale).masked_fill(~exact[..., key_block], float("-inf"))
        s_apx = (rows @ kc.transpose(-1, -2) * scale).masked_fill(exact, float("-inf"))
        m = torch.maximum(s_exact.amax(dim=-1, keepdim=True), s_apx.amax(dim=-1, keepdim=True))
        p_exact, p_apx = torch.exp(s_exact - m), torch.exp(s_apx - m)
        num = p_exact @ vf + p_apx @ vsum
        den = p_exact.sum(dim=-1, keepdim=True) + (p_apx * counts).sum(dim=-1, keepdim=True)
        out[:, :, r0:r1] = (num / den).to(q.dtype)
    if return_stats:
        return out, SolStats(exact_counts, nk)
    return out
