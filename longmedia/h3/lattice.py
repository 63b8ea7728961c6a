"""MiniMax H3's size lattice: frames on the 17k+5 grid at 24 fps, pixels to the /32 canvas, audio at 40 Hz.

Pure integer arithmetic that reproduces what ComfyUI's H3 nodes, VAEs, tokenizer and `PackedLayout`
do to sizes (checked against the real code in `tests/comfyui/test_geometry_vs_stock.py`).
"""

from __future__ import annotations

import math

from ..errors import LongMediaInputError, check_int

FPS = 24                    # H3 generates and conditions at 24 fps
AUDIO_LATENT_FPS = 40       # audio VAE: 32 kHz / 800 samples per latent frame
AUDIO_SAMPLE_RATE = 32000
AUDIO_ROWS_PER_FRAME = 2    # stereo: one packed row per channel per latent frame
CLIP_FRAMES = 17            # the frame lattice step: 17k + 5
MIN_FRAMES = 5
LATENTS_PER_CLIP = 5        # 17 pixel frames -> 5 latent frames (1 + 4 + 4 + 4 + 4 frames per token)
VAE_SPATIAL = 16            # pixels per latent cell
PATCH = 2                   # DiT patch 1x2x2: a row covers 2x2 latent cells = 32x32 pixels
CANVAS_MULTIPLE = VAE_SPATIAL * PATCH
FRAME_RESCALE = 5.0 / 3.0   # shared time axis: pixel frames -> audio latent frames
MAX_STOCK_FRAMES = 3609     # EmptyMiniMaxH3LatentAV's 3600-frame maximum, snapped up to the lattice

REF_VIDEO_SHORT_EDGE = 768           # reference videos: 768-short-edge canvas ...
REF_VIDEO_MAX_PIXELS = 768 * 1344    # ... capped at this area
REF_IMAGE_SHORT_EDGE = 2048          # reference pictures in 'max' sizing
QWEN_FACTOR = 32                     # Qwen3-VL: 16 px patches merged 2x2 -> one token per 32x32 pixels
QWEN_MIN_PIXELS = 3136
QWEN_MAX_PIXELS = 12845056
QWEN_VIDEO_SAMPLE_STEP = FPS // 2    # reference videos reach Qwen at 2 fps, two frames per vision block


def snap_frames(frames: int) -> int:
    """Smallest 17k+5 frame count >= max(5, frames): what the H3 latent nodes do to `length`."""
    n = max(MIN_FRAMES, int(frames))
    return n + (MIN_FRAMES - n) % CLIP_FRAMES


def snap_frames_down(frames: int) -> int:
    """Largest 17k+5 frame count <= frames (frames >= 5): how guide and reference clips are cropped."""
    if frames < MIN_FRAMES:
        raise ValueError(f"frames must be >= {MIN_FRAMES} to sit on the 17k+5 lattice, got {frames}")
    return frames - (frames - MIN_FRAMES) % CLIP_FRAMES


def is_lattice_frames(frames: int) -> bool:
    return frames >= MIN_FRAMES and frames % CLIP_FRAMES == MIN_FRAMES


def check_lattice_frames(name: str, frames: object, fix: str) -> int:
    """`frames` as a 17k+5 count within one stock pass, or a LongMediaInputError naming `name`."""
    frames = check_int(name, frames, MIN_FRAMES, MAX_STOCK_FRAMES, fix)
    if not is_lattice_frames(frames):
        raise LongMediaInputError(name, frames, "a count on H3's 17k+5 frame grid (5, 22, 39, 56 ...)",
                                  f"Use {snap_frames_down(frames)} or {snap_frames(frames)}.")
    return frames


def latent_frames(pixel_frames: int) -> int:
    """Video latent frames of `pixel_frames` pixel frames (1 for a single picture, 5k+2 for 17k+5)."""
    if pixel_frames < 1:
        raise ValueError(f"pixel_frames must be >= 1, got {pixel_frames}")
    if pixel_frames == 1:
        return 1
    if pixel_frames <= MIN_FRAMES:
        return 2
    return (pixel_frames - MIN_FRAMES) // CLIP_FRAMES * LATENTS_PER_CLIP + 2


def pixel_frames(latent_t: int) -> int:
    """Pixel frames a video latent of `latent_t` frames decodes to (inverse of `latent_frames` on the lattice)."""
    if latent_t < 1:
        raise ValueError(f"latent_t must be >= 1, got {latent_t}")
    if latent_t == 1:
        return 1
    return (latent_t - 2) // LATENTS_PER_CLIP * CLIP_FRAMES + MIN_FRAMES


def frames_for_seconds(seconds: float, fps: int = FPS) -> int:
    """Pixel frames covering `seconds`, snapped up to the lattice (10 s -> 243 frames)."""
    return snap_frames(math.ceil(seconds * fps - 1e-9))


def seconds_for_frames(frames: int) -> float:
    return frames / FPS


def target_audio_frames(pixel_frames_: int) -> int:
    """Audio latent frames of the generated track for a `pixel_frames_` video (40 per second, rounded)."""
    return round(pixel_frames_ / FPS * AUDIO_LATENT_FPS)


def audio_latent_frames(seconds: float) -> int:
    """Audio latent frames the audio VAE makes from `seconds` of 32 kHz audio (right-padded to 800 samples)."""
    samples = round(seconds * AUDIO_SAMPLE_RATE)
    return math.ceil(samples / (AUDIO_SAMPLE_RATE // AUDIO_LATENT_FPS))


def max_anchor_audio_frames(target_audio: int, frame_index: int) -> int:
    """Audio latent frames a guide can still carry when anchored at pixel frame `frame_index`."""
    return math.floor(target_audio - FRAME_RESCALE * frame_index)


def latent_cells(pixels: int) -> int:
    """Latent cells along one axis of the stock empty latent (pixels // 16)."""
    return pixels // VAE_SPATIAL


def patch_cells(latent: int) -> int:
    """DiT rows along one axis: the latent is padded up to the 2x2 patch."""
    return (latent + PATCH - 1) // PATCH


def frame_rows(width: int, height: int) -> int:
    """Packed rows of one latent frame of a `width` x `height` video (32x32 pixels per row)."""
    return patch_cells(latent_cells(width)) * patch_cells(latent_cells(height))


def round_canvas(pixels: float) -> int:
    """Nearest multiple of 32, at least 32 (how the H3 nodes size references)."""
    return max(CANVAS_MULTIPLE, round(pixels / CANVAS_MULTIPLE) * CANVAS_MULTIPLE)


def floor_canvas(pixels: float) -> int:
    """Largest multiple of 32 not above `pixels`, at least 32 (used when a budget shrinks a reference)."""
    return max(CANVAS_MULTIPLE, math.floor(pixels / CANVAS_MULTIPLE + 1e-9) * CANVAS_MULTIPLE)


def reference_video_canvas(width: int, height: int) -> tuple[int, int]:
    """(w, h) a reference video is resized to: 768 short edge, area-capped, never upscaled past the source."""
    ratio = width / height
    nom_w, nom_h = (REF_VIDEO_SHORT_EDGE * ratio, REF_VIDEO_SHORT_EDGE) if ratio >= 1.0 else \
        (REF_VIDEO_SHORT_EDGE, REF_VIDEO_SHORT_EDGE / ratio)
    if nom_w * nom_h > REF_VIDEO_MAX_PIXELS:
        s = math.sqrt(REF_VIDEO_MAX_PIXELS / (nom_w * nom_h))
        nom_w, nom_h = nom_w * s, nom_h * s
    cw, ch = round_canvas(nom_w), round_canvas(nom_h)
    if width * height < cw * ch:
        cw, ch = round_canvas(width), round_canvas(height)
    return cw, ch


def reference_picture_size(width: int, height: int, target_w: int, target_h: int, sizing: str) -> tuple[int, int]:
    """(w, h) a reference picture is resized to: 'match' = down to the target's area, 'max' = 2048 short edge."""
    if sizing == "match":
        scale = min(1.0, math.sqrt((target_w * target_h) / (width * height)))
    else:
        scale = min(1.0, REF_IMAGE_SHORT_EDGE / min(width, height))
    return round_canvas(width * scale), round_canvas(height * scale)


def cap_area(width: int, height: int, max_pixels: int | None) -> tuple[int, int]:
    """(w, h) shrunk, aspect kept and on the /32 canvas, until w*h <= max_pixels (unchanged when it fits)."""
    if max_pixels is None or width * height <= max_pixels:
        return width, height
    s = math.sqrt(max_pixels / (width * height))
    w, h = floor_canvas(width * s), floor_canvas(height * s)
    while w * h > max_pixels and (w > CANVAS_MULTIPLE or h > CANVAS_MULTIPLE):
        if w >= h:
            w -= CANVAS_MULTIPLE
        else:
            h -= CANVAS_MULTIPLE
    return w, h


def qwen_vision_tokens(width: int, height: int) -> int:
    """Merged Qwen3-VL vision tokens for one picture (or one 2-frame video block) of this size."""
    h_bar = round(height / QWEN_FACTOR) * QWEN_FACTOR
    w_bar = round(width / QWEN_FACTOR) * QWEN_FACTOR
    if h_bar * w_bar > QWEN_MAX_PIXELS:
        beta = math.sqrt((height * width) / QWEN_MAX_PIXELS)
        h_bar = max(QWEN_FACTOR, math.floor(height / beta / QWEN_FACTOR) * QWEN_FACTOR)
        w_bar = max(QWEN_FACTOR, math.floor(width / beta / QWEN_FACTOR) * QWEN_FACTOR)
    elif h_bar * w_bar < QWEN_MIN_PIXELS:
        beta = math.sqrt(QWEN_MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / QWEN_FACTOR) * QWEN_FACTOR
        w_bar = math.ceil(width * beta / QWEN_FACTOR) * QWEN_FACTOR
    return (h_bar // QWEN_FACTOR) * (w_bar // QWEN_FACTOR)


def _digits(n: int) -> int:
    return len(str(n))


# Presentation labels: Qwen's tokenizer splits digits one per token, so each label costs a fixed
# number of tokens plus one per digit of its ordinal (measured with ComfyUI's Qwen tokenizer).
def picture_label_tokens(ordinal: int) -> int:
    """'<Picture i>: ' plus the vision-start and vision-end tokens around its block."""
    return 5 + _digits(ordinal) + 2


def video_label_tokens(ordinal: int) -> int:
    """'<Video k>: '."""
    return 5 + _digits(ordinal)


def audio_label_tokens(ordinal: int) -> int:
    """'<Audio j>: '."""
    return 4 + _digits(ordinal)


def video_block_tokens(block: int, width: int, height: int) -> int:
    """'<k.2 seconds>', vision start/end and the vision tokens of 2-frame block `block` of a reference video."""
    return 5 + _digits(block) + 2 + qwen_vision_tokens(width, height)


def reference_video_prompt_tokens(ordinal: int, frames: int, width: int, height: int) -> int:
    """Prompt tokens of one reference video: its label and one block per 2 frames sampled at 2 fps."""
    sampled = math.ceil(frames / QWEN_VIDEO_SAMPLE_STEP)
    blocks = math.ceil(sampled / 2)
    return video_label_tokens(ordinal) + sum(video_block_tokens(k, width, height) for k in range(blocks))
