"""Our attention override and existing_attention_fn against the real ComfyUI (in-process, CPU)."""

import pytest
import torch

from longmedia.attention.backends import FLOATS, default_registry
from longmedia.attention.dispatcher import resolve_attention
from longmedia.attention.protocol import sdpa_attention
from longmedia.attention.registry import BackendSpec
from longmedia.attention.schedule import SolSettings
from longmedia.comfy.patching.attention_override import (
    ROW_SPANS_KEY,
    existing_attention_fn,
    install_attention_override,
    installed_attention,
)

HEADS, DIM, SEQ = 4, 32, 192


@pytest.fixture(scope="module")
def attn(comfy_inprocess):
    import comfy.ldm.modules.attention as attention
    return attention


def spy_registry(log):
    """The built-in registry plus a fastest exact CPU backend and a Sol stand-in that record their calls."""
    def spy(name, exact):
        def factory(ctx):
            def fn(q, k, v, *, q_offset=0):
                log.append((name, ctx.tau, ctx.sink_ranges, q_offset))
                return sdpa_attention(q, k, v)
            return fn
        return BackendSpec(name=name, exact=exact, dtypes=FLOATS, cpu=True, factory=factory, speed_rank=-1,
                           takes_tau=not exact)
    return default_registry().with_backends(spy("spy_exact", True), spy("spy_sol", False))


def choose(mode, registry, **kw):
    return resolve_attention(mode, seq_len=SEQ, heads=HEADS, head_dim=DIM, dtype=torch.float32,
                             device_capability=None, registry=registry, **kw)


def qkv(seed):
    g = torch.Generator().manual_seed(seed)
    fused = torch.randn(SEQ, 3 * HEADS * DIM, generator=g)
    return tuple(t.view(SEQ, HEADS, DIM).transpose(0, 1).unsqueeze(0) for t in fused.split(HEADS * DIM, dim=-1))


def stock_call(attn, q, k, v, opts):
    """How H3's Attention.forward calls ComfyUI (containers where this ComfyUI has them)."""
    box = getattr(attn, "AttentionTensorContainer", lambda t: t)
    return attn.optimized_attention(box(q), box(k), box(v), HEADS, mask=None, skip_reshape=True,
                                    transformer_options=opts)


def test_override_is_honoured_with_containers(attn):
    log = []
    registry = spy_registry(log)
    opts = {}
    install_attention_override(opts, choose("auto", registry), registry=registry)
    q, k, v = qkv(0)
    boxes = [attn.AttentionTensorContainer(t) for t in (q, k, v)]
    out = attn.optimized_attention(*boxes, HEADS, mask=None, skip_reshape=True, transformer_options=opts)
    assert [entry[0] for entry in log] == ["spy_exact"]
    assert all(b.tensor is None for b in boxes)  # our container_function took them
    torch.testing.assert_close(out, sdpa_attention(q, k, v), rtol=1e-5, atol=1e-5)
    plain = attn.optimized_attention(q, k, v, HEADS, mask=None, skip_reshape=True, transformer_options=opts)
    assert len(log) == 2 and torch.equal(plain, out)  # the tensor path routes too


def test_existing_mode_passes_through_bit_for_bit(attn):
    q, k, v = qkv(1)
    direct = stock_call(attn, q, k, v, {})
    opts = {}
    install_attention_override(opts, choose("existing", default_registry(),
                                            existing_name=installed_attention().__name__))
    assert torch.equal(stock_call(attn, q, k, v, opts), direct)


def test_existing_attention_fn_equals_a_direct_call(attn):
    q, k, v = qkv(2)
    direct = stock_call(attn, q, k, v, {})
    assert torch.equal(existing_attention_fn({}, HEADS)(q, k, v, q_offset=0), direct)
    log = []
    registry = spy_registry(log)
    opts = {}
    install_attention_override(opts, choose("auto", registry), registry=registry)
    assert torch.equal(existing_attention_fn(opts, HEADS)(q, k, v, q_offset=0), direct)
    assert log == []  # our own override is bypassed, so `existing` is really ComfyUI's
    rows = existing_attention_fn({}, HEADS)(q[:, :, 64:128], k, v, q_offset=64)  # one query chunk
    assert torch.equal(rows, stock_call(attn, q[:, :, 64:128], k, v, {}))


def test_h3_attention_module_routes_scheduled_sol(attn, comfy_inprocess):
    import comfy.ldm.minimax.model as h3
    import comfy.ops

    g = torch.Generator().manual_seed(3)
    module = h3.Attention(HEADS * DIM, HEADS, DIM, 1e-6, dtype=torch.float32, operations=comfy.ops.disable_weight_init)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.ndim == 2 else 1.0))
    x = torch.randn(SEQ, HEADS * DIM, generator=g)
    stock = module(x, transformer_options={})
    log = []
    registry = spy_registry(log)
    settings = SolSettings(min_tokens=0, dense_percent=0.5, curve="linear")
    opts = {"sample_sigmas": torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]),
            ROW_SPANS_KEY: ((0, 40, "text"), (40, 72, "audio"), (72, SEQ, "video"))}
    install_attention_override(opts, choose("scheduled_sol", registry, sol_settings=settings), registry=registry)
    for sigma, backend, tau in ((1.0, "spy_exact", None), (0.5, "spy_sol", 1.3 - 0.5 / 3),
                                (0.25, "spy_sol", 0.8)):
        opts["sigmas"] = torch.tensor([sigma])
        out = module(x, transformer_options=opts)
        name, got_tau, sinks, _ = log[-1]
        assert name == backend and (got_tau == pytest.approx(tau) if tau else got_tau is None)
        torch.testing.assert_close(out, stock, rtol=1e-4, atol=1e-4)  # the spies compute exact attention
    assert sinks == ((0, 72),)
