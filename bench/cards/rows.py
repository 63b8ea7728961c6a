"""The card bench's rows: a cell of a card's main table (`Cell`), the fields every row of one card carries
(`CardFields`), and cards.jsonl, the file the rows go to as they finish (read back by the tables and by a
restarted child)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

ROWS_FILE = "cards.jsonl"


@dataclass(frozen=True)
class Cell:
    """One cell of a card's main table: the weights' format, the job's length and the sampler (`name#N`: a repeat)."""

    format: str
    seconds: float
    sampler: str

    @classmethod
    def of(cls, row: dict) -> Cell:
        return cls(row["format"], row["seconds"], row["sampler"])

    def row(self, card: CardFields | dict, label: str | None = None, **extra) -> dict:
        """This cell's row before it runs: the card's fields, the cell, its label (the sampler's name unless told)
        and seed 0."""
        from longmedia.h3.lattice import frames_for_seconds

        base = card.as_row() if isinstance(card, CardFields) else card  # a dict: a row already made
        return {**base, "format": self.format, "seconds": self.seconds, "frames": frames_for_seconds(self.seconds),
                "sampler": self.sampler, "label": label or self.sampler, "seed": 0, **extra}


@dataclass(frozen=True)
class CardFields:
    """What every row of one card carries: the card and model, and (in its child) how the process started."""

    card_gib: float
    blocks: int
    steps: int
    width: int
    height: int
    device: str | None = None
    aimdo_enabled: bool | None = None
    alloc_conf: str | None = None
    simulate: str | None = None
    reserve_vram_gib: float | None = None
    cap_enforced: bool | None = None
    free_at_start_bytes: int | None = None
    comfy_total_mib: int | None = None
    comfy_args: tuple[str, ...] = ()
    host_ram_gib: float | None = None
    host_ram_limit: str | None = None
    balloon_bytes: int = 0
    mem_available_start_bytes: int | None = None
    disk_read_gbps: float | None = None
    lora_rank: int = 0

    def as_row(self) -> dict:
        """Every field as a row's keys (the child's rows)."""
        return dataclasses.asdict(self)

    def parent_row(self) -> dict:
        """The fields the parent knows without the card's process (a row it writes for a child that died)."""
        return {"card_gib": self.card_gib, "blocks": self.blocks, "steps": self.steps, "width": self.width,
                "height": self.height, "comfy_args": list(self.comfy_args), "host_ram_gib": self.host_ram_gib,
                "host_ram_limit": self.host_ram_limit, "lora_rank": self.lora_rank}


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_row(out_dir: Path, row: dict) -> None:
    with open(out_dir / ROWS_FILE, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def done_cells(rows: list[dict], card: float, host_ram_gib: float | None = None,
               comfy_args: tuple[str, ...] | list[str] = (), lora_rank: int = 0) -> set[Cell]:
    """The main-table cells of `card` at this host RAM limit (None: the whole machine), these ComfyUI arguments
    and this LoRA rank (0: none) that have a row (a restarted child skips them); a row from before these fields
    counts as unlimited, flag-free and without a LoRA."""
    return {Cell.of(r) for r in rows if r.get("card_gib") == card and not r.get("extra") and "sampler" in r
            and r.get("host_ram_gib") == host_ram_gib and tuple(r.get("comfy_args") or ()) == tuple(comfy_args)
            and int(r.get("lora_rank") or 0) == lora_rank}
