"""What the planner knows about the model (`ModelProfile`) and the machine (`DeviceProfile`).

Both are plain frozen values, built from real objects (`ModelProfile.from_module`, `.from_safetensors`,
`DeviceProfile.detect`) or from presets (`ModelProfile.preset("h3-int8")`, `DeviceProfile.card(16, 64)`),
so the planner and its tests never need a GPU or a checkpoint.
"""

from __future__ import annotations

import math
import platform
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ..errors import check_choice, check_float
from ..units import GIB, MIB
from . import checkpoint_scan as scan
from .dims import H3_FULL, H3Dims

PRESETS = {"h3-int8": "int8", "h3-bf16": "bf16", "h3-nvfp4": "nvfp4"}


@dataclass(frozen=True)
class ModelProfile:
    """Size facts of an H3 diffusion model: dims, parameters, physical bytes and how its Linears are stored."""

    name: str
    dims: H3Dims
    param_count: int
    weight_bytes: int                 # physical bytes, shared storages counted once
    blocks_weight_bytes: int          # all DiT blocks together
    block_weight_bytes: int           # the largest single DiT block
    quantization: str                 # dominant storage of the block Linears: bf16/fp16/fp32/fp8/int8/w4a8/nvfp4/...
    layer_formats: tuple[tuple[str, int], ...]   # (format, Linear count), whole model
    source: str = "preset"
    compute_dtype_bytes: int = 2      # H3 runs its activations in bf16

    @property
    def non_block_bytes(self) -> int:
        """Embedders, token refiner and final layer: used before block 0 and after the last block."""
        return self.weight_bytes - self.blocks_weight_bytes

    @property
    def is_int8(self) -> bool:
        return self.quantization == "int8"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["non_block_bytes"] = self.non_block_bytes
        return out

    @classmethod
    def from_entries(cls, name: str, entries: list[scan.TensorEntry], known_formats: dict[str, str],
                     metadata: Mapping[str, str] | None = None, source: str = "state_dict") -> "ModelProfile":
        formats = scan.infer_formats(entries, known_formats)
        dims, prefix = scan.detect_dims(entries, formats, metadata, source=name)
        seen: dict[Any, int] = {}
        params = 0
        per_block: dict[int, dict[Any, int]] = {}
        block_head = prefix + "blocks."
        for e in entries:
            key = e.storage_key if e.storage_key is not None else ("name", e.name)
            seen[key] = max(seen.get(key, 0), e.nbytes)
            if e.name.startswith(block_head):
                idx = e.name[len(block_head):].split(".", 1)[0]
                if idx.isdigit():
                    bucket = per_block.setdefault(int(idx), {})
                    bucket[key] = max(bucket.get(key, 0), e.nbytes)
            last = e.name.rsplit(".", 1)[-1]
            if last in scan.SCALE_SUFFIXES or last.startswith("__"):
                continue
            layer = e.name[: -len(".weight")] if e.name.endswith(".weight") else None
            params += e.numel * (2 if layer is not None and formats.get(layer) in scan.PACKED_4BIT else 1)
        block_sizes = [sum(b.values()) for b in per_block.values()] or [0]
        weighted: Counter = Counter()
        shapes = {e.name: e for e in entries}
        for layer, fmt in formats.items():
            if layer.startswith(block_head):
                weighted[fmt] += shapes[layer + ".weight"].numel
        dominant = weighted.most_common(1)[0][0] if weighted else "bf16"
        return cls(name=name, dims=dims, param_count=params, weight_bytes=sum(seen.values()),
                   blocks_weight_bytes=sum(block_sizes), block_weight_bytes=max(block_sizes),
                   quantization=dominant, layer_formats=tuple(sorted(Counter(formats.values()).items())),
                   source=source)

    @classmethod
    def from_module(cls, module: Any, name: str = "module") -> "ModelProfile":
        """From a loaded H3 nn.Module (ComfyUI's MiniMaxH3Model or anything with its parameter names)."""
        entries, formats = scan.entries_from_module(module)
        return cls.from_entries(name, entries, formats, source="module")

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], name: str = "state_dict") -> "ModelProfile":
        entries, formats = scan.entries_from_state_dict(sd)
        return cls.from_entries(name, entries, formats, source="state_dict")

    @classmethod
    def from_safetensors(cls, path: str) -> "ModelProfile":
        """From a safetensors file's header alone (no tensor is loaded)."""
        entries, formats, meta = scan.entries_from_safetensors(path)
        return cls.from_entries(path, entries, formats, meta, source="safetensors header")

    @classmethod
    def preset(cls, name: str, dims: H3Dims = H3_FULL) -> "ModelProfile":
        """Full-size H3 stored as int8 / bf16 / nvfp4 (every Linear but the fp32 islands quantised)."""
        check_choice("model", name, tuple(PRESETS), "Use a preset name or a safetensors path.")
        return cls.from_entries(name, h3_preset_entries(dims, PRESETS[name]), {}, source="preset")


def _linear(name: str, out_f: int, in_f: int, fmt: str, bias: bool) -> list[scan.TensorEntry]:
    E = scan.TensorEntry
    n = out_f * in_f
    if fmt == "int8":
        w = [E(f"{name}.weight", (out_f, in_f), "I8", n), E(f"{name}.weight_scale", (), "F32", 4)]
    elif fmt == "nvfp4":
        w = [E(f"{name}.weight", (out_f, in_f // 2), "U8", n // 2),
             E(f"{name}.weight_scale", (out_f, in_f // 16), "F8_E4M3", n // 16),
             E(f"{name}.weight_scale_2", (), "F32", 4), E(f"{name}.input_scale", (), "F32", 4)]
    else:
        dtype = {"fp32": "F32", "bf16": "BF16"}[fmt]
        w = [E(f"{name}.weight", (out_f, in_f), dtype, n * scan.DTYPE_BYTES[dtype])]
    if bias:
        dtype = "F32" if fmt == "fp32" else "BF16"
        w.append(E(f"{name}.bias", (out_f,), dtype, out_f * scan.DTYPE_BYTES[dtype]))
    return w


def h3_preset_entries(d: H3Dims, fmt: str) -> list[scan.TensorEntry]:
    """Every tensor of an H3 checkpoint (ComfyUI key names), Linears stored as `fmt`, fp32 islands kept fp32."""
    E = scan.TensorEntry
    norm = lambda name, n: [E(name, (n,), "BF16", 2 * n)]  # noqa: E731

    def attn_mlp(p: str) -> list[scan.TensorEntry]:
        return (norm(f"{p}norm1.weight", d.hidden) + norm(f"{p}norm2.weight", d.hidden)
                + _linear(f"{p}attn.qkv_proj", 3 * d.inner, d.hidden, fmt, False)
                + norm(f"{p}attn.q_norm.weight", d.head_dim) + norm(f"{p}attn.k_norm.weight", d.head_dim)
                + _linear(f"{p}attn.out_proj", d.hidden, d.inner, fmt, False)
                + _linear(f"{p}mlp.fc1", 2 * d.ffn, d.hidden, fmt, False)
                + _linear(f"{p}mlp.fc2", d.hidden, d.ffn, fmt, False))

    patch_in = d.video_channels * 4
    out = (_linear("video_patch_proj", d.hidden, patch_in, "fp32", True)
           + _linear("audio_patch_proj", d.hidden, d.audio_channels, "fp32", True)
           + _linear("condition_proj", d.hidden, d.text_dim, fmt, True)
           + _linear("time_embedder.proj_in", d.hidden, 256, "fp32", True)
           + _linear("time_embedder.proj_out", d.time_embed_dim, d.hidden, "fp32", True)
           + [E("rope.inv_freq", (d.rope_inv_freq_len,), "F32", 4 * d.rope_inv_freq_len)])
    for i in range(d.refiner_blocks):
        out += attn_mlp(f"token_refiner.blocks.{i}.")
    out += norm("token_refiner.final_norm.weight", d.hidden)
    for i in range(d.num_blocks):
        out += attn_mlp(f"blocks.{i}.") + _linear(f"blocks.{i}.adaln_proj.linear", 18 * d.hidden,
                                                   d.time_embed_dim, fmt, True)
    out += (norm("final_layer.norm.weight", d.hidden)
            + _linear("final_layer.adaln_proj.linear", 2 * d.hidden, d.time_embed_dim, fmt, True)
            + _linear("final_layer.video_out", patch_in, d.hidden, "fp32", True)
            + _linear("final_layer.audio_out", d.audio_channels, d.hidden, "fp32", True))
    return out


# What ComfyUI's process holds on the card beyond the ~0.5 GiB of context when the Sampler plans (after the residency
# boundary, the model's weights not yet resident): the nodes planned from a 7.19 GiB budget on an 8 GiB card and
# the card model gives 7.50 GiB (`python -m bench.cards --blocks 2 --steps 2`, H200, ComfyUI 0.33.0, comfy-aimdo
# on; docs/lab/2026-12-03-cards-table.md). The CLI plans with it so that it sees the card as the nodes do.
COMFYUI_HELD_BYTES = int(0.31 * GIB)


@dataclass(frozen=True)
class DeviceProfile:
    """The GPU and host memory the plan must fit in."""

    name: str
    vram_total_bytes: int
    vram_free_bytes: int              # free as the driver reports it, before the job
    allocator_reserved_bytes: int     # held by torch's caching allocator but unused: reusable
    ram_total_bytes: int
    ram_available_bytes: int
    pinned_budget_bytes: int          # page-locked host memory ComfyUI allows itself
    os_name: str                      # linux / windows / darwin
    dynamic_vram: bool                # ComfyUI's dynamic VRAM (comfy-aimdo) is active
    compute_capability: tuple[int, int] | None = None

    @property
    def usable_vram_bytes(self) -> int:
        return self.vram_free_bytes + self.allocator_reserved_bytes

    @property
    def in_use_bytes(self) -> int:
        """Device memory in use outside the usable VRAM when it was read: the CUDA context, what the process held
        beyond torch's reusable cache, other processes."""
        return max(0, self.vram_total_bytes - self.usable_vram_bytes)

    @property
    def vram_gb(self) -> float:
        return self.vram_total_bytes / GIB

    def to_dict(self) -> dict:
        out = asdict(self)
        out["usable_vram_bytes"] = self.usable_vram_bytes
        return out

    @classmethod
    def card(cls, vram_gb: float = 16, ram_gb: float = 64, *, os_name: str = "linux", dynamic_vram: bool = True,
             compute_capability: tuple[int, int] | None = (8, 9), name: str | None = None,
             host_held_bytes: int = 0) -> "DeviceProfile":
        """A typical machine: the driver and CUDA context hold ~0.5 GiB (0.9 GiB on Windows with a desktop).

        `host_held_bytes`: device memory the host process holds beyond its context when it plans
        (`COMFYUI_HELD_BYTES` for ComfyUI, as the nodes see the card; 0 for a bare executor).
        """
        check_float("vram_gb", vram_gb, 2, 1024, "Give the card's VRAM in GB.")
        check_float("ram_gb", ram_gb, 4, 8192, "Give the machine's RAM in GB.")
        check_choice("os_name", os_name, ("linux", "windows", "darwin"))
        total = int(vram_gb * GIB)
        ram = int(ram_gb * GIB)
        context = context_bytes(os_name)
        os_ram = int(max(2 * GIB, 0.08 * ram)) if os_name == "windows" else int(max(1.5 * GIB, 0.05 * ram))
        return cls(name=name or f"{vram_gb:g} GB card with {ram_gb:g} GB RAM", vram_total_bytes=total,
                   vram_free_bytes=max(0, total - context - host_held_bytes), allocator_reserved_bytes=0,
                   ram_total_bytes=ram,
                   ram_available_bytes=max(0, ram - os_ram), pinned_budget_bytes=pinned_ram_budget(ram, os_name),
                   os_name=os_name, dynamic_vram=dynamic_vram, compute_capability=compute_capability)

    @classmethod
    def detect(cls, device: Any = None, *, dynamic_vram: bool = False) -> "DeviceProfile":
        """Read the current machine through torch and psutil (each feature-detected).

        `dynamic_vram`: whether the host runs comfy-aimdo (`longmedia.comfy.host.memory.dynamic_vram_active`).
        """
        import torch  # the planner stays importable without torch; detection needs it

        os_name = platform.system().lower() or "linux"
        ram_total, ram_avail = _ram()
        name, total, free, reserved, cap = "cpu", 0, 0, 0, None
        if torch.cuda.is_available():
            dev = torch.device(device if device is not None else f"cuda:{torch.cuda.current_device()}")
            props = torch.cuda.get_device_properties(dev)
            free, total = torch.cuda.mem_get_info(dev)
            reserved = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
            name, cap = props.name, (props.major, props.minor)
        return cls(name=name, vram_total_bytes=int(total), vram_free_bytes=int(free),
                   allocator_reserved_bytes=max(0, int(reserved)), ram_total_bytes=ram_total,
                   ram_available_bytes=ram_avail, pinned_budget_bytes=pinned_ram_budget(ram_total, os_name),
                   os_name=os_name, dynamic_vram=dynamic_vram, compute_capability=cap)


def context_bytes(os_name: str) -> int:
    """Device memory the driver and CUDA context hold on a typical machine (more on Windows, with a desktop)."""
    return int(0.9 * GIB) if os_name == "windows" else int(0.5 * GIB)


def pinned_ram_budget(ram_bytes: int, os_name: str, swap_bytes: int = 0) -> int:
    """Page-locked RAM ComfyUI allows: 40% on Windows; elsewhere up to 90%, keeping 4 GiB and 16 GiB with swap."""
    if os_name == "windows":
        return int(0.4 * ram_bytes)
    return int(max(0.4 * ram_bytes, min(0.9 * ram_bytes, ram_bytes - 4 * GIB, ram_bytes + swap_bytes - 16 * GIB)))


def _ram() -> tuple[int, int]:
    try:
        import psutil
    except ImportError:  # psutil is a ComfyUI requirement but not ours; fall back to sysconf
        import os
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        avail = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else pages
        return pages * size, avail * size
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def gib(n: int | float) -> str:
    """Bytes as a short GiB string for reasons and tables."""
    return f"{n / GIB:.2f} GiB" if abs(n) < 100 * GIB else f"{n / GIB:.0f} GiB"


def gib_pair(a: int, b: int) -> tuple[str, str]:
    """Two sizes that are compared (a need and what is usable): in MiB when their GiB texts would read equal."""
    if a != b and gib(a) == gib(b):
        return f"{a / MIB:,.0f} MiB", f"{b / MIB:,.0f} MiB"
    return gib(a), gib(b)


def mib(n: int | float) -> int:
    return int(math.ceil(n / MIB))
