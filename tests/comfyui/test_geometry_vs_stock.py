"""Our packed-sequence geometry against ComfyUI's own H3 code, in-process on the CPU.

The stock nodes (EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, MiniMaxH3AddGuide,
MiniMaxH3ReferenceToVideo) run for real with the real Qwen tokenizer and Qwen vision preprocessing;
only the VAEs and the text encoder are fakes that return tensors of the shapes the real ones return
(the VAE's temporal contract: 1 frame -> 1 latent, 17k+5 frames -> 5k+2; audio: one latent per 800
samples at 32 kHz). Their outputs are packed by the stock `PackedLayout` exactly as `extra_conds` does,
and segments and seq_len are compared with `build_geometry`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from longmedia.h3 import lattice as L
from longmedia.h3.dims import H3_FULL
from longmedia.h3.profiles import ModelProfile
from longmedia.h3.references import KeyframeSpec, ReferenceSpec
from longmedia.job.geometry import build_geometry

PROMPT = "A red fox trots through fresh snow at dawn, its breath fogging, birds calling in the pines."


class FakeVideoVAE:
    """Shapes of H3's video VAE: [F, H, W, 3] pixels -> [1, 24, T, H/16, W/16] latents."""

    def encode(self, pixels):
        frames, h, w = pixels.shape[0], pixels.shape[1], pixels.shape[2]
        t = 1 if frames == 1 else (frames - 5) // 17 * 5 + 2
        return torch.zeros(1, 24, t, h // 16, w // 16)


class FakeAudioVAE:
    audio_sample_rate = 32000

    def encode(self, waveform):  # [1, L, channels] -> [1, 32, 2, ceil(L / 800)]
        return torch.zeros(1, 32, 2, math.ceil(waveform.shape[1] / 800))


class FakeClip:
    """The real H3 tokenizer; 'encoding' returns one row per token, vision blocks at their merged size."""

    def __init__(self, h3):
        self.h3 = h3
        self.tokenizer = h3.Tokenizer()

    def tokenize(self, text, **kwargs):
        return self.tokenizer.tokenize_with_weights(text, **kwargs)

    def _rows(self, token) -> int:
        if not isinstance(token, dict):
            return 1
        if token.get("minimax_video_block"):
            _, grid = self.h3.te.process_video_block(token["data"])
        else:
            _, grid = self.h3.qwen_vl.process_qwen2vl_images(token["data"], patch_size=16)
        return int(grid[0, 1] * grid[0, 2]) // 4

    def encode_from_tokens_scheduled(self, tokens):
        n = sum(self._rows(tok) for tok, *_ in tokens["qwen3vl_32b"][0])
        return [[torch.zeros(1, n, 8), {}]]


@pytest.fixture(scope="module")
def h3(comfy_inprocess):
    import comfy.ldm.minimax.model as model
    import comfy.ops
    import comfy.text_encoders.minimax as te
    import comfy.text_encoders.qwen_vl as qwen_vl
    import comfy_extras.nodes_minimax_h3 as nodes_h3

    ns = SimpleNamespace(model=model, nodes=nodes_h3, te=te, qwen_vl=qwen_vl, ops=comfy.ops,
                         Tokenizer=te.MiniMaxH3Tokenizer)
    ns.clip = FakeClip(ns)
    ns.prompt_tokens = len(ns.clip.tokenizer._text_ids(PROMPT))
    return ns


def _image(frames, h, w, seed=0):
    return torch.rand(frames, h, w, 3, generator=torch.Generator().manual_seed(seed))


def _audio(seconds, seed=0):
    n = round(seconds * 32000)
    return {"waveform": torch.rand(1, 2, n, generator=torch.Generator().manual_seed(seed)) * 2 - 1,
            "sample_rate": 32000}


def _stock_layout(h3, cond, latent):
    video, audio = latent["samples"].tensors
    extra = cond[0][1]
    layout = h3.model.PackedLayout(cond[0][0].shape[1], video.shape[2], (video.shape[3] + 1) // 2 * 2,
                                   (video.shape[4] + 1) // 2 * 2, audio.shape[-1],
                                   keyframes=extra.get("minimax_keyframes"), refs=extra.get("minimax_refs"))
    return layout, tuple(video.shape), tuple(audio.shape)


def _assert_same(layout, vshape, ashape, g):
    assert [(kind, b - a) for a, b, kind in layout.segments] == [(s.kind, s.rows) for s in g.row_spans]
    assert layout.seq_len == g.seq_len
    assert vshape == g.video_latent_shape and ashape == g.audio_latent_shape


@pytest.mark.parametrize("width, height, length", [(1344, 768, 240), (1280, 720, 120), (1920, 1080, 72),
                                                   (768, 1344, 300), (1008, 592, 5), (640, 352, 3600)])
def test_t2va_latent_and_layout(h3, width, height, length):
    latent = h3.nodes.EmptyMiniMaxH3LatentAV.execute(width, height, length)[0]
    cond = h3.clip.encode_from_tokens_scheduled(h3.clip.tokenize(PROMPT))
    g = build_geometry(width, height, frames=length, text_tokens=h3.prompt_tokens)
    _assert_same(*_stock_layout(h3, cond, latent), g)


def test_seconds_snap_like_the_node(h3):
    for seconds in (1.0, 5.0, 10.0, 12.5, 30.0):
        frames = math.ceil(seconds * 24)
        assert L.frames_for_seconds(seconds) == h3.nodes.temporal_shape(frames)[0]
        g = build_geometry(1344, 768, seconds=seconds)
        assert (g.frames, g.latent_frames, g.audio_latent_frames) == h3.nodes.temporal_shape(frames)


def test_fl2va_first_and_last_frame(h3):
    out = h3.nodes.MiniMaxH3ImageToVideo.execute(h3.clip, FakeVideoVAE(), PROMPT, 1344, 768, 124,
                                                 first_frame=_image(1, 720, 1280, 1),
                                                 last_frame=_image(1, 900, 900, 2))
    cond, latent = out[0], out[1]
    g = build_geometry(1344, 768, frames=124, text_tokens=h3.prompt_tokens,
                       keyframes=(KeyframeSpec(0, in_prompt=True), KeyframeSpec(-1, in_prompt=True)))
    _assert_same(*_stock_layout(h3, cond, latent), g)


def test_add_guide_clip_and_audio(h3):
    latent = h3.nodes.EmptyMiniMaxH3LatentAV.execute(1280, 720, 200)[0]
    cond = h3.clip.encode_from_tokens_scheduled(h3.clip.tokenize(PROMPT))
    cond = h3.nodes.MiniMaxH3AddGuide.execute(cond, latent, 40, vae=FakeVideoVAE(), audio_vae=FakeAudioVAE(),
                                              image=_image(30, 360, 640, 3), audio=_audio(9.0))[0]
    cond = h3.nodes.MiniMaxH3AddGuide.execute(cond, latent, -1, vae=FakeVideoVAE(), image=_image(1, 360, 640))[0]
    g = build_geometry(1280, 720, frames=200, text_tokens=h3.prompt_tokens,
                       keyframes=(KeyframeSpec(40, frames=22, audio_seconds=9.0), KeyframeSpec(-1)))
    _assert_same(*_stock_layout(h3, cond, latent), g)


REF_SETS = {
    "pictures": dict(ref_images=[(1, 1600, 900), (1, 512, 2048)]),
    "video+soundtrack": dict(ref_videos=[(60, 360, 640)], ref_video_audios=[2.5]),
    "everything": dict(ref_images=[(1, 1024, 1024)], ref_videos=[(50, 400, 300), (30, 720, 1280)],
                       ref_video_audios=[None, 1.25], ref_audios=[3.0, 0.5]),
}


def _stock_refs(h3, width, height, length, sizing, ref_images=(), ref_videos=(), ref_video_audios=(), ref_audios=()):
    images = {f"ref_image_{i + 1}": _image(*s, seed=10 + i) for i, s in enumerate(ref_images)}
    videos = {f"ref_video_{i + 1}": _image(*s, seed=20 + i) for i, s in enumerate(ref_videos)}
    tracks = {f"ref_video_audio_{i + 1}": _audio(a, 30 + i) for i, a in enumerate(ref_video_audios) if a}
    audios = {f"ref_audio_{i + 1}": _audio(a, 40 + i) for i, a in enumerate(ref_audios)}
    out = h3.nodes.MiniMaxH3ReferenceToVideo.execute(clip=h3.clip, vae=FakeVideoVAE(), audio_vae=FakeAudioVAE(),
                                                     prompt=PROMPT, width=width, height=height, length=length,
                                                     ref_image_size=sizing, ref_images=images, ref_videos=videos,
                                                     ref_video_audios=tracks, ref_audios=audios)
    return out[0], out[1]


def _our_refs(ref_images=(), ref_videos=(), ref_video_audios=(), ref_audios=()):
    refs = [ReferenceSpec("picture", w, h) for _, h, w in ref_images]
    tracks = list(ref_video_audios) + [None] * len(ref_videos)
    refs += [ReferenceSpec("video", w, h, frames=n, with_audio=bool(tracks[i]), audio_seconds=tracks[i] or 0.0)
             for i, (n, h, w) in enumerate(ref_videos)]
    refs += [ReferenceSpec("audio", seconds=a) for a in ref_audios]
    return tuple(refs)


@pytest.mark.parametrize("name", sorted(REF_SETS))
@pytest.mark.parametrize("sizing", ["match", "max"])
def test_ref2va_layout(h3, name, sizing):
    kw = REF_SETS[name]
    cond, latent = _stock_refs(h3, 1344, 768, 124, sizing, **kw)
    g = build_geometry(1344, 768, frames=124, text_tokens=h3.prompt_tokens, references=_our_refs(**kw),
                       reference_budget="max", ref_image_size=sizing)
    _assert_same(*_stock_layout(h3, cond, latent), g)


def test_budget_caps_are_what_the_stock_node_then_keeps(h3):
    """Setup hands the stock node references already cut to the budget; the node must not change them."""
    kw = REF_SETS["everything"]
    g = build_geometry(1344, 768, frames=124, text_tokens=h3.prompt_tokens, references=_our_refs(**kw),
                       reference_budget="low")
    assert any(r.capped for r in g.references)
    pics = [r for r in g.references if r.spec.kind == "picture"]
    vids = [r for r in g.references if r.spec.kind == "video"]
    auds = [r for r in g.references if r.spec.kind == "audio"]
    capped = dict(ref_images=[(1, r.height, r.width) for r in pics],
                  ref_videos=[(r.frames, r.height, r.width) for r in vids],
                  ref_video_audios=[r.audio_latent_frames / 40 if r.spec.with_audio else None for r in vids],
                  ref_audios=[r.audio_latent_frames / 40 for r in auds])
    cond, latent = _stock_refs(h3, 1344, 768, 124, "match", **capped)
    _assert_same(*_stock_layout(h3, cond, latent), g)


def test_presets_count_what_comfyui_builds(h3):
    with torch.device("meta"):
        model = h3.model.MiniMaxH3Model(dtype=torch.bfloat16, operations=h3.ops.disable_weight_init)
    stock = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    assert ModelProfile.preset("h3-bf16").param_count == stock
    profile = ModelProfile.from_module(model)
    assert profile.dims == H3_FULL and profile.param_count == stock
