"""comfy-kitchen's attention backends with the kitchen the host venv ships (0.2.31 on the August tree, 0.2.36 on
the upstream one): the probes explain themselves, and kitchen's own eager sol_attn (what it runs without CUDA)
matches exact attention within the declared tolerance. int8_attention has no CPU path (CUDA only)."""

from __future__ import annotations

import math

import pytest
import torch

from longmedia.attention import backends as builtin
from longmedia.attention import kitchen
from longmedia.attention.protocol import merge_heads
from longmedia.attention.registry import BuildContext

pytestmark = pytest.mark.usefixtures("comfy_inprocess")

VERSION = kitchen.installed_version()
NEW_ENOUGH = VERSION is not None and VERSION >= kitchen.MIN_VERSION


def test_probes_explain_this_host():
    results = {r.name: r for r in builtin.default_registry().check_availability(("kitchen_sol", "kitchen_int8", "kitchen_sol_chunked"))}
    assert not results["kitchen_sol_chunked"].available and "QKV producer" in results["kitchen_sol_chunked"].reason
    for name in ("kitchen_sol", "kitchen_int8"):
        result = results[name]
        if VERSION is None:
            assert not result.available and "not installed" in result.reason
        elif not NEW_ENOUGH:
            assert not result.available and "is older than comfy-kitchen >= 0.2.36" in result.reason
        elif not torch.cuda.is_available():
            assert not result.available and "need a CUDA device" in result.reason
        else:
            assert result.available, result.reason


def structured(heads=2, seq=1024, dim=128, seed=0):
    """q/k from smooth positional features plus noise (attention local, like video rows), v random."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(seq).float()[:, None]
    angle = t * torch.exp(-torch.arange(dim // 2).float() / (dim // 2) * math.log(2000.0))
    base = torch.cat([angle.cos(), angle.sin()], -1) * math.sqrt(2)
    out = []
    for i in range(3):
        x = base + 0.3 * torch.randn(seq, dim, generator=g) if i < 2 else torch.randn(seq, dim, generator=g)
        if i < 2:
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
        out.append(x.expand(heads, seq, dim).unsqueeze(0).contiguous())
    return out


def rel_l2(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.skipif(not NEW_ENOUGH, reason=f"comfy-kitchen {VERSION} has no sol_attn (needs >= 0.2.36)")
def test_kitchen_sol_eager_matches_exact_within_its_declared_tolerance():
    spec = builtin.default_registry().get("kitchen_sol")
    q, k, v = structured()
    exact = merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v))
    # every block routed exactly: kitchen's Sol is exact attention (wiring: layout, scale, head merge)
    everything = spec.factory(BuildContext(tau=-1e9))(q, k, v, q_offset=0)
    assert rel_l2(everything, exact) < 1e-5
    sinks = spec.factory(BuildContext(tau=1e9, sink_ranges=((0, 1024),)))(q, k, v, q_offset=0)  # all keys sinks
    assert rel_l2(sinks, exact) < 1e-5
    pooled = spec.factory(BuildContext(tau=1e9))(q, k, v, q_offset=0)  # only the diagonal band exact
    assert rel_l2(pooled, exact) > 1e-3  # the approximation is real
    for ctx in (BuildContext(tau=1.0), BuildContext(tau=0.5), BuildContext(topk_ratio=0.2)):
        out = spec.factory(ctx)(q, k, v, q_offset=0)
        assert out.shape == exact.shape and rel_l2(out, exact) <= spec.rel_l2_bound, ctx
    scaled = spec.factory(BuildContext(tau=-1e9, sm_scale=0.05))(q, k, v, q_offset=0)
    assert rel_l2(scaled, merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.05))) < 1e-5


@pytest.mark.skipif(not NEW_ENOUGH, reason=f"comfy-kitchen {VERSION} has no int8_attention (needs >= 0.2.36)")
def test_kitchen_int8_has_no_cpu_path():
    q, k, v = structured(seq=128)
    fn = builtin.default_registry().get("kitchen_int8").factory(BuildContext())
    with pytest.raises((ValueError, RuntimeError), match="CUDA"):
        fn(q, k, v, q_offset=0)
