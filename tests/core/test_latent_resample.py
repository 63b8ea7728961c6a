"""Hi-Res's latent resampler: /32 pixel grid, frames independent, audio untouched, smooth content preserved."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.h3.latent_resample import METHODS, resample_video, target_latent_size, upscale_av, upscale_video


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def smooth_video(t=3, h=12, w=20, seed=0):
    """A band-limited latent: a few low-frequency cosines per channel and frame."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, h).view(h, 1)
    xs = torch.linspace(0, 1, w).view(1, w)
    out = torch.zeros(1, 24, t, h, w)
    for c in range(24):
        for f in range(t):
            a, b, p = (torch.rand(3, generator=g) * torch.tensor([1.5, 1.5, 6.28])).tolist()
            out[0, c, f] = torch.cos(math.pi * a * ys + p) * torch.cos(math.pi * b * xs)
    return out


@given(h=st.integers(1, 96), w=st.integers(1, 96), scale=st.floats(1.0, 2.0))
@settings(max_examples=200, deadline=None)
def test_target_size_is_even_cells_on_the_32_pixel_grid(h, w, scale):
    th, tw = target_latent_size(h, w, scale)
    assert th % 2 == 0 and tw % 2 == 0 and th >= 2 and tw >= 2
    # nearest /32 pixel size: within half a grid step of the exact product
    assert abs(th * 16 - h * 16 * scale) <= 16 + 1e-6 or th == 2
    assert abs(tw * 16 - w * 16 * scale) <= 16 + 1e-6 or tw == 2


def test_known_sizes():
    assert target_latent_size(48, 84, 1.25) == (60, 104)     # 768x1344 -> 960x1664 px (1680 is a tie: even)
    assert target_latent_size(34, 60, 1.5) == (52, 90)       # 544x960 -> 832x1440 px
    assert target_latent_size(48, 84, 1.0) == (48, 84)
    assert target_latent_size(48, 84, 2.0) == (96, 168)


@pytest.mark.parametrize("method", METHODS)
def test_shapes_dtype_and_scale_one_is_identity(method):
    video = rand(1, 24, 7, 12, 20, seed=1)
    out = upscale_video(video, 1.5, method)
    assert out.shape == (1, 24, 7, 18, 30) and out.dtype == video.dtype
    assert torch.isfinite(out).all()
    same = upscale_video(video, 1.0, method)
    assert torch.equal(same, video) and same.data_ptr() != video.data_ptr()
    half = upscale_video(video.to(torch.bfloat16), 1.25, method)
    assert half.dtype == torch.bfloat16 and half.shape == (1, 24, 7, 16, 24)


@pytest.mark.parametrize("method", METHODS)
def test_frames_are_resampled_independently(method):
    video = rand(1, 24, 6, 10, 14, seed=2)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    a = resample_video(video, (16, 22), method)[:, :, perm]
    b = resample_video(video[:, :, perm], (16, 22), method)
    assert torch.equal(a, b)
    # one frame changed -> only that frame of the output changes
    changed = video.clone()
    changed[:, :, 2] += rand(1, 24, 10, 14, seed=3)
    diff = (resample_video(changed, (16, 22), method) - resample_video(video, (16, 22), method)).abs()
    per_frame = diff.amax(dim=(0, 1, 3, 4))
    assert per_frame[2] > 0.1 and per_frame[torch.arange(6) != 2].max() == 0


@pytest.mark.parametrize("method", ["bicubic", "bilinear"])
def test_smooth_content_is_preserved(method):
    video = smooth_video(seed=4)
    up = resample_video(video, (24, 40), method)
    back = resample_video(up, (12, 20), "area")
    err = ((back - video).norm() / video.norm()).item()
    assert err < 0.06, err
    assert abs(up.mean().item() - video.mean().item()) < 0.02
    assert abs(up.std().item() / video.std().item() - 1) < 0.05


def test_constant_latent_stays_constant():
    video = torch.full((1, 24, 2, 6, 8), 0.37) + torch.arange(24).view(1, 24, 1, 1, 1) * 0.01
    for method in METHODS:
        out = resample_video(video, (10, 12), method)
        assert torch.allclose(out, out[..., :1, :1].expand_as(out), atol=1e-5), method


def test_audio_is_the_same_tensor_bit_for_bit():
    video, audio = rand(1, 24, 2, 8, 8, seed=5), rand(1, 32, 2, 13, seed=6)
    before = audio.clone()
    new_video, new_audio = upscale_av(video, audio, 1.5)
    assert new_audio is audio and torch.equal(new_audio, before)
    assert new_video.shape == (1, 24, 2, 12, 12)


@pytest.mark.parametrize("scale", [0.5, 0.99, 2.01, float("nan"), "1.5", True])
def test_bad_scale_is_named(scale):
    with pytest.raises(LongMediaInputError, match="scale") as info:
        upscale_video(rand(1, 24, 2, 4, 4), scale)
    assert "1.0-2.0" in str(info.value)


def test_bad_method_and_shape_are_named():
    with pytest.raises(LongMediaInputError, match="method"):
        resample_video(rand(1, 24, 2, 4, 4), (8, 8), "lanczos")
    with pytest.raises(LongMediaInputError, match="video latent"):
        upscale_video(rand(1, 24, 4, 4), 1.5)
    with pytest.raises(LongMediaInputError, match="latent height"):
        target_latent_size(0, 4, 1.5)
