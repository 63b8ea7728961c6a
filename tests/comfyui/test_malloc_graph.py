"""ComfyUI 0.38+ malloc graphs: the streamed block and the chunked final layer run with recording paused."""

import contextlib

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes


@pytest.fixture(scope="module")
def prefetch(comfy_inprocess):
    import comfy.model_prefetch

    return comfy.model_prefetch


def needs_malloc_graphs(prefetch):
    if not hasattr(prefetch, "pause_malloc_graph"):
        pytest.skip("this ComfyUI has no comfy.model_prefetch.pause_malloc_graph (malloc graphs, ComfyUI 0.38+)")


def recording_pause(state):
    @contextlib.contextmanager
    def pause(sync=False):
        state["depth"] += 1
        try:
            yield
        finally:
            state["depth"] -= 1
    return pause


def block_and_inputs(seed=0):
    import comfy.ldm.minimax.model as h3
    import comfy.ops

    g = torch.Generator().manual_seed(seed)
    block = h3.DiTBlock(64, 2, 32, 128, 24, 1e-5, 1e-5, operations=comfy.ops.disable_weight_init)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.ndim == 2 else 10) + (p.ndim == 1))
    block.requires_grad_(False)
    s = 70
    pos = torch.arange(s, dtype=torch.float32)
    freqs = torch.outer(pos, torch.rand(6, generator=g))
    rope = torch.stack([freqs.cos(), -freqs.sin(), freqs.sin(), freqs.cos()], dim=-1).view(1, s, 1, 6, 2, 2)
    return block, torch.randn(s, 64, generator=g), torch.randn(2, 24, generator=g), [(0, 20, 1), (20, s, 3)], rope


def test_streamed_block_runs_outside_the_malloc_graph(prefetch, monkeypatch):
    needs_malloc_graphs(prefetch)
    from longmedia.attention.protocol import sdpa_attention
    from longmedia.comfy.patching.block_patch import streamed_replacement

    state, seen = {"depth": 0}, []
    monkeypatch.setattr(prefetch, "pause_malloc_graph", recording_pause(state))

    def attention(q, k, v, q_offset=0):
        seen.append(state["depth"])
        return sdpa_attention(q, k, v, q_offset=q_offset)

    block, x, t_emb, segments, rope = block_and_inputs()
    fn = streamed_replacement(block, 0, ChunkSizes(32, 0, 32), lambda topts, heads: attention)
    with torch.inference_mode():
        out = fn({"img": x.clone(), "t_emb": t_emb, "mod_segments": segments, "rope_freqs": rope,
                  "transformer_options": {}}, {})["img"]
    assert torch.isfinite(out).all() and not torch.equal(out, x)
    assert seen and all(d == 1 for d in seen) and state["depth"] == 0


def test_final_layer_patch_runs_outside_the_malloc_graph(prefetch, monkeypatch):
    needs_malloc_graphs(prefetch)
    from longmedia.comfy.patching.block_patch import outside_malloc_graph

    state, seen = {"depth": 0}, []
    monkeypatch.setattr(prefetch, "pause_malloc_graph", recording_pause(state))

    def forward(x, t_emb, video_seg, audio_seg, sigma, sample_sigmas, shifts):
        seen.append(state["depth"])
        return x

    wrapped = outside_malloc_graph(forward)
    assert wrapped(1, 2, 3, 4, 5, 6, 7) == 1 and seen == [1] and state["depth"] == 0
