"""The first-prompt difference in the GPU rows (docs/lab/2026-12-04-full-depth-step-times.md): stock's latent at full
depth depends on the prompt's position in its process, not on the card or on how many weights stayed resident."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "docs/lab/data"
FIRST, LATER = -408311.47, -408477.32


def stock_rows() -> list[dict]:
    rows = [json.loads(line) for f in sorted(DATA.glob("*cards*.jsonl")) for line in f.read_text().splitlines()]
    return [r for r in rows if r.get("sampler") == "stock" and r.get("result") == "ok" and r.get("steps") == 2
            and r.get("blocks") == 50 and r.get("format") == "int8" and r.get("seconds") == 14.4
            and not r.get("lora_rank")]   # a LoRA changes the model: its latent is another one


def test_stock_at_full_depth_gives_one_checksum_per_process_position():
    by_position: dict[int, set[float]] = {}
    for r in stock_rows():
        by_position.setdefault(r["process_position"], set()).add(round(r["stats"]["checksum"], 2))
    assert by_position == {1: {FIRST}, 2: {LATER}}, by_position


def test_the_first_prompt_value_holds_on_both_card_types_and_the_later_one_under_a_streaming_limit():
    rows = stock_rows()
    firsts = [r["device"] for r in rows if r["process_position"] == 1]
    assert any("H200" in d for d in firsts) and any("H100" in d for d in firsts), firsts
    resident = max(r["process_peak_bytes"] for r in rows if r["process_position"] == 1)  # every weight resident
    later = [r for r in rows if r["process_position"] == 2]
    # a card smaller than the resident peak, and the process within it: Dynamic VRAM streamed part of the weights
    assert later and all(r["process_peak_bytes"] < r["card_gib"] * 2**30 < resident for r in later), later


def test_the_control_pair_at_the_same_inputs_in_one_process_reproduces_both_values():
    """stock, then stock#2 (the same prompt, ComfyUI's node cache freed), then LongMedia normal + existing, in one card
    process on an H100 (tools/gpu/run_first_prompt_control.sh): the repeat differs from the first run exactly as the
    later positions do, and LongMedia at the third position gives the later value."""
    rows = [json.loads(line) for line in (DATA / "2026-12-07-h100-first-prompt-control-cards.jsonl").read_text()
            .splitlines()]
    got = [(r["label"], r["process_position"], round(r["stats"]["checksum"], 2)) for r in rows if r["result"] == "ok"]
    assert got == [("stock", 1, FIRST), ("stock#2", 2, LATER), ("longmedia_existing", 3, LATER)], got
    assert len({(r["device"], r["card_gib"], r["steps"], r["blocks"], r["format"], r["seed"]) for r in rows}) == 1
    assert rows[1]["stats"]["std"] == rows[2]["stats"]["std"] != rows[0]["stats"]["std"]
