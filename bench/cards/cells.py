"""The cells a card process runs, as the bench's arguments name them (`grid`), the bench LoRA's file name, and the
advised rerun a refused row asks for: shared by the parent (`entry`) and the card's process (`child`)."""

from __future__ import annotations

from .rows import Cell


def grid(a) -> list[Cell]:
    """The main table's cells of one card, in run order."""
    return [Cell(f, s, smp) for f in a.formats for s in a.seconds for smp in a.samplers]


def bench_lora_name(a) -> str:
    """The file name of the bench's LoRA (in `--models`/loras): rank and block count in it."""
    return f"bench_lora_r{a.lora_rank}_{a.blocks}blocks.safetensors"


def advised_segment_seconds(row: dict) -> float | None:
    """The segment length a LongMedia refusal (LongMediaInputError before any GPU work) tells the user to set: the
    error's typed suggestion, as `measure` records it."""
    advice = row.get("suggestion") or {}
    if row.get("sampler") != "longmedia" or advice.get("input") != "segment_seconds":
        return None
    return float(advice["value"])
