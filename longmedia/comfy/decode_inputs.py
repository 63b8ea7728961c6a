"""What LongMedia Decode & Save refuses before any decode: the latent, both VAEs (ComfyUI's H3 classes), fps, bit
depth, crf, and the file name prefix (the way ComfyUI's save path would refuse it after a decode: NUL, an absolute
path or `..`, a name the file system cannot hold)."""

from __future__ import annotations

import os

from ..errors import LongMediaInputError, check_float
from .passes.sampler_inputs import av_latents

BIT_DEPTHS = (8, 10)
CRF_AUTO = -1.0
NAME_MAX_BYTES = 255                 # a file name's longest on Linux, macOS and Windows (NTFS: 255 UTF-16 units)
COUNTER_SUFFIX = "_00001_.mp4"       # what SaveVideo's naming adds to the prefix's last part
VIDEO_ALLOWED = "ComfyUI's MiniMax H3 video VAE (Load VAE: minimax_h3_video_vae_*.safetensors)"
AUDIO_ALLOWED = "ComfyUI's MiniMax H3 audio VAE (Load VAE: minimax_h3_audio_vae_*.safetensors)"
FPS_FIX = "Use 24, H3's frame rate (the audio is generated for 24 fps video)."


def _model_of(vae, module_name: str, class_name: str, name: str, allowed: str):
    """The VAE's first_stage_model if it is ComfyUI's `class_name`, else LongMediaInputError naming `name`."""
    import importlib

    model = getattr(vae, "first_stage_model", None)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):      # a ComfyUI without H3: no VAE can be H3's
        cls = None
    if cls is None or not isinstance(model, cls):
        raise LongMediaInputError(name, type(model).__name__ if vae is not None else None, allowed,
                                  f"Connect the H3 {'audio' if 'audio' in name else 'video'} VAE's Load VAE here.")
    return model


def check_decode_inputs(latent, video_vae, audio_vae, fps, bit_depth, crf, filename_prefix):
    """(video latent, audio latent) after every check Decode & Save makes before any decode."""
    video, audio = av_latents(latent)
    _model_of(video_vae, "comfy.ldm.minimax.vae", "MiniMaxH3VideoVAE", "video_vae", VIDEO_ALLOWED)
    if audio_vae is not None:
        _model_of(audio_vae, "comfy.ldm.minimax.audio_vae", "MiniMaxH3AudioVAE", "audio_vae", AUDIO_ALLOWED)
    check_float("fps", fps, 1.0, 120.0, FPS_FIX)
    if bit_depth not in BIT_DEPTHS or isinstance(bit_depth, bool):
        raise LongMediaInputError("bit_depth", bit_depth, "8 or 10", "Use 8 (plays everywhere) or 10 (less banding).")
    if crf != CRF_AUTO:
        check_float("crf", crf, 0.0, 51.0, "Use -1 for the encoder's default (as SaveVideo's auto), else 0-51.")
    if not isinstance(filename_prefix, str) or not filename_prefix.strip():
        raise LongMediaInputError("filename_prefix", filename_prefix, "a non-empty name such as video/LongMedia",
                                  "Give the file a name; a folder before / is made inside ComfyUI's output.")
    check_filename_prefix(filename_prefix)
    if video.shape[2] < 2:
        raise LongMediaInputError("latent", tuple(video.shape), "a video of at least 2 latent frames (5 frames)",
                                  "Decode a single picture with the stock VAEDecode.")
    return video, audio


def check_filename_prefix(prefix: str) -> None:
    """Refuse, before any decode, a prefix ComfyUI's save path would refuse after one (or fail on while writing)."""
    allowed = "a name inside ComfyUI's output folder, such as video/LongMedia"
    if "\x00" in prefix:
        raise LongMediaInputError("filename_prefix", prefix, allowed + ", without NUL characters",
                                  "Remove the NUL character from the name.")
    parts = prefix.replace("\\", "/").split("/")
    if os.path.isabs(prefix) or prefix.startswith(("/", "\\")) or ".." in parts:
        raise LongMediaInputError("filename_prefix", prefix, allowed + " (no absolute path, no ..)",
                                  "Give a name relative to the output folder; a folder before / is made inside it.")
    longest = NAME_MAX_BYTES - len(COUNTER_SUFFIX)
    for part in parts:
        if len(part.encode("utf-8")) > longest:
            raise LongMediaInputError("filename_prefix", prefix, f"each part of the name at most {longest} bytes "
                                      "(the file system's 255, less SaveVideo's counter and .mp4)",
                                      f"Shorten the name to {longest} characters or fewer.")
