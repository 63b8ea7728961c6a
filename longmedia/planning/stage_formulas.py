"""Byte formulas of the stages around the DiT: H3's text encoder (Qwen3-VL-32B, 50 layers) and its VAEs.

Weights are counted from the architecture (ComfyUI's `Qwen3VL_32BConfig`, `MiniMaxH3VideoVAE`,
`MiniMaxH3AudioVAE`); activations follow the tensors those modules allocate, and
tests/comfyui/test_stage_formulas_live.py checks each formula against the live bytes of the real
ComfyUI module built with small widths (within +-15%). The stock estimates (`stock_*`) are the ones
ComfyUI itself reserves before a decode (comfy/sd.py, `memory_used_decode`), copied as written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..h3 import lattice as L

FP32 = 4


@dataclass(frozen=True)
class TextEncoderDims:
    """Qwen3-VL-32B as H3 loads it (comfy/text_encoders/llama.py `Qwen3VL_32BConfig`): 50 layers, no LM head."""

    hidden: int = 5120
    intermediate: int = 25600
    layers: int = 50
    heads: int = 64
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151936
    vision_params: int = 595_266_800      # the 27-block vision tower + mergers, counted on ComfyUI's module

    @property
    def layer_linear_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate

    @property
    def layer_params(self) -> int:
        return self.layer_linear_params + 2 * self.hidden + 2 * self.head_dim

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def param_count(self) -> int:
        return self.layers * self.layer_params + self.embed_params + self.vision_params

    @property
    def largest_linear_params(self) -> int:
        return max(self.hidden * self.intermediate, self.hidden * self.heads * self.head_dim)


QWEN3VL_32B = TextEncoderDims()

# Bytes per parameter of the language model's Linears; embeddings, norms and the vision tower stay 16-bit.
# nvfp4: 4-bit values plus one fp8 scale per 16 (comfy-kitchen's NVFP4 layout).
TEXT_ENCODER_VARIANTS = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}
TEXT_ENCODER_FILES = {"bf16": "a bf16 Qwen3-VL-32B (H3) checkpoint", "fp16": "an fp16 Qwen3-VL-32B (H3) checkpoint",
                      "fp8": "an fp8 Qwen3-VL-32B (H3) checkpoint",
                      "nvfp4": "qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors (the example workflows' encoder)"}


def text_encoder_weight_bytes(variant: str, d: TextEncoderDims = QWEN3VL_32B) -> int:
    linear = d.layers * d.layer_linear_params
    rest = d.param_count - linear
    return int(linear * TEXT_ENCODER_VARIANTS[variant] + 2 * rest)


def text_encoder_layer_bytes(variant: str, d: TextEncoderDims = QWEN3VL_32B, compute_bytes: int = 2) -> int:
    """One layer's weights as stored plus its largest Linear dequantised to the compute dtype (streamed encode)."""
    stored = int(d.layer_linear_params * TEXT_ENCODER_VARIANTS[variant]) + 2 * (d.layer_params - d.layer_linear_params)
    dequant = d.largest_linear_params * compute_bytes if TEXT_ENCODER_VARIANTS[variant] < compute_bytes else 0
    return stored + dequant


def text_encoder_activation_bytes(tokens: int, d: TextEncoderDims = QWEN3VL_32B, dtype_bytes: int = 2,
                                  materialised_scores: bool = False) -> int:
    """Peak of one encode (ComfyUI's Llama2_ forward) over `tokens` prompt + vision tokens.

    Alive at every layer: the hidden state, its normed copy and the causal mask [T, T]. Attention
    stage: q, k and v repeated to all heads, the rope tables; on the CPU path (or any path that
    materialises attention) also the scores and their softmax, heads x T x T each. MLP stage: gate,
    up and their product, T x intermediate each. The peak is the larger stage.
    """
    t = max(1, tokens)
    base = (2 * t * d.hidden + t * t) * dtype_bytes
    qkv = 3 * t * d.heads * d.head_dim * dtype_bytes + 2 * t * d.head_dim * FP32
    scores = 2 * d.heads * t * t * dtype_bytes if materialised_scores else 0
    mlp = 3 * t * d.intermediate * dtype_bytes
    return base + max(qkv + scores, mlp)


@dataclass(frozen=True)
class VideoVAEDims:
    """H3's video VAE decoder (comfy/ldm/minimax/vae.py): a ViT over 256 px tiles of 7-latent-frame chunks."""

    dim: int = 2048                  # heads x dim_head (32 x 64)
    layers: int = 36
    patch: int = 16                  # pixels per latent cell
    patch_t: int = 4                 # pixel frames per latent frame
    tile: int = 256                  # pixels per spatial tile
    tile_overlap_min: int = 64
    chunk_tokens: int = 5            # ceil(clip_length 17 / 4)
    token_overlap: int = 2           # (-token_drop 3) % 5
    frame_pre_padding: int = 3       # (-17) % 4
    register_tokens: int = 4
    encoder_params: int = 180_337_888    # EncoderFCN3D + quant_conv, counted on ComfyUI's module

    @property
    def chunk_latent_frames(self) -> int:
        return self.chunk_tokens + self.token_overlap

    @property
    def chunk_frames(self) -> int:
        """Pixel frames one temporal chunk decodes (28 at full size)."""
        return self.chunk_latent_frames * self.patch_t

    @property
    def frame_overlap(self) -> int:
        return max(self.token_overlap * self.patch_t - self.frame_pre_padding, 0)

    @property
    def written_chunk_frames(self) -> int:
        """Frames one temporal chunk hands on finished (17 at full size: the 20 it decodes past the pre-padding)."""
        return self.chunk_tokens * self.patch_t - self.frame_pre_padding

    @property
    def decoder_params(self) -> int:
        d, out = self.dim, 3 * self.patch_t * self.patch * self.patch
        block = 16 * d * d + 17 * d            # qkv 3, out 1, ffn 8 + 4 (gated, mult 4); biases, 2 norms, 2 scales
        embed = 24 * d + d + self.register_tokens * d
        head = 2 * d + d * out + out
        post_quant = 24 * 24 + 24
        return self.layers * block + embed + head + post_quant

    @property
    def decoder_block_params(self) -> int:
        return 16 * self.dim * self.dim + 17 * self.dim


H3_VIDEO_VAE = VideoVAEDims()
AUDIO_VAE_PARAMS = 151_282_160           # MiniMaxH3AudioVAE (DAC encoder, BigVGAN decoder), counted on ComfyUI's module
AUDIO_VAE_DECODER_PARAMS = 64_847_376 + 67_584


def split_tiles(length: int, tile: int, overlap_min: int, ratio: int) -> tuple[int, tuple[int, ...]]:
    """(tile count, overlaps) of one axis, as MiniMaxH3VideoVAE.split_tiles cuts it."""
    if tile >= length:
        return 1, ()
    n = math.ceil(length / tile)
    while tile * n - overlap_min * (n - 1) - length < 0:
        n += 1
    overlaps = [overlap_min] * (n - 1)
    for i in range((tile * n - sum(overlaps) - length) // ratio):
        overlaps[i % (n - 1)] += ratio
    return n, tuple(overlaps)


def _decode_chunks(latent_t: int, d: VideoVAEDims) -> int:
    drop = (-d.token_overlap) % d.chunk_tokens
    total = latent_t + drop
    total += (-total) % d.chunk_tokens
    n = total // d.chunk_tokens - int(drop > 0)
    return max(1, n)


def video_decode_activation_bytes(frames: int, width: int, height: int, d: VideoVAEDims = H3_VIDEO_VAE,
                                  dtype_bytes: int = 2) -> int:
    """Peak of stock H3 video decode on the device, weights and the host output buffer excluded.

    Per temporal chunk the decoder fills a [3, 28, H, W] canvas tile by tile; the previous chunk's
    canvas is still referenced by a view while the next is built (two canvases live), beside the
    5-frame overlap kept for blending. A tile's ViT holds its hidden state and normed copy with the
    gated FFN (8 + 4 widths), or at the head the projection and its permuted copy (two tiles of
    pixels). With several tiles the canvas, the previous blended tile and the overlap strips cut from
    the tiles above (and the blend's temporary) are alive meanwhile; a single tile is copied into a
    canvas made after it. The latent and its de-normalised and padded copies stay alive throughout.
    """
    latent_t = L.latent_frames(frames) if frames > 1 else 1
    lh, lw = height // d.patch, width // d.patch
    chunks = _decode_chunks(latent_t, d)
    pixel = 3 * height * width * dtype_bytes
    canvas = d.chunk_frames * pixel
    previous = canvas + d.frame_overlap * pixel if chunks > 1 else 0
    th, tw = min(d.tile, height), min(d.tile, width)
    ny, oy = split_tiles(height, d.tile, d.tile_overlap_min, d.patch)
    nx, ox = split_tiles(width, d.tile, d.tile_overlap_min, d.patch)
    tile_px = 3 * d.chunk_frames * th * tw * dtype_bytes
    tokens = d.chunk_latent_frames * (th // d.patch) * (tw // d.patch) + d.register_tokens + 1
    vit_ffn = tokens * d.dim * 14 * dtype_bytes
    vit_head = tokens * d.dim * 2 * dtype_bytes + 2 * tile_px
    latents = 3 * 24 * (latent_t + d.chunk_tokens) * lh * lw * dtype_bytes
    if nx * ny == 1:
        return latents + previous + max(vit_ffn, vit_head, canvas + tile_px)
    strips = 3 * d.chunk_frames * dtype_bytes * (((nx + 1) * max(oy, default=0) * tw if ny > 1 else 0)
                                                 + (max(ox, default=0) * th if nx > 1 else 0))
    return latents + previous + canvas + strips + tile_px + max(vit_ffn, vit_head)


def stock_video_decode_estimate(frames: int, width: int, height: int, dtype_bytes: int = 2,
                                d: VideoVAEDims = H3_VIDEO_VAE) -> int:
    """comfy/sd.py's memory_used_decode for the H3 video VAE: what ComfyUI frees before decoding."""
    fixed = 110_000_000 if frames <= 22 else 270_000_000
    f = min(frames, d.chunk_frames + 2)
    return int((9.5 * f * height * width + fixed) * dtype_bytes * 1.03)


def stock_audio_decode_estimate(samples: int) -> int:
    """comfy/sd.py's memory_used_decode for the H3 audio VAE (fp32)."""
    return int(max(42_000_000, 220 * samples + 20_000_000) * FP32 * 1.03)


def audio_samples(frames: int) -> int:
    """Stereo waveform samples per channel of a `frames`-long video (32 kHz)."""
    return L.target_audio_frames(frames) * (L.AUDIO_SAMPLE_RATE // L.AUDIO_LATENT_FPS)


def decoded_video_bytes(frames: int, width: int, height: int) -> int:
    """ComfyUI's IMAGE: float32 [T, H, W, 3] in host RAM."""
    return frames * height * width * 3 * FP32


def decoded_audio_bytes(frames: int) -> int:
    """ComfyUI's AUDIO waveform: float32 [1, 2, samples]."""
    return 2 * audio_samples(frames) * FP32


ENCODER_FRAMES = 80     # h264 (x264 medium) frames in flight: lookahead 40 + B-frames + frame threads (an estimate)


def bounded_decode_host_bytes(width: int, height: int, d: VideoVAEDims = H3_VIDEO_VAE) -> int:
    """Host RAM of LongMedia Decode & Save's video, at any length: one finished chunk of float32 frames, one
    frame's 8-bit conversion, and the h264 encoder's yuv420 frames in flight (an estimate)."""
    pixels = width * height
    return d.written_chunk_frames * pixels * 3 * FP32 + pixels * 3 + ENCODER_FRAMES * pixels * 3 // 2
