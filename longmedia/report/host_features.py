"""Which host features LongMedia detected on a ComfyUI, as a frozen fact: `HostFeatures` (read by
`longmedia/comfy/host/features.py`, printed by `tools/host_features.py`, carried by the Sampler's RunReport so a bug
report can paste it). Torch-free and ComfyUI-free: only the vocabulary and the version rule live here."""

from __future__ import annotations

import re
from dataclasses import dataclass

AIMDO_RAISES_FROM = (0, 6, 0)
"""comfy-aimdo from this version raises RuntimeError from unpin, set_watermark and free_memory (silent before)."""


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """'0.5.5' -> (0, 5, 5); a suffix ('0.6.0rc1', '0.6.0+cu12') is dropped; None or no leading number -> None."""
    if not version:
        return None
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def aimdo_raises(version: str | None) -> bool | None:
    """Whether this comfy-aimdo raises RuntimeError where older ones failed silently; None when unknown."""
    parsed = version_tuple(version)
    if parsed is None:
        return None
    return parsed + (0,) * (3 - len(parsed)) >= AIMDO_RAISES_FROM


@dataclass(frozen=True)
class HostFeatures:
    """What the pack found on one ComfyUI. Booleans are feature tests, not version guesses; a version is None where
    the package is absent. notes: why a feature could not be read (an import that failed, say)."""

    comfyui_version: str | None
    per_token_rows: bool              # comfy.ldm.minimax.model._mod_row (per-token modulation rows, denoise masks)
    pdd_heads: bool                   # FinalLayer.forward(..., sigma, sample_sigmas, shifts): the PDD head bank
    vsa_gates: bool                   # DiTBlock(gate_compress=...): VSA checkpoints' to_gate_compress
    block_attention_handoff: bool     # DiTBlock.forward(..., attention=None): call_args["attention"] reaches the block
    bsa_present: bool                 # comfy_extras.nodes_sparse_attention (BlockSparseAttention)
    bsa_chaining: bool                # make_h3_block_patch(..., previous): chains an existing double_block replacement
    malloc_graphs: bool               # comfy.model_prefetch.pause_malloc_graph
    model_attention_backend: bool     # comfy_extras.nodes_model_advanced.ModelAttentionBackend
    kitchen_version: str | None
    aimdo_version: str | None
    notes: tuple[str, ...] = ()
    # host RAM (read where they exist, none needed: comfy/host/ram.py falls back on each)
    cgroup_aware_ram: bool = False    # comfy.system_memory.virtual_memory_available (a container's limit, v0.35+)
    pin_eviction: bool = False        # comfy.model_management.free_pins (what LongMedia frees pins with)
    fast_disk_flag: bool = False      # --fast-disk (disk-backed dynamic loading instead of unpinned RAM)
    disable_fast_disk_flag: bool = False  # --disable-fast-disk (fast disk automatic on NVMe, v0.37+)

    @property
    def aimdo_raising(self) -> bool | None:
        return aimdo_raises(self.aimdo_version)

    @property
    def generation(self) -> str:
        """A short name for the host's line (by features: upstream overlays keep 0.33.0's version string)."""
        version = self.comfyui_version or "unknown version"
        upstream = self.malloc_graphs or self.per_token_rows or self.pdd_heads
        return f"ComfyUI {version} ({'0.38+ H3 features' if upstream else 'before 0.38 H3 features'})"

    def lines(self) -> tuple[str, ...]:
        def yes(flag: bool | None) -> str:
            return "unknown" if flag is None else ("yes" if flag else "no")

        rows = [f"generation: {self.generation}",
                f"per-token rows: {yes(self.per_token_rows)}",
                f"PDD heads: {yes(self.pdd_heads)}",
                f"VSA gates: {yes(self.vsa_gates)}",
                f"block attention handoff (call_args['attention']): {yes(self.block_attention_handoff)}",
                f"BlockSparseAttention: {yes(self.bsa_present)}",
                f"BlockSparseAttention chaining: {yes(self.bsa_chaining)}",
                f"malloc graphs (pause_malloc_graph): {yes(self.malloc_graphs)}",
                f"comfy-aimdo raising (>= 0.6.0): {yes(self.aimdo_raising)}",
                f"ModelAttentionBackend: {yes(self.model_attention_backend)}",
                f"host RAM read container-aware (comfy.system_memory): {yes(self.cgroup_aware_ram)}",
                f"pin eviction API (free_pins): {yes(self.pin_eviction)}",
                f"--fast-disk: {yes(self.fast_disk_flag)}, --disable-fast-disk: {yes(self.disable_fast_disk_flag)}",
                f"comfy-kitchen: {self.kitchen_version or 'not installed'}",
                f"comfy-aimdo: {self.aimdo_version or 'not installed'}"]
        return tuple(rows) + tuple(f"note: {n}" for n in self.notes)

    def to_dict(self) -> dict[str, object]:
        out = {"kind": "host_features"} | {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["notes"] = list(self.notes)
        out["aimdo_raising"] = self.aimdo_raising
        out["generation"] = self.generation
        return out
