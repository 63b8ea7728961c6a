"""Hi-Res's built-in latent resampler: the H3 video latent resized frame by frame, on the /32 pixel grid.

H3 video latents are [B, 24, T, H/16, W/16] and the DiT patches them 1x2x2, so a size on the /32
pixel grid is an even number of latent cells. Frames are resized independently (T never changes:
the 17k+5 frame lattice and the audio timeline stay as they are); the audio stream is not touched.
Pure torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import LongMediaInputError, check_choice, check_float
from . import lattice as L

METHODS = ("bicubic", "bilinear", "area", "nearest-exact")
MIN_SCALE = 1.0
MAX_SCALE = 2.0
_SMOOTH = ("bicubic", "bilinear")


def target_pixels(pixels: int, scale: float) -> int:
    """`pixels * scale` rounded to the nearest multiple of 32 (at least 32)."""
    return L.round_canvas(pixels * scale)


def target_latent_size(latent_h: int, latent_w: int, scale: float) -> tuple[int, int]:
    """(h, w) in latent cells of a latent_h x latent_w latent scaled by `scale`: even, i.e. /32 pixels."""
    scale = check_float("scale", scale, MIN_SCALE, MAX_SCALE, "Use 1.0-2.0 (1.2-1.5 on 16 GB cards).")
    for name, cells in (("latent height", latent_h), ("latent width", latent_w)):
        if isinstance(cells, bool) or not isinstance(cells, int) or cells < 1:
            raise LongMediaInputError(name, cells, "an integer >= 1", "Pass the H3 video latent's own size.")
    h = target_pixels(latent_h * L.VAE_SPATIAL, scale) // L.VAE_SPATIAL
    w = target_pixels(latent_w * L.VAE_SPATIAL, scale) // L.VAE_SPATIAL
    return h, w


def resample_video(video: torch.Tensor, size: tuple[int, int], method: str = "bicubic") -> torch.Tensor:
    """`video` [B, C, T, H, W] resized to [B, C, T, h, w] frame by frame (computed in fp32, returned in its dtype)."""
    check_choice("method", method, METHODS, "Use bicubic (sharpest) or bilinear.")
    if not isinstance(video, torch.Tensor) or video.ndim != 5:
        raise LongMediaInputError("video latent", getattr(video, "shape", type(video).__name__),
                                  "a 5-D tensor [B, C, T, H, W]", "Pass the video stream of an H3 AV latent.")
    h, w = size
    b, c, t, src_h, src_w = video.shape
    if (h, w) == (src_h, src_w):
        return video.clone()
    frames = video.permute(0, 2, 1, 3, 4).reshape(b * t, c, src_h, src_w).float()
    kwargs = {}
    if method in _SMOOTH:
        kwargs = {"align_corners": False, "antialias": h < src_h or w < src_w}
    out = F.interpolate(frames, size=(h, w), mode=method, **kwargs)
    return out.reshape(b, t, c, h, w).permute(0, 2, 1, 3, 4).contiguous().to(video.dtype)


def upscale_video(video: torch.Tensor, scale: float, method: str = "bicubic") -> torch.Tensor:
    """`video` [B, C, T, H, W] scaled by `scale` onto the /32 pixel grid (H and W even in latent cells)."""
    if not isinstance(video, torch.Tensor) or video.ndim != 5:
        raise LongMediaInputError("video latent", getattr(video, "shape", type(video).__name__),
                                  "a 5-D tensor [B, C, T, H, W]", "Pass the video stream of an H3 AV latent.")
    size = target_latent_size(int(video.shape[3]), int(video.shape[4]), scale)
    return resample_video(video, size, method)


def upscale_av(video: torch.Tensor, audio: torch.Tensor, scale: float,
               method: str = "bicubic") -> tuple[torch.Tensor, torch.Tensor]:
    """(upscaled video, the same audio tensor): only the video stream changes."""
    return upscale_video(video, scale, method), audio
