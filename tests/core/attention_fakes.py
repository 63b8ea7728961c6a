"""Shared by the attention tests: H3-like fused q/k/v views and fake backends that log their calls."""

import torch

from longmedia.attention import backends as builtin
from longmedia.attention.protocol import sdpa_attention
from longmedia.attention.registry import BackendRegistry, BackendSpec

ALL = frozenset(builtin.default_registry().names) - {"flash4"}
"""Every backend as if installed, but the optional flash-attn-4 (its own tests: test_flash4_backend.py)."""


def rand_qkv(seed=0, heads=4, rows=96, seq=160, dim=32, dtype=torch.float32):
    """q rows and k/v as strided views into one fused [seq, 3*heads*dim] buffer, like H3's."""
    g = torch.Generator().manual_seed(seed)
    fused = torch.randn(seq, 3 * heads * dim, generator=g).to(dtype)
    q, k, v = (t.view(seq, heads, dim).transpose(0, 1).unsqueeze(0) for t in fused.split(heads * dim, dim=-1))
    return q[:, :, :rows], k, v


def fake_spec(name, log, exact=True, rank=0, **fields):
    def factory(ctx):
        def fn(q, k, v, *, q_offset=0):
            log.append((name, ctx, q_offset))
            return sdpa_attention(q, k, v) + (0.0 if exact else 1.0)  # Sol marks its output
        return fn
    fields.setdefault("cpu", True)
    fields.setdefault("takes_tau", not exact)  # an approximate fake stands in for Sol
    fields.setdefault("dtypes", builtin.FLOATS)
    return BackendSpec(name=name, exact=exact, factory=factory, speed_rank=rank, **fields)


def fake_registry(log):
    return BackendRegistry((fake_spec("exact_fake", log), fake_spec("sol_fake", log, exact=False)))
