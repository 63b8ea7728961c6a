"""Rough time estimates per stage: one measured basis, scaled by a card class's peak tensor throughput.

Estimates only (read them as +-50%): clocks, memory bandwidth, the attention backend and the disk
all move real times. Where each number comes from:

- DiT: `DIT_BASIS`, seconds per step of two full-size H3 blocks on an H200, from docs/lab/2026-12-02-executor-kernels-planner.md
  (`bench/segments.py`: S = 85868, 0.990 s; `bench/sampler_budget.py --seconds 20`: S = 144996,
  2.587 s; the 14.4 s row, S = 109318, 1.545 s, checks the fit within 1%). One block's time is fitted
  as a*S + b*S^2 through the first two, times the model's block count for a step.
- Other cards: `CARD_CLASSES`, NVIDIA's published peak dense FP16/BF16 tensor TFLOPS with FP32
  accumulate (Hopper, Ada, Ampere and Blackwell architecture papers, rounded); a card's time is the
  H200 time x (989 / its TFLOPS). The planner knows only the VRAM, so the class is picked by size.
- Text encoder: not measured; its matmul FLOPs at `ASSUMED_UTILISATION` of the class's peak, plus weight
  traffic at `ASSUMED_HOST_GBPS` (pinned) / half that (pageable).
- Video decode: the decoder's matmul FLOPs at `VAE_DECODE_UTILISATION` of the class's peak, measured end to
  end (the audio decode and the h264 encode included) with LongMedia Decode & Save on an H100 80GB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..h3 import lattice as L
from ..units import GIB
from .stage_formulas import (
    H3_VIDEO_VAE,
    QWEN3VL_32B,
    TextEncoderDims,
    VideoVAEDims,
    split_tiles,
)

H200_TFLOPS = 989.0
# (seq_len, seconds per step, blocks run, source) from docs/lab/2026-12-02-executor-kernels-planner.md
DIT_BASIS = ((85868, 0.990, 2, "bench/segments.py, segment 1 median s/step"),
             (144996, 2.587, 2, "bench/sampler_budget.py --seconds 20, int8 planned low_vram"))
DIT_CHECK = (109318, 1.545, 2, "bench/sampler_budget.py --seconds 14.4, bf16 planned low_vram")
# (class, largest VRAM in GiB, example card, peak dense BF16 TFLOPS with FP32 accumulate)
CARD_CLASSES = (("8 GB-class", 8.5, "RTX 4060", 30.3),
                ("12 GB-class", 12.5, "RTX 4070", 58.4),
                ("16 GB-class", 16.5, "RTX 4080 (a 16 GB-class 4060 Ti is about half as fast)", 97.5),
                ("24 GB-class", 24.5, "RTX 4090", 165.2),
                ("32 GB-class", 32.5, "RTX 5090", 209.5),
                ("48 GB-class", 48.5, "RTX 6000 Ada", 364.2),
                ("80 GB-class and up", 1e9, "H100 / H200 (the measured basis)", 989.0))
ASSUMED_UTILISATION = 0.4       # text encoder matmuls: share of peak reached (assumed, not measured)
# The video decode's FLOPs over its measured time: 94.0 s at 0.4 of an H100's 989 TFLOPS against 263.2 s measured
# for the 60 s job's 1450 frames at 1664x960 (LongMedia Decode & Save, ComfyUI's full-size VAEs with random
# weights, audio and h264 included; docs/lab/data/2026-12-06-h100-decode-60s.jsonl). 145 frames took 26.7 s, the
# same rate within 4 %. A later run of the same decode, with the VAEs loaded from files and the mp4 encoded on its
# own thread, took 167.6 s (docs/lab/data/2026-12-06-h100-decode-vaefiles.jsonl); the two changes were not
# separated, so the rate stays at the slower run's and the estimate errs long.
VAE_DECODE_UTILISATION = 0.143
# scheduled_sol's Sol steps keep this share of a block's S^2 (attention) time; its linear work is unchanged. Fitted to
# the measured 20-step schedule on an H100 with every weight resident (docs/PERFORMANCE.md, "scheduled_sol with every
# weight resident"): S = 109318, 4 exact steps at 32.8 s and a 19.24 s average, so the 16 Sol steps average 15.85 s
# (0.483x an exact step). (S, exact s/step, schedule's average s/step, exact steps, steps)
SOL_BASIS = (109318, 32.8, 19.24, 4, 20)
ASSUMED_HOST_GBPS = 24.0        # PCIe 4.0 x16, pinned host memory (assumed); pageable at half
CPU_TFLOPS = 1.0                # a desktop CPU in fp32 matmuls (assumed), for an encode on the CPU


@dataclass(frozen=True)
class CardClass:
    name: str
    example: str
    tflops: float

    @property
    def speed_vs_h200(self) -> float:
        return self.tflops / H200_TFLOPS

    def describe(self) -> str:
        return (f"{self.name} ({self.example}, {self.tflops:g} peak BF16 TFLOPS): estimates scale the H200 "
                f"measurements by {self.speed_vs_h200:.3f}")


def card_class(vram_total_bytes: int) -> CardClass:
    gb = vram_total_bytes / GIB
    name, _, example, tflops = next(c for c in CARD_CLASSES if gb <= c[1])
    return CardClass(name, example, tflops)


def block_fit() -> tuple[float, float]:
    (s1, t1, n1, _), (s2, t2, n2, _) = DIT_BASIS
    y1, y2 = t1 / n1 / s1, t2 / n2 / s2             # a + b*S
    b = (y2 - y1) / (s2 - s1)
    return y1 - b * s1, b


def h200_block_seconds(seq_len: int) -> float:
    a, b = block_fit()
    return a * seq_len + b * seq_len * seq_len


def sol_quadratic_kept() -> float:
    """The share of the fitted S^2 term a Sol step keeps (`SOL_BASIS`)."""
    s, exact, average, exact_steps, steps = SOL_BASIS
    sol_ratio = (average * steps - exact * exact_steps) / (steps - exact_steps) / exact
    a, b = block_fit()
    return (sol_ratio * (a * s + b * s * s) - a * s) / (b * s * s)


def calls_per_step(cfg: float) -> int:
    """Model calls a sampler step makes: ComfyUI's CFGGuider skips the negative prompt's call at cfg 1."""
    return 1 if math.isclose(cfg, 1.0) else 2


def dit_step_seconds(seq_len: int, blocks: int, card: CardClass, streamed_bytes: int = 0,
                     pinned_bytes: int = 0, prefetch: bool = False, sol: bool = False) -> float:
    """One model call: the blocks' compute, and the streamed weights' copy (overlapped when prefetching).
    `sol`: a Sol call of scheduled_sol (its attention at `sol_quadratic_kept` of the exact S^2 time)."""
    a, b = block_fit()
    quadratic = b * seq_len * seq_len * (sol_quadratic_kept() if sol else 1.0)
    compute = blocks * (a * seq_len + quadratic) / card.speed_vs_h200
    copy = transfer_seconds(streamed_bytes, pinned_bytes)
    return max(compute, copy) if prefetch else compute + copy


def transfer_seconds(streamed_bytes: int, pinned_bytes: int = 0) -> float:
    pinned = min(pinned_bytes, streamed_bytes)
    rate = ASSUMED_HOST_GBPS * 1e9
    return pinned / rate + (streamed_bytes - pinned) / (rate / 2)


def text_encoder_seconds(tokens: int, weight_bytes: int, card: CardClass | None,
                         d: TextEncoderDims = QWEN3VL_32B) -> float:
    """One encode: 2 FLOPs per weight per token, plus the weights' one trip to the card (none on the CPU)."""
    flops = 2.0 * (d.layers * d.layer_linear_params) * max(1, tokens)
    if card is None:
        return flops / (CPU_TFLOPS * 1e12)
    return flops / (card.tflops * 1e12 * ASSUMED_UTILISATION) + transfer_seconds(weight_bytes)


def video_decode_seconds(frames: int, width: int, height: int, card: CardClass,
                         d: VideoVAEDims = H3_VIDEO_VAE) -> float:
    """The ViT decoder's FLOPs over every tile of every temporal chunk (linears and attention)."""
    latent_t = L.latent_frames(frames) if frames > 1 else 1
    chunks = max(1, -(-latent_t // d.chunk_tokens))
    ny, _ = split_tiles(height, d.tile, d.tile_overlap_min, d.patch)
    nx, _ = split_tiles(width, d.tile, d.tile_overlap_min, d.patch)
    n = d.chunk_latent_frames * (min(d.tile, height) // d.patch) * (min(d.tile, width) // d.patch)
    per_tile = d.layers * (2 * n * d.decoder_block_params + 4 * n * n * d.dim)
    return chunks * nx * ny * per_tile / (card.tflops * 1e12 * VAE_DECODE_UTILISATION)
