"""`PatchBytes`: what LoRA patches (stock LoraLoaderModelOnly's) add to a DiT stage's host RAM and VRAM.

A rank-R LoRA on a linear of out x in holds R*(in+out) parameters (its down and up matrices). ComfyUI keeps a
LoRA's tensors in RAM beside the model (a need: they are loaded, not mmapped) and, for a weight that streams, patches
it as it reaches the card: the block's LoRA tensors travel with the block, and the patched weight is computed in the
compute dtype (ComfyUI's own estimate for such a patch: the weight's elements x 2 bytes x
LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR 2, comfy/model_patcher.py). The plan counts one block's LoRA tensors and the
largest linear's patch math on the card (`on_device`: the passes are planned on a card with that much less free,
so the planner picks its mode and chunks around them), and every LoRA tensor in RAM (the whole-job plan's DiT
stages). The patch math's time is not counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import check_int
from ..h3.dims import H3_FULL, H3Dims
from ..h3.profiles import DeviceProfile
from ..h3.safetensors_header import read_header

LORA_DTYPE_BYTES = 2                 # LoRA files ship bf16/fp16 tensors
PATCH_MATH_BYTES = 2 * 2             # compute dtype bytes x ComfyUI's LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR


def block_linears(d: H3Dims = H3_FULL) -> tuple[tuple[int, int], ...]:
    """(out, in) of one H3 block's linears as the checkpoint stores them: fused QKV, out-projection, fused gate/up
    and down (`H3Dims.block_params`)."""
    h, i, f = d.hidden, d.inner, d.ffn
    return (3 * i, h), (h, i), (2 * f, h), (h, f)


def lora_block_params(rank: int, d: H3Dims = H3_FULL) -> int:
    """A rank-`rank` LoRA's parameters on one block: rank x (in + out) for each linear."""
    return sum(rank * (o + i) for o, i in block_linears(d))


@dataclass(frozen=True)
class PatchBytes:
    """What the model's patches hold: every LoRA tensor (host RAM) and one block's share (VRAM, with the block)."""

    host_bytes: int = 0
    block_bytes: int = 0
    source: str = "none"

    @property
    def present(self) -> bool:
        return self.host_bytes > 0

    def vram_bytes(self, d: H3Dims = H3_FULL) -> int:
        """On the card at once: one block's LoRA tensors and the largest linear's patch math."""
        if not self.present:
            return 0
        return self.block_bytes + max(o * i for o, i in block_linears(d)) * PATCH_MATH_BYTES

    def on_device(self, device: DeviceProfile, d: H3Dims = H3_FULL) -> DeviceProfile:
        """`device` with the patches' VRAM (`vram_bytes`) held: what a pass is planned on."""
        return dataclasses.replace(device, vram_free_bytes=max(0, device.vram_free_bytes - self.vram_bytes(d)))

    @classmethod
    def from_rank(cls, rank: int, count: int = 1, d: H3Dims = H3_FULL) -> "PatchBytes":
        """`count` LoRAs of rank `rank` on every block linear (bf16)."""
        check_int("lora_rank", rank, 0, 4096, "Give the LoRA's rank (its files name it; 0 = no LoRA).")
        check_int("lora_count", count, 0, 16, "Give how many LoRAs are chained (LoraLoaderModelOnly nodes).")
        block = lora_block_params(rank, d) * LORA_DTYPE_BYTES * count
        return cls(block * d.num_blocks, block, f"{count} LoRA(s) of rank {rank}" if block else "none")

    @classmethod
    def from_file(cls, path: str, count: int = 1, d: H3Dims = H3_FULL) -> "PatchBytes":
        """A LoRA file's tensors, read from its safetensors header (no tensor is loaded)."""
        total = sum(t.nbytes for t in read_header(path).tensors) * count
        return cls(total, total // max(1, d.num_blocks), f"{count} x {path}")
