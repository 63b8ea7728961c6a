"""Bytes of one H3 pass outside the block executor: what stock ComfyUI code holds around the blocks.

The block executor's own bytes are `execution.memory`. Around it, ComfyUI's `_forward` keeps the
embedded rows it copied into the hidden state (`video_embed`, `audio_embed`) and the patchified fp32
latent rows alive until it returns, plus the rope rotation table; the sampler keeps a few fp32
copies of the target latent. Before block 0 the embedding makes fp32 then bf16 copies; the final
layer normalises, modulates and upcasts the target rows. LongMedia does not change those phases, so
the planner budgets them as they are.
"""

from __future__ import annotations

from ..execution.chunks import ChunkSizes
from ..execution.memory import predicted_peak_bytes
from ..h3.dims import H3Dims
from ..h3.geometry import Geometry
from ..h3.profiles import ModelProfile
from ..units import MIB

WORKSPACE_FIXED = 256 * MIB          # cuBLAS/cuDNN workspaces, allocator rounding, small tensors
SAMPLER_LATENT_COPIES = 6            # x, noise, denoised, the model output and a sampler's history, fp32
FP32 = 4
VIDEO_ROW_ELEMS = 24 * 4             # one packed video row: 24 channels x 2 x 2 latent cells
AUDIO_ROW_ELEMS = 32                 # one packed audio row: 32 channels
DEQUANTISED_FORMATS = frozenset({"fp8", "nvfp4", "mxfp8", "w4a4", "w4a8", "fp32", "fp16"})


def visual_rows(g: Geometry) -> int:
    """Rows embedded by the video patch projection: target video, keyframe guides, reference pictures/videos."""
    return g.rows_of("video", "cond", "ref_img")


def aural_rows(g: Geometry) -> int:
    return g.rows_of("audio", "cond_audio", "ref_audio")


def rope_table_bytes(g: Geometry, d: H3Dims, dtype_bytes: int) -> int:
    """The [1, S, 1, rot/2, 2, 2] rotation table every block reads."""
    return g.seq_len * (d.rot_dim // 2) * 4 * dtype_bytes


def held_outside_bytes(g: Geometry, d: H3Dims, dtype_bytes: int) -> int:
    """Stock tensors alive while the blocks run (besides the hidden state, which the block formula counts)."""
    vis, aud = visual_rows(g), aural_rows(g)
    embeds = (vis + aud) * d.hidden * dtype_bytes
    patch_rows = (vis + g.video_rows) * VIDEO_ROW_ELEMS * FP32 + (aud + g.audio_rows) * AUDIO_ROW_ELEMS * FP32
    latents = SAMPLER_LATENT_COPIES * FP32 * (g.video_rows * VIDEO_ROW_ELEMS + g.audio_rows * AUDIO_ROW_ELEMS)
    text = g.text_rows * d.hidden * dtype_bytes
    return embeds + patch_rows + latents + text + rope_table_bytes(g, d, dtype_bytes)


def pre_block_bytes(g: Geometry, d: H3Dims, dtype_bytes: int) -> int:
    """Peak of the stock embedding phase: fp32 projection outputs, their bf16 copies, the new hidden state."""
    vis, aud = visual_rows(g), aural_rows(g)
    h = d.hidden
    video = vis * h * (FP32 + dtype_bytes)
    audio = vis * h * dtype_bytes + aud * h * (FP32 + dtype_bytes)
    assemble = (g.seq_len + vis + aud) * h * dtype_bytes
    return max(video, audio, assemble) + held_outside_bytes(g, d, dtype_bytes) - (vis + aud) * h * dtype_bytes


def final_bytes(g: Geometry, d: H3Dims, dtype_bytes: int) -> int:
    """Peak of the stock final layer: hidden state, held tensors, and the modulated fp32 target rows."""
    h = d.hidden
    tv, ta = g.video_rows, g.audio_rows
    # norm -> *(1+scale) -> +shift -> .float(): two temporaries live at a time, the last pair bf16 + fp32;
    # the video rows' fp32 result stays alive while the audio rows go through the same steps
    temporaries = max(tv * h * (dtype_bytes + FP32), tv * h * FP32 + ta * h * (dtype_bytes + FP32))
    return g.seq_len * h * dtype_bytes + held_outside_bytes(g, d, dtype_bytes) + temporaries


FINAL_CHUNK_ROWS = 8192  # rows per chunk of the final layer when the executor streams (execution/final_layer.py)


def chunked_final_bytes(g: Geometry, d: H3Dims, dtype_bytes: int, rows: int = FINAL_CHUNK_ROWS) -> int:
    """Peak of the final layer run in row chunks: two temporaries of one chunk plus the fp32 outputs."""
    r = min(rows, max(g.video_rows, g.audio_rows))
    outputs = FP32 * (g.video_rows * VIDEO_ROW_ELEMS + g.audio_rows * AUDIO_ROW_ELEMS)
    return (g.seq_len * d.hidden * dtype_bytes + held_outside_bytes(g, d, dtype_bytes)
            + r * d.hidden * (dtype_bytes + FP32) + outputs)


def dequantised_stage_bytes(model: ModelProfile) -> int:
    """Largest block weight made in the compute dtype for one phase (formats the executor cannot slice)."""
    if model.quantization not in DEQUANTISED_FORMATS:
        return 0
    d = model.dims
    largest = max(3 * d.inner * d.hidden, 2 * d.ffn * d.hidden, 18 * d.hidden * d.time_embed_dim)
    return largest * model.compute_dtype_bytes


def workspace_bytes(g: Geometry, model: ModelProfile) -> int:
    return WORKSPACE_FIXED + dequantised_stage_bytes(model)


# What the process holds beside torch's allocated bytes, from `bench/cards/ (python -m bench.cards)` on the H200 (ComfyUI 0.33.0,
# comfy-aimdo 0.4.13, cudaMallocAsync; docs/lab/2026-12-03-comfyui-cards.md, "Bytes outside torch's count"):
# - comfy-aimdo's cast buffer (the weights of the layers being streamed) reached 1.72x one INT8 block and 1.14x
#   one bf16 block, where the plan's must-have weights count one block: under dynamic VRAM, 0.75 of a block more
#   for quantised formats (INT8 measured; FP8/NVFP4 assumed alike) and 0.25 for bf16/fp16/fp32;
# - torch's pool held up to 7.6% over its allocated peak on the stock path (whole-sequence tensors) and up to
#   6.3% in LongMedia's streamed modes (chunk-sized tensors).
CAST_BUFFER_EXTRA_BLOCKS_QUANTISED = 0.75
CAST_BUFFER_EXTRA_BLOCKS_FLOAT = 0.25
FLOAT_FORMATS = frozenset({"bf16", "fp16", "fp32"})
ALLOCATOR_SLACK_STOCK = 0.08
ALLOCATOR_SLACK_STREAMED = 0.065


def outside_torch_bytes(torch_bytes: int, model: ModelProfile, dynamic_vram: bool, stock_path: bool) -> int:
    """Device bytes a phase of `torch_bytes` (torch-allocated, weights excluded) costs beside them."""
    blocks = CAST_BUFFER_EXTRA_BLOCKS_FLOAT if model.quantization in FLOAT_FORMATS else CAST_BUFFER_EXTRA_BLOCKS_QUANTISED
    cast = int(blocks * model.block_weight_bytes) if dynamic_vram else 0
    slack = ALLOCATOR_SLACK_STOCK if stock_path else ALLOCATOR_SLACK_STREAMED
    return cast + int(slack * max(0, torch_bytes))


def stock_pass_bytes(model: ModelProfile, g: Geometry) -> int:
    """Device bytes a pass would need run stock with every weight resident: all weights, the largest of the
    embedding, a stock block (with what is held around it) and the final layer, the workspace, and what the
    process holds beyond torch's count. The Sampler's residency boundary asks ComfyUI to free this much before
    the plan reads the device (so the plan runs once, after it); no plan predicts more."""
    d, b = model.dims, model.compute_dtype_bytes
    block = predicted_peak_bytes(g.seq_len, d, ChunkSizes(), b, int8_linears=model.is_int8)
    workspace = workspace_bytes(g, model)
    torch_bytes = max(block + held_outside_bytes(g, d, b) + workspace, pre_block_bytes(g, d, b) + WORKSPACE_FIXED,
                      final_bytes(g, d, b) + workspace)
    return model.weight_bytes + torch_bytes + outside_torch_bytes(torch_bytes, model, True, True)
