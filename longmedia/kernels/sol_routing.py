"""Sol's routing in torch: which (query block, key block) pairs the kernel computes exactly.

`routing_mask` applies the rules of `sol_reference` to the rows of one launch and returns the uint8 mask
the Triton kernel (`sol_attention.py`) reads per key group. Nothing here waits for the GPU.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .sol_reference import SIGMA_EPS, SolKeySummaries, block_ranges, proxy_heads, query_block_span


def block_means(q: torch.Tensor, q_offset: int, blk: int) -> torch.Tensor:
    """fp32 [B, H, nq, D]: mean query of each Sol block the rows [q_offset, q_offset + Sq) touch (the rows
    present in this call only, as the kernel sees them); sums in fp32 without an fp32 copy of q."""
    b, h, sq, d = q.shape
    _, nq = query_block_span(q_offset, sq, blk)
    sums = torch.empty(b, h, nq, d, dtype=torch.float32, device=q.device)
    lead = min(sq, (-q_offset) % blk)  # rows before the first block boundary
    body = (sq - lead) // blk
    tail = sq - lead - body * blk
    i = 0
    if lead:
        torch.sum(q[:, :, :lead], dim=2, dtype=torch.float32, out=sums[:, :, 0]).div_(lead)
        i = 1
    if body:
        torch.mean(q[:, :, lead:lead + body * blk].unflatten(2, (body, blk)), dim=3, dtype=torch.float32,
                   out=sums[:, :, i:i + body])
        i += body
    if tail:
        torch.sum(q[:, :, sq - tail:], dim=2, dtype=torch.float32, out=sums[:, :, i]).div_(tail)
    return sums


def routing_mask(q: torch.Tensor, summ: SolKeySummaries, q_offset: int, tau: float, scale: float,
                  sinks: Sequence[tuple[int, int]], exact_q: Sequence[tuple[int, int]]) -> torch.Tensor:
    """uint8 [B, H, nq, nk]: 1 where query block i (of the blocks rows [q_offset, q_offset + Sq) touch)
    computes key block j exactly; the rules of `sol_reference`, with the proxy of the rows in this call.

    The proxies are one batched GEMM of the fp32 mean queries against the key means, a step of heads at a
    time (`proxy_heads` bounds the fp32 temporaries); mu and sigma are their population mean and std. The
    band, sink columns and exact-query rows are written through diagonal views and slices: nothing here
    waits for the GPU, so the host runs ahead (a Sol call per head group and query chunk adds up).
    """
    b, h, sq, d = q.shape
    blk, nk = summ.block, summ.num_blocks
    first, nq = query_block_span(q_offset, sq, blk)
    mask = torch.empty(b, h, nq, nk, dtype=torch.uint8, device=q.device)
    step = proxy_heads(b, nq, nk, d, h)
    for h0 in range(0, h, step):
        h1 = min(h, h0 + step)
        proxy = block_means(q[:, h0:h1], q_offset, blk) @ summ.key_means[:, h0:h1].float().transpose(-1, -2)
        proxy *= scale
        var, mu = torch.var_mean(proxy, dim=-1, correction=0, keepdim=True)
        thr = mu.add_(torch.sqrt_(var.add_(SIGMA_EPS)), alpha=float(tau))
        torch.gt(proxy, thr, out=mask[:, h0:h1].view(torch.bool))
        del proxy, var, mu, thr
    for shift in (-1, 0, 1):  # the diagonal band: local row i is query block first + i
        torch.diagonal(mask, offset=first + shift, dim1=2, dim2=3).fill_(1)
    for lo, hi in block_ranges(sinks, 0, nk, blk):
        mask[:, :, :, lo:hi] = 1
    for lo, hi in block_ranges(exact_q, first, nq, blk):
        mask[:, :, lo:hi, :] = 1
    return mask
