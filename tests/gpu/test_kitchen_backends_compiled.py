"""comfy-kitchen's compiled int8_attention and sol_attn through LongMedia's registry backends, in bf16 on CUDA:
within their declared rel-L2 of exact attention, in the executor's layout (strided views into a fused buffer).
Skipped without comfy-kitchen >= 0.2.36 (the base GPU image's kitchen may be older: with carry
[".whl_kitchen"], `. tools/gpu/kitchen_site.sh` first)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from longmedia.attention import backends as builtin
from longmedia.attention import kitchen
from longmedia.attention.protocol import merge_heads
from longmedia.attention.registry import BuildContext

VERSION = kitchen.installed_version()
pytestmark = pytest.mark.skipif(VERSION is None or VERSION < kitchen.MIN_VERSION,
                                reason=f"comfy-kitchen {VERSION} is not >= 0.2.36")
CUDA = torch.device("cuda")


def fused_qkv(seq: int, heads: int = 8, head_dim: int = 128, seed: int = 0):
    """q/k/v as [1, H, S, D] views into one [S, 3*H*D] bf16 buffer (H3's layout); q/k share a low-rank part."""
    g = torch.Generator(CUDA).manual_seed(seed)
    low = torch.randn(seq, 16, generator=g, device=CUDA) @ torch.randn(16, heads * head_dim, generator=g, device=CUDA)
    parts = []
    for i in range(3):
        x = torch.randn(seq, heads * head_dim, generator=g, device=CUDA)
        if i < 2:
            x = (low + 0.5 * x).view(seq, heads, head_dim)
            x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * 1.5).view(seq, -1)
        parts.append(x)
    fused = torch.cat(parts, -1).to(torch.bfloat16)
    return tuple(t.view(seq, heads, head_dim).transpose(0, 1).unsqueeze(0) for t in fused.split(heads * head_dim, -1))


def rel_l2(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_probes_pass_here():
    for result in builtin.default_registry().check_availability(("kitchen_sol", "kitchen_int8")):
        assert result.available, result.reason


def test_int8_attention_per_query_chunk_within_its_bound():
    q, k, v = fused_qkv(4160)
    exact = merge_heads(F.scaled_dot_product_attention(q.float(), k.float(), v.float()))
    fn = builtin.default_registry().build("kitchen_int8", BuildContext())
    spec = builtin.default_registry().get("kitchen_int8")
    out = torch.cat([fn(q[:, :, r:r + 1024], k, v, q_offset=r) for r in range(0, 4160, 1024)], dim=1)
    assert out.shape == exact.shape and out.dtype == torch.bfloat16
    assert rel_l2(out, exact) <= spec.rel_l2_bound


def test_sol_attn_whole_sequence_within_its_bound_and_exact_when_everything_routes():
    seq = 8200  # ragged: not a multiple of the 64-row block
    q, k, v = fused_qkv(seq)
    exact = merge_heads(F.scaled_dot_product_attention(q.float(), k.float(), v.float()))
    spec = builtin.default_registry().get("kitchen_sol")
    dense = builtin.default_registry().build("kitchen_sol", BuildContext(tau=-100.0))(q, k, v, q_offset=0)
    sinks = ((0, 512),)
    errors = []
    for ctx in (BuildContext(tau=1.0, sink_ranges=sinks, exact_query_ranges=sinks),
                BuildContext(topk_ratio=0.2, sink_ranges=sinks, exact_query_ranges=sinks)):
        out = builtin.default_registry().build("kitchen_sol", ctx)(q, k, v, q_offset=0)
        assert out.shape == exact.shape and out.dtype == torch.bfloat16
        errors.append(rel_l2(out, exact))
    assert max(errors) <= spec.rel_l2_bound, errors
    # every block exact leaves only kitchen's INT8 carriers (cos ~0.999 by its own docs): no worse than routing
    assert rel_l2(dense, exact) <= min(min(errors), 0.05), (rel_l2(dense, exact), errors)
