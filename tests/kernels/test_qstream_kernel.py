"""Exact query-streaming Triton kernel vs its fp32 reference and SDPA, under TRITON_INTERPRET=1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is not installed: `pip install triton` to run the interpreter kernel tests")

from longmedia.kernels import qstream_reference  # noqa: E402
from longmedia.kernels.int8_kv import quantize_kv_int8  # noqa: E402
from longmedia.kernels.launch import AttentionArgumentError, LaunchConfig  # noqa: E402
from longmedia.kernels.qstream_attention import qstream_attention  # noqa: E402
from longmedia.testing.error_bounds import error_bound, naive_attention  # noqa: E402

TOL = {torch.float32: dict(atol=2e-6, rtol=1e-5), torch.float16: dict(atol=1e-3, rtol=1e-3)}


def sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_kernel_matches_reference_and_sdpa_on_fused_strided_ragged_views(fused_qkv, dtype):
    q, k, v = fused_qkv(131, 37, 2, 64, dtype=dtype)  # neither length a multiple of any tile
    assert not q.is_contiguous() and k.stride(2) == 3 * 2 * 64
    out = qstream_attention(q, k, v)
    ref = qstream_reference.qstream_attention(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype and out.transpose(1, 2).is_contiguous()
    # within twice the error of plain torch attention computed in this dtype (FlashAttention's bound)
    exact, baseline = sdpa(q, k, v), naive_attention(q, k, v)
    for got in (out, ref):
        bound = error_bound(got, exact, baseline)
        assert bound.holds, bound


@pytest.mark.parametrize("head_dim", [32, 128])
def test_other_head_dims(head_dim):
    g = torch.Generator().manual_seed(head_dim)
    q, k, v = (torch.randn(1, 1, n, head_dim, generator=g).half() for n in (21, 70, 70))
    bound = error_bound(qstream_attention(q, k, v), sdpa(q, k, v), naive_attention(q, k, v))
    assert bound.holds, bound


def test_batch_sm_scale_out_buffer_and_configs():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, n, 64, generator=g) for n in (40, 97, 97))
    buf = torch.empty(2, 40, 3, 64)
    out = qstream_attention(q, k, v, sm_scale=0.2, out=buf.transpose(1, 2))
    assert out.data_ptr() == buf.data_ptr()
    expected, baseline = sdpa(q, k, v, scale=0.2), naive_attention(q, k, v, scale=0.2)
    assert error_bound(out, expected, baseline).holds, error_bound(out, expected, baseline)
    for cfg in (LaunchConfig(block_m=16, block_n=64, num_warps=4, num_stages=1),
                LaunchConfig(block_m=64, block_n=16, num_warps=4, num_stages=1)):
        bound = error_bound(qstream_attention(q, k, v, sm_scale=0.2, config=cfg), expected, baseline)
        assert bound.holds, (cfg, bound)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_int8_kv_matches_int8_reference(structured_qkv, dtype):
    q, k, v = structured_qkv(1, 2, (2, 5, 7), 64, text=9, dtype=dtype)  # 79 rows
    k8, ks = quantize_kv_int8(k)
    # V quantised into a [B, S, H, D]-laid-out int8 buffer: strided int8 works too
    v8, vs = quantize_kv_int8(v, out=torch.empty(1, 79, 2, 64, dtype=torch.int8).transpose(1, 2))
    out = qstream_attention(q, k8, v8, k_scale=ks, v_scale=vs)
    ref = qstream_reference.qstream_attention(q, k8, v8, k_scale=ks, v_scale=vs)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    exact = qstream_reference.qstream_attention(q, k, v)
    err = float((out.double() - exact.double()).norm() / exact.double().norm())
    assert err < 1e-2


def test_64bit_offsets_past_2_pow_31_elements():
    """Rows of an int8 K/V buffer 2^30 elements apart: row 2 sits past 2^31, int32 offsets would wrap."""
    heads, dim, rows, stride = 2, 64, 3, 1 << 30
    try:
        big = torch.empty((rows - 1) * stride + heads * dim, dtype=torch.int8)  # virtual: only 3 rows touched
    except RuntimeError as e:  # allocation refused on a small box
        pytest.skip(f"cannot reserve a 2 GiB virtual buffer: {e}")
    g = torch.Generator().manual_seed(6)
    small = torch.randint(-127, 128, (rows, heads, dim), generator=g, dtype=torch.int8)
    for r in range(rows):
        big[r * stride:r * stride + heads * dim] = small[r].reshape(-1)
    kv = big.as_strided((1, heads, rows, dim), (0, dim, stride, 1))
    scale = torch.rand(1, heads, rows, generator=g) / 64 + 1e-3
    q = torch.randn(1, heads, 5, dim, generator=g)
    out = qstream_attention(q, kv, kv, k_scale=scale, v_scale=scale)
    dense = small.permute(1, 0, 2).unsqueeze(0).contiguous()
    ref = qstream_reference.qstream_attention(q, dense, dense, k_scale=scale, v_scale=scale)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


def test_kernel_rejects_bad_arguments():
    q = torch.randn(1, 2, 8, 64)
    with pytest.raises(AttentionArgumentError, match="out must be"):
        qstream_attention(q, q, q, out=torch.empty(1, 2, 8, 32))
    with pytest.raises(AttentionArgumentError, match="dtype"):
        qstream_attention(q, q.half(), q.half())
