"""Sol Triton kernel vs its fp32 reference and dense attention, under TRITON_INTERPRET=1."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is not installed: `pip install triton` to run the interpreter kernel tests")

from longmedia.kernels import sol_reference  # noqa: E402
from longmedia.kernels.int8_kv import quantize_kv_int8  # noqa: E402
from longmedia.kernels.launch import LaunchConfig  # noqa: E402
from longmedia.kernels.sol_attention import sol_attention, sol_key_summaries  # noqa: E402
from longmedia.testing.error_bounds import error_bound, naive_attention  # noqa: E402

ONE_BLOCK = LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=1, group=16)
TWO_BLOCKS = LaunchConfig(block_m=128, block_n=64, num_warps=4, num_stages=1, group=16)
PAIRED = LaunchConfig(block_m=64, block_n=128, num_warps=4, num_stages=1, group=16)  # 2 listed key blocks per step
TWO_PAIRED = LaunchConfig(block_m=128, block_n=128, num_warps=4, num_stages=1, group=16)
ONE_BLOCK_POINTERS = replace(ONE_BLOCK, tma=False)  # one-block steps without TMA descriptors
ALL = [ONE_BLOCK, ONE_BLOCK_POINTERS, TWO_BLOCKS, PAIRED, TWO_PAIRED]
ALL_IDS = ["block_m64", "block_m64_pointers", "block_m128", "block_m64_n128", "block_m128_n128"]
FP32 = dict(atol=2e-6, rtol=1e-5)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double())


@pytest.mark.parametrize("config", ALL, ids=ALL_IDS)
def test_tau_minus_100_is_dense_attention(fused_qkv, config):
    q, k, v = fused_qkv(231, 231, 2, 64, dtype=torch.float32)  # strided views, ragged last block
    out, stats = sol_attention(q, k, v, tau=-100.0, config=config, return_stats=True)
    assert stats.density == 1.0 and stats.exact_blocks.shape == (1, 2, 4)
    torch.testing.assert_close(out.double(), sdpa(q, k, v), **FP32)


@pytest.mark.parametrize("tau", [0.8, 1.0])
@pytest.mark.parametrize("config", ALL, ids=ALL_IDS)
def test_kernel_matches_reference_fp32(structured_qkv, tau, config):
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)  # 467 rows: 8 blocks, the last one ragged
    out, stats = sol_attention(q, k, v, tau=tau, config=config, return_stats=True)
    ref, ref_stats = sol_reference.sol_attention(q, k, v, tau=tau, return_stats=True)
    assert torch.equal(stats.exact_blocks, ref_stats.exact_blocks)
    assert 0.3 < stats.density < 0.9
    torch.testing.assert_close(out, ref, **FP32)


def test_kernel_matches_reference_fp16_head_dim_128(structured_qkv):
    q, k, v = structured_qkv(1, 1, (2, 6, 20), 128, dtype=torch.float16)  # 240 rows
    out, stats = sol_attention(q, k, v, tau=1.0, return_stats=True)
    ref, ref_stats = sol_reference.sol_attention(q, k, v, tau=1.0, return_stats=True)
    # fp16 summaries may flip a block sitting on the threshold; the rest must agree
    assert (stats.exact_blocks - ref_stats.exact_blocks).abs().sum() <= 1
    # where both routed alike, within twice the error of plain fp16 torch attention (FlashAttention's bound)
    agree = (stats.exact_blocks == ref_stats.exact_blocks)[..., torch.arange(q.shape[2]) // 64]
    rows = agree.unsqueeze(-1).expand_as(out)
    ref32 = sol_reference.sol_attention(q.float(), k.float(), v.float(), tau=1.0,
                                        summaries=sol_key_summaries(k, v, dtype=q.dtype))
    dense = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    bound = error_bound(out[rows], ref32[rows], naive_attention(q, k, v), baseline_reference=dense)
    assert agree.float().mean() > 0.9 and bound.holds, bound


@pytest.mark.parametrize("sinks", [((0, 11),), ((200, 260), (430, 467)), ((0, 5), (466, 467))],
                         ids=["text_prefix", "middle_and_tail", "single_rows"])
def test_sink_layouts(structured_qkv, sinks):
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)
    out, stats = sol_attention(q, k, v, tau=1.3, sink_ranges=sinks, config=TWO_PAIRED, return_stats=True)
    ref, ref_stats = sol_reference.sol_attention(q, k, v, tau=1.3, sink_ranges=sinks, return_stats=True)
    assert torch.equal(stats.exact_blocks, ref_stats.exact_blocks)
    torch.testing.assert_close(out, ref, **FP32)
    plain = sol_reference.sol_attention(q, k, v, tau=1.3, return_stats=True)[1]
    assert bool((stats.exact_blocks >= plain.exact_blocks).all()) and stats.density > plain.density


def test_ragged_last_block_folded_with_its_real_count():
    """A 5-key last block, far from every query block, enters the softmax as 5 copies, not 64."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 1, n, 32, generator=g) for n in (64, 389, 389))
    out, stats = sol_attention(q, k, v, tau=3.0, config=ONE_BLOCK, return_stats=True)
    assert int(stats.exact_blocks) == 2  # the band {0, 1} only: tau=3 > sqrt(6) routes nothing else
    ref = sol_reference.sol_attention(q, k, v, tau=3.0)
    torch.testing.assert_close(out, ref, **FP32)


@pytest.mark.parametrize("config", ALL, ids=ALL_IDS)
def test_aligned_query_chunks_equal_rows_of_full_call(structured_qkv, config):
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)
    kw = dict(tau=1.0, sink_ranges=((0, 11),), exact_query_ranges=((300, 301),), config=config)
    full = sol_attention(q, k, v, **kw)
    summ = sol_key_summaries(k, v, block=64, dtype=q.dtype)  # computed once, reused by every chunk
    parts = [sol_attention(q[:, :, a:a + 192], k, v, q_offset=a, summaries=summ, **kw) for a in (0, 192, 384)]
    torch.testing.assert_close(torch.cat(parts, dim=2), full, **FP32)   # fp32: the contract's 1e-5 relative
    ref = sol_reference.sol_attention(q, k, v, **kw)
    torch.testing.assert_close(full, ref, **FP32)


def test_unaligned_query_offset_matches_reference(structured_qkv):
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)
    chunk = q[:, :, 100:290]
    out, stats = sol_attention(chunk, k, v, tau=1.0, q_offset=100, config=TWO_BLOCKS, return_stats=True)
    ref, ref_stats = sol_reference.sol_attention(chunk, k, v, tau=1.0, q_offset=100, return_stats=True)
    assert stats.exact_blocks.shape == (1, 2, 4)  # partial blocks 1 and 4, whole blocks 2 and 3
    assert torch.equal(stats.exact_blocks, ref_stats.exact_blocks)
    torch.testing.assert_close(out, ref, **FP32)


@pytest.mark.parametrize("config", [ONE_BLOCK, TWO_PAIRED], ids=["tma", "pointers"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_int8_kv_matches_int8_reference(structured_qkv, dtype, config):
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11, dtype=dtype)
    k8, ks = quantize_kv_int8(k)
    v8, vs = quantize_kv_int8(v)
    out, stats = sol_attention(q, k8, v8, k_scale=ks, v_scale=vs, tau=1.0, config=config, return_stats=True)
    ref, ref_stats = sol_reference.sol_attention(q, k8, v8, k_scale=ks, v_scale=vs, tau=1.0, return_stats=True)
    if dtype == torch.float32:
        assert torch.equal(stats.exact_blocks, ref_stats.exact_blocks)
        torch.testing.assert_close(out, ref, **FP32)
    else:
        assert (stats.exact_blocks - ref_stats.exact_blocks).abs().sum() <= 1
        assert float((out.double() - ref.double()).norm() / ref.double().norm()) < 5e-3


def test_tma_only_where_strides_allow_it(structured_qkv, monkeypatch):
    """TMA needs Triton's host-side descriptors, a contiguous head_dim and 16-byte aligned base and strides;
    other views, or a Triton without descriptors, take pointer loads and give the same result."""
    import longmedia.kernels.sol_attention as sol_module
    from longmedia.kernels.sol_attention import _tma_ready
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)
    assert _tma_ready(k, v)
    with monkeypatch.context() as m:
        m.setattr(sol_module, "TensorDescriptor", None)  # a Triton older than 3.4
        assert not _tma_ready(k, v)
        old_triton = sol_attention(q, k, v, tau=1.0, config=ONE_BLOCK)
    wide = torch.zeros(1, 2, k.shape[2], 65)
    wide[..., 1:] = k  # base 4 bytes past a 16-byte boundary
    shifted = wide[..., 1:]
    assert not _tma_ready(shifted, v) and not _tma_ready(k.transpose(2, 3).contiguous().transpose(2, 3), v)
    out = sol_attention(q, shifted, v, tau=1.0, config=ONE_BLOCK)
    tma = sol_attention(q, k, v, tau=1.0, config=ONE_BLOCK)
    torch.testing.assert_close(out, tma, **FP32)
    torch.testing.assert_close(old_triton, tma, **FP32)


def test_launches_split_by_list_budget_give_the_same_result(structured_qkv, monkeypatch):
    import longmedia.kernels.sol_attention as sol_module

    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11)
    whole = sol_attention(q, k, v, tau=1.0, config=TWO_BLOCKS)
    monkeypatch.setattr(sol_module, "LIST_BUDGET_BYTES", 4 * 2 * 8 * 3)  # three query blocks per launch
    split, stats = sol_attention(q, k, v, tau=1.0, config=TWO_BLOCKS, return_stats=True)
    torch.testing.assert_close(split, whole, **FP32)   # fp32: the contract's 1e-5 relative
    ref_stats = sol_reference.sol_attention(q, k, v, tau=1.0, return_stats=True)[1]
    assert torch.equal(stats.exact_blocks, ref_stats.exact_blocks)


@pytest.mark.parametrize("kind", ["fp32", "fp16", "int8"])
def test_triton_key_summaries_match_torch(structured_qkv, kind):
    dtype = torch.float16 if kind == "fp16" else torch.float32
    _, k, v = structured_qkv(1, 2, (2, 5, 9), 64, text=7, dtype=dtype)  # 97 rows: last block of 33
    scales = {}
    if kind == "int8":
        (k, ks), (v, vs) = quantize_kv_int8(k), quantize_kv_int8(v)
        scales = dict(k_scale=ks, v_scale=vs)
    got = sol_key_summaries(k, v, block=64, dtype=dtype, **scales)
    want = sol_reference.sol_key_summaries(k, v, block=64, dtype=dtype, **scales)
    assert (got.block, got.seq_len, got.num_blocks) == (64, 97, 2) and got.key_means.dtype == dtype
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(got.key_means, want.key_means, **tol)
    torch.testing.assert_close(got.value_sums, want.value_sums, **tol)


@pytest.mark.parametrize("q_offset, rows", [(0, 467), (100, 300), (128, 64), (5, 3)],
                         ids=["whole", "unaligned_chunk", "one_block", "inside_one_block"])
def test_routing_mask_follows_the_rules(structured_qkv, q_offset, rows):
    """proxy > mu + tau * sigma over every key block's proxy, or the diagonal band, a sink column or an
    exact-query row; the proxy of the rows present in this call."""
    from longmedia.kernels.sol_routing import routing_mask
    q, k, v = structured_qkv(1, 2, (3, 8, 19), 64, text=11, dtype=torch.float32)
    summ = sol_reference.sol_key_summaries(k, v, block=64)
    chunk = q[:, :, q_offset:q_offset + rows]
    scale, tau, nk = 0.125, 1.3, summ.num_blocks
    sinks, exact_q = ((400, 420),), ((0, 11),)
    got = routing_mask(chunk, summ, q_offset, tau, scale, sinks, exact_q)
    first, nq = sol_reference.query_block_span(q_offset, rows, 64)
    assert got.shape == (1, 2, nq, nk) and got.dtype == torch.uint8
    for i in range(nq):
        g = first + i
        r0, r1 = max(0, g * 64 - q_offset), min(rows, (g + 1) * 64 - q_offset)
        proxy = chunk[:, :, r0:r1].double().mean(2, keepdim=True) @ summ.key_means.double().transpose(-1, -2) * scale
        thr = proxy.mean(-1, keepdim=True) + tau * torch.sqrt(proxy.var(-1, unbiased=False, keepdim=True)
                                                              + sol_reference.SIGMA_EPS)
        want = (proxy > thr)[:, :, 0]
        want |= ((torch.arange(nk) - g).abs() <= 1) | (torch.arange(nk) == 6)  # band; keys 400-419 are block 6
        if g == 0:  # rows 0-10 are exact query rows
            want[:] = True
        assert torch.equal(got[:, :, i].bool(), want), i
        assert 0 < int(got[:, :, i].sum()) < 2 * nk or g == 0
