"""The chunked final layer against ComfyUI's own H3 FinalLayer: plain heads on both generations,
a PDD head bank and per-token rows where the host has them (in-process, CPU, inference mode)."""

import pytest
import torch

from longmedia.execution.final_layer import bank_size, chunked_final_forward, host_takes_pdd_args

HIDDEN, T_DIM, VIDEO_DIM, AUDIO_DIM = 64, 24, 96, 32
SIGMAS = torch.tensor([1.0, 0.93, 0.8, 0.55, 0.3, 0.0])


@pytest.fixture(scope="module")
def h3(comfy_inprocess):
    import comfy.ldm.minimax.model as model

    return model


def needs_pdd(h3):
    if not host_takes_pdd_args(h3.FinalLayer(HIDDEN, T_DIM, VIDEO_DIM, AUDIO_DIM, 1e-5,
                                            operations=_ops())):
        pytest.skip("this ComfyUI lacks the PDD FinalLayer (forward(..., sigma, sample_sigmas, shifts))")


def _ops():
    import comfy.ops

    return comfy.ops.disable_weight_init


def make_layer(h3, n_heads, dtype, seed):
    import comfy.ops

    layer = h3.FinalLayer(HIDDEN, T_DIM, VIDEO_DIM, AUDIO_DIM, 1e-5, dtype=dtype, operations=comfy.ops.manual_cast)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for head, dim in ((layer.video_out, VIDEO_DIM), (layer.audio_out, AUDIO_DIM)):
            head.weight = torch.nn.Parameter(torch.randn(n_heads * dim, HIDDEN, generator=g) / HIDDEN ** 0.5,
                                             requires_grad=False)
            head.bias = torch.nn.Parameter(torch.randn(n_heads * dim, generator=g) * 0.1, requires_grad=False)
        for name, p in layer.named_parameters():
            if "_out" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.ndim == 1 and "norm" in name else 0.0))
    layer.requires_grad_(False)
    assert bank_size(layer.video_out) == n_heads
    return layer


def inputs(dtype, seed, per_token):
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(300, HIDDEN, generator=g).to(dtype)
    t_emb = torch.randn(3, T_DIM, generator=g).to(dtype)
    video_row = torch.randint(0, 3, (190,), generator=g) if per_token else 0
    return x, t_emb, (110, 300, video_row), (40, 110, 2)


def host_args(h3, sigma):
    if host_takes_pdd_args(h3.FinalLayer(HIDDEN, T_DIM, VIDEO_DIM, AUDIO_DIM, 1e-5, operations=_ops())):
        return (sigma, SIGMAS, (12.0, 3.0))
    return ()


@pytest.mark.parametrize("rows", [7, 64, 10_000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_head_matches_host(h3, rows, dtype):
    layer = make_layer(h3, 1, dtype, seed=rows)
    x, t_emb, vseg, aseg = inputs(dtype, rows, per_token=False)
    extra = host_args(h3, 0.8)
    with torch.inference_mode():
        v, a = layer(x, t_emb, vseg, aseg, *extra)
        cv, ca = chunked_final_forward(layer, rows)(x, t_emb, vseg, aseg, *extra)
    assert v.abs().sum() > 0 and cv.shape == v.shape and ca.shape == a.shape
    torch.testing.assert_close(cv, v, rtol=1e-5, atol=1e-5)  # fp32 heads; GEMM row blocking differs
    torch.testing.assert_close(ca, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sigma", [1.0, 0.93, 0.55, 0.3])
@pytest.mark.parametrize("n_heads", [2, 4])
def test_pdd_bank_matches_host(h3, sigma, n_heads):
    needs_pdd(h3)
    layer = make_layer(h3, n_heads, torch.float32, seed=n_heads)
    x, t_emb, vseg, aseg = inputs(torch.float32, n_heads, per_token=True)
    with torch.inference_mode():
        v, a = layer(x, t_emb, vseg, aseg, sigma, SIGMAS, (12.0, 3.0))
        cv, ca = chunked_final_forward(layer, 37)(x, t_emb, vseg, aseg, sigma, SIGMAS, (12.0, 3.0))
    assert v.shape == (190, VIDEO_DIM) and a.shape == (70, AUDIO_DIM)
    torch.testing.assert_close(cv, v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ca, a, rtol=1e-5, atol=1e-5)
    assert v.abs().sum() > 0


def test_pdd_bank_without_schedule_is_refused(h3):
    needs_pdd(h3)
    layer = make_layer(h3, 3, torch.float32, seed=5)
    x, t_emb, vseg, aseg = inputs(torch.float32, 5, per_token=False)
    with torch.inference_mode(), pytest.raises(ValueError, match="sample_sigmas"):
        chunked_final_forward(layer, 64)(x, t_emb, vseg, aseg, 0.8, None, (12.0, 3.0))


def test_installed_forward_has_the_hosts_signature(h3):
    import inspect

    layer = make_layer(h3, 1, torch.float32, seed=9)
    host = list(inspect.signature(type(layer).forward).parameters)[1:]
    assert list(inspect.signature(chunked_final_forward(layer, 64)).parameters) == host
