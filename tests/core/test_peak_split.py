"""bench/peak_split.py: card-bench rows split like for like against their plans; and the H100 rows of issue 29
behind docs/lab/2026-12-05-speed-goals.md's "Sol's peak, split" section."""

import json
from pathlib import Path

from bench.peak_split import made_up_row, main, split, table
from longmedia.units import GIB, MIB

DATA = Path(__file__).resolve().parents[2] / "docs" / "lab" / "data"


def test_split_sets_torch_against_its_bound_and_the_card_against_the_reserve():
    r = split(made_up_row())
    assert r["torch_bound"] == 6 * GIB and r["torch_margin"] == GIB  # torch need less the block's VBAR weights
    assert r["held_at_plan"] == GIB and r["end_other"] == 512 * MIB
    assert r["free_at_peak"] == GIB and r["reserve_left"] == 0  # 80 GiB device, 79 in use: the card's last GiB
    assert "reserve_left" not in split(made_up_row(simulate="reserve"))  # the device is not the card then
    stock = split(made_up_row(label="stock", plan_json=None))
    assert "torch_bound" not in stock and stock["process_peak"] == 13 * GIB
    assert "| longmedia_sol | 13.00 | 5.00 |" in table([split(made_up_row())])


def test_issue29_h100_rows_keep_sol_within_the_exact_rows_torch_margin(capsys):
    """Every LongMedia row of both H100 runs stays under the plan's torch bound by the same 0.15 GiB (Sol's buffers
    counted); the one Sol row whose NVML peak was 2 GiB higher has the torch figures of the rows that were not
    (allocated to 4 bytes, reserved to the byte)."""
    rows = [split(json.loads(line)) for name in ("2026-12-05-h100-flash4-cards.jsonl", "2026-12-05-h100-sol-16.jsonl")
            for line in (DATA / name).read_text().splitlines() if line.strip()]
    ours = [r for r in rows if "torch_margin" in r]
    assert len(ours) == 6
    assert all(150 * MIB < r["torch_margin"] < 152 * MIB for r in ours), [r["torch_margin"] for r in ours]
    sol = [r for r in ours if r["label"].startswith("longmedia_sol")]
    assert {(r["torch_peak"] // MIB, r["torch_reserved_peak"]) for r in sol} == {(6698, 7314866176)}
    assert sorted(r["process_peak"] for r in sol)[-1] - sorted(r["process_peak"] for r in sol)[0] == 2 * GIB
    assert main([str(DATA / "2026-12-05-h100-flash4-cards.jsonl")]) == 0
    assert "card free at device peak" in capsys.readouterr().out
    assert main(["--smoke"]) == 0 and "| longmedia_sol | 13.00 |" in capsys.readouterr().out
