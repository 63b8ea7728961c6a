"""Card-bench rows' device memory, split like for like against their plans (issue 29, item 3).

    python3 -m bench.peak_split OUT/cards.jsonl [MORE.jsonl ...]
    python3 -m bench.peak_split --smoke     # a made-up row (no files, no GPU)

Per LongMedia row: the process's NVML peak (its whole device memory: the CUDA context, torch's pool, comfy-aimdo's
VBAR weights and cast buffers), torch's allocated and reserved peaks, the last step end's split (torch reserved,
comfy-aimdo's usage, the weights resident in its VBARs, the rest of the process), and the plan's figures: its
predicted peak, usable bytes, activation reserve, activation need, torch's allocated bound (torch need less the
block's weights, which dynamic VRAM keeps in VBAR pages), the attention path's per-call bytes, and what the process
held when the plan read the device (under bench.cards' ballast: the card less the free VRAM the plan read).

Two comparisons follow. torch: the allocated peak against the plan's torch bound (what the plan promises for its own
allocations, Sol's buffers among them). device: the card's free memory at the device's NVML peak (under the ballast
every byte of the device but the card is held, so the device's free memory is the card's) against the activation
reserve: the plan's budget is the free VRAM it read, so what the process held then is outside it, and the predicted
peak (elastic weights included) may fill the budget up to the reserve. A row without a plan (stock) is listed with
its measured figures only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from longmedia.units import GIB, MIB


def split(row: dict) -> dict:
    """One row's figures (bytes; None where the row does not say)."""
    last = (row.get("step_memory") or [{}])[-1]
    out = {"label": row.get("label"), "process_peak": row.get("process_peak_bytes"),
           "torch_peak": row.get("torch_peak_bytes"), "torch_reserved_peak": row.get("torch_reserved_peak_bytes"),
           "end_reserved": last.get("torch_reserved"), "end_aimdo": last.get("aimdo_usage"),
           "end_vbar": last.get("vbar_resident"), "end_process": last.get("process")}
    if None not in (out["end_process"], out["end_reserved"], out["end_aimdo"]):
        out["end_other"] = out["end_process"] - out["end_reserved"] - out["end_aimdo"]
    if row.get("simulate") == "ballast" and None not in (row.get("comfy_total_mib"), row.get("device_used_peak_bytes")):
        out["free_at_peak"] = row["comfy_total_mib"] * MIB - row["device_used_peak_bytes"]
    if not row.get("plan_json"):
        return out
    plan = json.loads(row["plan_json"])
    mem, device = plan["memory"], plan["device"]
    out.update(predicted_peak=plan["predicted_peak_bytes"], usable=plan["usable_bytes"],
               reserve=plan["activation_reserve_bytes"], need=mem["activation_need_bytes"],
               torch_bound=mem["torch_need_bytes"] - mem["min_weight_bytes"],
               attention_extra=plan["attention"].get("extra_bytes", 0),
               held_at_plan=plan.get("in_use_at_plan_bytes", device["vram_total_bytes"] - plan["budget_bytes"]))
    if out["torch_peak"] is not None:
        out["torch_margin"] = out["torch_bound"] - out["torch_peak"]
    if "free_at_peak" in out:
        out["reserve_left"] = out["free_at_peak"] - out["reserve"]
    return out


COLUMNS = (("process_peak", "NVML peak"), ("torch_peak", "torch alloc peak"), ("torch_reserved_peak", "torch reserved"),
           ("end_reserved", "end: reserved"), ("end_aimdo", "end: aimdo"), ("end_vbar", "end: VBAR weights"),
           ("end_other", "end: rest"), ("held_at_plan", "held at plan"), ("predicted_peak", "predicted peak"),
           ("usable", "usable"), ("reserve", "reserve"), ("need", "activation need"), ("torch_bound", "torch bound"),
           ("attention_extra", "attention per call"), ("torch_margin", "torch margin"),
           ("free_at_peak", "card free at device peak"), ("reserve_left", "free - reserve"))


def _gib(value) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def table(rows: list[dict]) -> str:
    """The markdown table of `split` rows, GiB."""
    lines = ["| row | " + " | ".join(name for _, name in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append(f"| {r['label']} | " + " | ".join(_gib(r.get(key)) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def made_up_row(**changes) -> dict:
    """A LongMedia row as bench.cards writes it, with round figures (GiB): the smoke run's and the tests'."""
    plan = {"predicted_peak_bytes": 14 * GIB, "usable_bytes": 14 * GIB, "activation_reserve_bytes": GIB,
            "budget_bytes": 15 * GIB, "device": {"vram_total_bytes": 16 * GIB},
            "memory": {"activation_need_bytes": 8 * GIB, "torch_need_bytes": 7 * GIB, "min_weight_bytes": GIB},
            "attention": {"extra_bytes": 200 * MIB}}
    row = {"label": "longmedia_sol", "result": "ok", "simulate": "ballast", "comfy_total_mib": 80 * 1024,
           "process_peak_bytes": 13 * GIB, "torch_peak_bytes": 5 * GIB, "torch_reserved_peak_bytes": 6 * GIB,
           "device_used_peak_bytes": 79 * GIB, "plan_json": json.dumps(plan),
           "step_memory": [{"torch_reserved": 6 * GIB, "aimdo_usage": 4 * GIB, "vbar_resident": 3 * GIB,
                            "process": 10 * GIB + 512 * MIB}]}
    return row | changes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peak_split", description=__doc__.split("\n\n")[0])
    p.add_argument("rows", nargs="*", type=Path, help="card-bench rows files (cards.jsonl)")
    p.add_argument("--smoke", action="store_true", help="the table of a made-up row (no files, no GPU)")
    a = p.parse_args(argv)
    if a.smoke:
        print(table([split(made_up_row())]))
        return 0
    if not a.rows:
        p.error("give cards.jsonl files, or --smoke")
    for path in a.rows:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        print(f"{path} (GiB)\n{table([split(r) for r in rows if r.get('result') == 'ok'])}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
