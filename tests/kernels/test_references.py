"""Torch references and int8 helpers: no triton needed, these run anywhere."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from longmedia.kernels import qstream_reference, sol_reference
from longmedia.kernels.int8_kv import dequantize_kv_int8, kv_bytes, quantize_kv_int8
from longmedia.kernels.launch import AttentionArgumentError, LaunchConfig


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double())


def test_qstream_reference_matches_sdpa_on_strided_ragged_views(fused_qkv):
    q, k, v = fused_qkv(131, 37, 3, 64, dtype=torch.float32)
    out = qstream_reference.qstream_attention(q, k, v)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert out.transpose(1, 2).is_contiguous()  # storage is [B, Sq, H, D]
    torch.testing.assert_close(out.double(), sdpa(q, k, v), atol=2e-6, rtol=1e-5)


def test_qstream_reference_sm_scale_and_out_buffer():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 19, 32, generator=g) for _ in range(3))
    buf = torch.empty(2, 19, 2, 32)
    out = qstream_reference.qstream_attention(q, k, v, sm_scale=0.3, out=buf.transpose(1, 2))
    assert out.data_ptr() == buf.data_ptr()
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3)
    torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)


def test_quantize_int8_error_bound_and_chunked_slices():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 3, 301, 64, generator=g) * torch.rand(1, 3, 301, 1, generator=g) * 5
    q8, sc = quantize_kv_int8(x)
    assert q8.dtype == torch.int8 and sc.shape == (1, 3, 301) and sc.dtype == torch.float32
    err = (dequantize_kv_int8(q8, sc) - x).abs()
    assert bool((err <= sc[..., None] * 0.5 + 1e-6).all())  # round-to-nearest: half a step at most
    assert int(q8.abs().max()) == 127
    # quantising row chunks into preallocated [B, S, H, D]-laid-out buffers gives the same bits
    q8b = torch.empty(1, 301, 3, 64, dtype=torch.int8).transpose(1, 2)
    scb = torch.empty(1, 3, 301)
    for r0 in range(0, 301, 100):
        quantize_kv_int8(x[:, :, r0:r0 + 100], out=q8b[:, :, r0:r0 + 100], scale_out=scb[:, :, r0:r0 + 100],
                         chunk_rows=37)
    assert torch.equal(q8b, q8) and torch.equal(scb, sc)
    assert kv_bytes(q8, sc) / kv_bytes(x.to(torch.bfloat16)) == (64 + 4) / (2 * 64)  # ~half, plus one fp32 scale


def test_int8_reference_close_to_float_on_structured_inputs(structured_qkv):
    q, k, v = structured_qkv(1, 2, (4, 8, 12), 128)
    exact = qstream_reference.qstream_attention(q, k, v)
    k8, ks = quantize_kv_int8(k)
    v8, vs = quantize_kv_int8(v)
    approx = qstream_reference.qstream_attention(q, k8, v8, k_scale=ks, v_scale=vs)
    err = rel_l2(approx, exact)
    assert 1e-5 < err < 1e-2


def test_sol_reference_dense_at_tau_minus_100(structured_qkv):
    q, k, v = structured_qkv(1, 2, (3, 8, 9), 64, text=13)  # 229 rows: ragged last block
    out, stats = sol_reference.sol_attention(q, k, v, tau=-100.0, return_stats=True)
    assert stats.density == 1.0
    torch.testing.assert_close(out.double(), sdpa(q, k, v), atol=2e-6, rtol=1e-5)


def test_sol_reference_fold_equals_copies_of_mean_key_with_mean_value():
    """Approximate blocks are exactly `count` copies of their mean key carrying their mean value."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 331, 32, generator=g) for _ in range(3))
    block, q_offset = 64, 0
    qc = q[:, :, q_offset:q_offset + 64]  # one query block: global block 0
    out, stats = sol_reference.sol_attention(qc, k, v, tau=1.0, q_offset=q_offset, block=block, return_stats=True)
    summ = sol_reference.sol_key_summaries(k, v, block=block)
    counts = summ.counts()
    assert counts.tolist() == [64.0, 64.0, 64.0, 64.0, 64.0, 11.0]
    proxy = (qc.mean(2) @ summ.key_means[0, 0].T)[0, 0] / 32 ** 0.5
    sigma = (proxy.var(unbiased=False) + sol_reference.SIGMA_EPS).sqrt()
    exact = (proxy > proxy.mean() + sigma) | (torch.arange(6) <= 1)
    assert int(stats.exact_blocks) == int(exact.sum()) and not bool(exact[5])  # the ragged block is folded
    keys, vals = [], []
    for j in range(6):
        rows = slice(j * block, min(331, (j + 1) * block))
        if exact[j]:
            keys.append(k[0, 0, rows])
            vals.append(v[0, 0, rows])
        else:
            n = int(counts[j])
            keys.append(summ.key_means[0, 0, j].expand(n, 32))
            vals.append((summ.value_sums[0, 0, j] / n).expand(n, 32))
    brute = sdpa(qc, torch.cat(keys)[None, None], torch.cat(vals)[None, None])
    torch.testing.assert_close(out.double(), brute, atol=2e-6, rtol=1e-5)


def test_sol_reference_chunks_at_aligned_offsets_equal_full_call(structured_qkv):
    q, k, v = structured_qkv(1, 2, (4, 8, 12), 64, text=20)
    kw = dict(tau=1.0, sink_ranges=((0, 20),), exact_query_ranges=((300, 310),))
    full, st = sol_reference.sol_attention(q, k, v, return_stats=True, **kw)
    assert 0.0 < st.density < 1.0
    parts = [sol_reference.sol_attention(q[:, :, a:a + 128], k, v, q_offset=a, **kw) for a in range(0, 404, 128)]
    torch.testing.assert_close(torch.cat(parts, dim=2), full, atol=0, rtol=0)


def test_sol_reference_routing_rules(structured_qkv):
    q, k, v = structured_qkv(1, 2, (4, 8, 12), 64)  # 384 rows, 6 key blocks
    densities = [sol_reference.sol_attention(q, k, v, tau=t, return_stats=True)[1].density for t in (0.5, 1.0, 2.0)]
    assert densities[0] > densities[1] > densities[2] >= 16 / 36  # the diagonal band always stays exact
    _, sinks = sol_reference.sol_attention(q, k, v, tau=50.0, sink_ranges=((320, 330),), return_stats=True)
    band = torch.tensor([2, 3, 3, 3, 3, 2])  # blocks within +-1 of each query block
    assert sinks.exact_blocks[0, 0].tolist() == (band + torch.tensor([1, 1, 1, 1, 0, 0])).tolist()
    _, exq = sol_reference.sol_attention(q, k, v, tau=50.0, exact_query_ranges=((130, 131),), return_stats=True)
    assert exq.exact_blocks[0, 0].tolist() == [2, 3, 6, 3, 3, 2]


def test_sol_reference_is_an_accurate_approximation_on_structured_inputs(structured_qkv):
    q, k, v = structured_qkv(1, 2, (8, 8, 16), 64)
    exact = qstream_reference.qstream_attention(q, k, v)
    errs = [rel_l2(sol_reference.sol_attention(q, k, v, tau=t), exact) for t in (0.0, 1.0, 2.0)]
    assert errs[0] < errs[1] < errs[2] < 0.2
    assert errs[0] > 1e-4


def test_argument_errors_name_the_input():
    q = torch.randn(1, 2, 8, 64)
    with pytest.raises(AttentionArgumentError, match="head_dim"):
        qstream_reference.qstream_attention(torch.randn(1, 2, 8, 48), torch.randn(1, 2, 8, 48), torch.randn(1, 2, 8, 48))
    with pytest.raises(AttentionArgumentError, match="k_scale"):
        qstream_reference.qstream_attention(q, q.to(torch.int8), q.to(torch.int8))
    with pytest.raises(AttentionArgumentError, match="4-D"):
        qstream_reference.qstream_attention(q[0], q, q)
    with pytest.raises(AttentionArgumentError, match="tau"):
        sol_reference.sol_attention(q, q, q, tau=float("nan"))
    with pytest.raises(AttentionArgumentError, match="q_offset"):
        sol_reference.sol_attention(q, q, q, tau=1.0, q_offset=-1)
    with pytest.raises(AttentionArgumentError, match="summaries"):
        sol_reference.sol_attention(q, q, q, tau=1.0, summaries=sol_reference.sol_key_summaries(q, q, block=32))
    with pytest.raises(AttentionArgumentError, match="num_warps"):
        LaunchConfig(num_warps=3)


def test_sol_workspace_bytes_counts_summaries_and_a_capped_list():
    small = sol_reference.sol_workspace_bytes(heads=56, rows=8192, seq_len=106496, head_dim=128)
    nk, nq = 106496 // 64, 8192 // 64 + 1
    summaries, lst, mask = 2 * 56 * nk * 128 * 2, 4 * 56 * nq * nk, 56 * nq * nk
    assert small > summaries + lst + mask  # bf16 summaries + the full list + the uint8 routing mask
    # plus one step of fp32 proxies, capped by PROXY_BUDGET_BYTES
    assert small < summaries + lst + mask + sol_reference.PROXY_BUDGET_BYTES + (1 << 20)
    whole = sol_reference.sol_workspace_bytes(heads=56, rows=106496, seq_len=106496, head_dim=128)
    budget = sol_reference.LIST_BUDGET_BYTES
    assert whole - summaries <= budget + budget // 4 + sol_reference.PROXY_BUDGET_BYTES + (1 << 20)  # launches split