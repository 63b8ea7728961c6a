"""The card bench's tables over its cards.jsonl rows: every row as measured (`table`, plus the extras' checks),
and the card x job grid with LongMedia and stock side by side (`compare`, what docs/lab/2026-12-03-comfyui-cards.md shows)."""

from __future__ import annotations

from longmedia.units import GIB

from .checks import extras_table


def _g(n) -> str:
    return "-" if n is None else f"{n / GIB:.2f}"


def tables(rows: list[dict]) -> str:
    """The main table (rows of the card x job grid) and, when there are any, the extras table."""
    main = [r for r in rows if not r.get("extra")]
    extra = [r for r in rows if r.get("extra")]
    return table(main) + ("\n\nextras\n" + extras_table(extra) if extra else "")


def table(rows: list[dict]) -> str:
    head = ("| card | job | weights | blocks | sampler | result | s/step (device) | first step s | process peak GiB | "
            "torch peak GiB | torch reserved peak GiB | mode / attention | torch, weights excluded: predicted / measured GiB | weights moved/step GiB "
            "(measured / planned) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        mode = f"{r.get('memory_mode', '-')} / {r.get('attention_backend', '-')}" if not r["sampler"].startswith("stock") else "stock"
        if r.get("measured_block_bytes"):  # streamed: the torch peak inside a block
            block = f"{_g(r['predicted_block_bytes'])} / {_g(r['measured_block_bytes'])} (block)"
        elif r.get("measured_step_bytes"):  # normal mode: no per-block hook, the torch peak of the model call
            block = f"{_g(r['predicted_step_bytes'])} / {_g(r['measured_step_bytes'])} (call)"
        else:
            block = "-"
        cpu = " (cpu)" if r.get("step_clock", "cpu") == "cpu" else ""  # rows before the device clock, dry runs
        sps = "-" if r.get("s_per_step") is None else f"{r['s_per_step']:.2f}{cpu}"
        first = "-" if r.get("first_step_s") is None else f"{r['first_step_s']:.2f}{cpu}"
        lines.append(f"| {r['card_gib']:g} | {r['width']}x{r['height']} {r['seconds']:g} s ({r.get('frames')} fr) | "
                     f"{r['format']} | {r['blocks']} | {r['label']}{_position(r)} | {r['result']} | {sps} | {first} | "
                     f"{_g(r.get('process_peak_bytes'))} | {_g(r.get('torch_peak_bytes'))} | "
                     f"{_g(r.get('torch_reserved_peak_bytes'))} | {mode} | {block} | "
                     f"{_g(r.get('moved_per_step_bytes'))} / {_g(r.get('planned_streamed_bytes'))} |")
    return "\n".join(lines)


REFUSAL_NAMES = ("LongMedia input error", "LongMediaInputError")   # ComfyUI's title for it; rows before issue 47


def _cell(r: dict | None) -> tuple[str, ...]:
    if r is None:
        return ("not run", "-", "-", "-")
    result = r.get("result", "-")
    if result.startswith("error") and "VRAM grow failed" in (r.get("error") or ""):
        result = "OOM (aimdo cast buffer)"
    elif result.startswith("error") and any(name in (r.get("error") or "") for name in REFUSAL_NAMES):
        result = "refused before any GPU work"
    sps = "-" if r.get("s_per_step") is None else f"{r['s_per_step']:.2f}"
    return (result, sps, _g(r.get("process_peak_bytes")), _g(r.get("torch_reserved_peak_bytes")))


def compare(rows: list[dict]) -> str:
    """One line per card x weights x job: LongMedia auto's mode, result, s/step, process peak, torch peak and
    reserved peak, predicted / measured torch bytes, weights moved per step (measured: the model's bytes less what
    comfy-aimdo kept resident after the run; planned: the plan's streamed bytes); then stock's result, s/step,
    process and reserved peaks and weights moved;
    a refused LongMedia cell's advised rerun (`longmedia_advised`) is named in the mode column."""
    head = ("| card GiB | weights | job | LongMedia auto: mode | result | s/step | process peak GiB | torch peak GiB | "
            "torch reserved GiB | torch predicted / measured GiB | weights moved/step GiB (measured / planned) | "
            "stock: result | s/step | process peak GiB | torch reserved GiB | weights moved/step GiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    by = {(r["card_gib"], r["format"], r["seconds"], r["sampler"]): r for r in rows if not r.get("extra")}
    cells = sorted({k[:3] for k in by}, key=lambda k: (k[0], ["int8", "bf16"].index(k[1]) if k[1] in ("int8", "bf16")
                                                        else 2, k[2]))
    for card, fmt, seconds in cells:
        lm, st = by.get((card, fmt, seconds, "longmedia")), by.get((card, fmt, seconds, "stock"))
        advised = by.get((card, fmt, seconds, "longmedia_advised"))
        if lm is None and st is None:
            continue
        mode = (lm or {}).get("memory_mode") or "-"
        if advised is not None:
            mode = (f"as advised, {advised['label'].split(': ', 1)[-1]}: {advised.get('result')} at "
                    f"{_g(advised.get('process_peak_bytes'))} GiB process peak")
        if (lm or {}).get("measured_block_bytes"):
            torch_pm = f"{_g(lm['predicted_block_bytes'])} / {_g(lm['measured_block_bytes'])} (block)"
        elif (lm or {}).get("measured_step_bytes"):
            torch_pm = f"{_g(lm['predicted_step_bytes'])} / {_g(lm['measured_step_bytes'])} (call)"
        else:
            torch_pm = "-"
        frames = (lm or st).get("frames")
        a, b = _cell(lm), _cell(st)
        moved = f"{_g((lm or {}).get('moved_per_step_bytes'))} / {_g((lm or {}).get('planned_streamed_bytes'))}"
        lines.append(f"| {card:g} | {fmt} | {seconds:g} s ({frames} fr) | {mode} | {a[0]} | {a[1]} | {a[2]} | "
                     f"{_g((lm or {}).get('torch_peak_bytes'))} | {a[3]} | {torch_pm} | {moved} | {b[0]} | {b[1]} | "
                     f"{b[2]} | {b[3]} | {_g((st or {}).get('moved_per_step_bytes'))} |")
    return "\n".join(lines)


def _position(r: dict) -> str:
    """The row's place among its card process's prompts, where recorded (ComfyUI's first prompt in a process differs)."""
    return f" (#{r['process_position']})" if r.get("process_position") else ""
