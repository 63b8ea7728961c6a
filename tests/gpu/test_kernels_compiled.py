"""The compiled Triton kernels (not the interpreter) in bf16 on ragged lengths, against their torch references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is not installed: the GPU kernel tests need it")

from longmedia.kernels import qstream_reference, sol_reference
from longmedia.kernels.int8_kv import quantize_kv_int8
from longmedia.kernels.qstream_attention import interpreting, qstream_attention
from longmedia.kernels.sol_attention import sol_attention, sol_key_summaries
from longmedia.testing.error_bounds import error_bound, naive_attention

CUDA = torch.device("cuda")


def qkv(q_rows: int, kv_rows: int, heads: int = 4, head_dim: int = 128, *, seed: int = 0, gain: float = 2.0):
    """RMS-normed bf16 q/k with a shared low-rank part (so Sol has structure to route on), random v; on CUDA."""
    g = torch.Generator(CUDA).manual_seed(seed)
    base = torch.randn(1, heads, kv_rows, 16, generator=g, device=CUDA) @ torch.randn(1, heads, 16, head_dim,
                                                                                     generator=g, device=CUDA)

    def normed(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * gain

    k = normed(base + 0.5 * torch.randn(base.shape, generator=g, device=CUDA))
    q = normed(base[:, :, :q_rows] + 0.5 * torch.randn(1, heads, q_rows, head_dim, generator=g, device=CUDA))
    v = torch.randn(1, heads, kv_rows, head_dim, generator=g, device=CUDA)
    return tuple(t.to(torch.bfloat16) for t in (q, k, v))


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def within_bf16(out, reference, baseline, factor=2.0, baseline_reference=None):
    """The kernel's bf16 output within `factor` times plain torch bf16 attention's error (FlashAttention's bound);
    `baseline_reference`: exact attention, when `reference` is Sol's own (approximate) reference."""
    bound = error_bound(out, reference, baseline, factor=factor, floor=1e-5, baseline_reference=baseline_reference)
    assert bound.holds, str(bound)


def test_compiled_not_interpreted():
    assert not interpreting()


@pytest.mark.parametrize("q_rows,kv_rows", [(1000, 3001), (4097, 4097), (37, 131)])
def test_qstream_bf16_matches_reference_and_sdpa(q_rows, kv_rows):
    q, k, v = qkv(q_rows, kv_rows, seed=q_rows)
    out = qstream_attention(q, k, v)
    torch.cuda.synchronize()
    ref = qstream_reference.qstream_attention(q.float(), k.float(), v.float())
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    baseline = naive_attention(q, k, v)
    within_bf16(out, ref, baseline)
    within_bf16(out, sdpa, baseline)
    assert rel(out, torch.zeros_like(out) + out.mean()) > 0.1  # a real, non-constant output


def test_qstream_int8_kv_matches_int8_reference():
    q, k, v = qkv(1500, 2777, seed=3)
    k8, ks = quantize_kv_int8(k)
    v8, vs = quantize_kv_int8(v)
    out = qstream_attention(q, k8, v8, k_scale=ks, v_scale=vs)
    ref = qstream_reference.qstream_attention(q.float(), k8, v8, k_scale=ks, v_scale=vs)
    exact = qstream_reference.qstream_attention(q.float(), k.float(), v.float())
    assert k8.dtype == torch.int8
    # the int8 reference dequantises K/V in fp32: the kernel's bf16 arithmetic on the same K/V is what differs
    kd, vd = (t.float() * s[..., None] for t, s in ((k8, ks), (v8, vs)))
    within_bf16(out, ref, naive_attention(q, kd.to(q.dtype), vd.to(q.dtype)))
    assert rel(out, exact) <= 3e-2  # int8 K/V is an approximation of bf16 K/V


def test_sol_dense_threshold_is_exact_attention():
    q, k, v = qkv(700, 2000, seed=5)
    out = sol_attention(q, k, v, tau=-100.0)
    within_bf16(out, F.scaled_dot_product_attention(q.float(), k.float(), v.float()), naive_attention(q, k, v))


@pytest.mark.parametrize("tau", [0.8, 1.0])
def test_sol_bf16_matches_reference_on_ragged_lengths(tau):
    q, k, v = qkv(1100, 3333, seed=7)
    summ = sol_key_summaries(k, v, dtype=q.dtype)
    out, stats = sol_attention(q, k, v, tau=tau, q_offset=500, summaries=summ, return_stats=True)
    # the reference gets the kernel's bf16 summaries: the same routing input, so only the arithmetic differs
    # (fp32 summaries move blocks across the threshold, and a flipped block moves the output by several %)
    ref, ref_stats = sol_reference.sol_attention(q.float(), k.float(), v.float(), tau=tau, q_offset=500,
                                                 summaries=summ, return_stats=True)
    flips = int((stats.exact_blocks.cpu() - ref_stats.exact_blocks.cpu()).abs().sum())
    assert flips <= max(2, int(ref_stats.exact_blocks.sum()) // 100)
    assert 0.0 < stats.density < 1.0
    # bounded where both routed alike: rows of (head, query block) pairs with the same exact-block count (a
    # flipped block is a different approximation, not arithmetic error)
    row_block = (torch.arange(q.shape[2], device=CUDA) + 500) // 64 - 500 // 64
    agree = (stats.exact_blocks == ref_stats.exact_blocks.to(stats.exact_blocks.device))[..., row_block]
    assert agree.float().mean() > 0.9
    rows = agree.unsqueeze(-1).expand_as(out)
    within_bf16(out[rows], ref[rows], naive_attention(q, k, v),
                baseline_reference=F.scaled_dot_product_attention(q.float(), k.float(), v.float()))


def test_sol_int8_kv_with_sinks():
    q, k, v = qkv(640, 2500, seed=9)
    k8, ks = quantize_kv_int8(k)
    v8, vs = quantize_kv_int8(v)
    sinks = ((0, 100), (2400, 2500))
    out = sol_attention(q, k8, v8, k_scale=ks, v_scale=vs, tau=1.0, sink_ranges=sinks)
    ref = sol_reference.sol_attention(q.float(), k8, v8, k_scale=ks, v_scale=vs, tau=1.0, sink_ranges=sinks)
    assert torch.isfinite(out).all()
    kd, vd = (t.float() * s[..., None] for t, s in ((k8, ks), (v8, vs)))
    within_bf16(out, ref, naive_attention(q, kd.to(q.dtype), vd.to(q.dtype)),
                baseline_reference=F.scaled_dot_product_attention(q.float(), kd, vd))
