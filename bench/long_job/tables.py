"""The long-job bench's rows (OUT/long_job.jsonl, appended as they happen) and its table."""

from __future__ import annotations

import json
from pathlib import Path

from longmedia.units import GIB

ROWS_FILE = "long_job.jsonl"
PLAN_FILE = "long_job_plan.json"


def append_row(out: Path, row: dict) -> None:
    """One row, appended and flushed at once (a stage that dies keeps the rows before it)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ROWS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _gib(value) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _s(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _host_ram(row: dict) -> str:
    """The stage's host RAM: `all`, or the balloon's limit in GiB (rows from before the option: `-`)."""
    if "host_ram_gib" not in row:
        return "-"
    return "all" if row["host_ram_gib"] is None else f"{row['host_ram_gib']:g} GiB"


def table(rows: list[dict], plan: dict | None = None) -> str:
    """Per segment of each stage (its last run's rows): s/step (device), the pass's process peak (NVML), torch's
    peak, the plan's predicted peak, rows, mode, the seam at the join before it; then per stage: wall time, the
    stage's process peak, host RSS peak (all, anonymous, file-backed: the mapped checkpoint's pages) against the
    whole-job plan's RAM for that stage."""
    plan = plan or {}
    passes = {(r["stage"], r["segment"]): r for r in rows if r.get("kind") == "pass"}
    stages = [r for r in rows if r.get("kind") == "stage"]
    details = {(r["stage"], s["segment"]): s for r in stages for s in r.get("segments") or ()}
    seams = {r["stage"]: r["seams"] for r in stages if r.get("seams")}
    lines = ["stage | seg | s/step (device) | process peak GiB (NVML) | torch peak GiB (allocated / pool) | "
             "predicted GiB | rows | mode | seam before (video / audio, step across the join / median inside)",
             "---|---|---|---|---|---|---|---|---"]
    for stage, segment in sorted(passes, key=lambda k: (["sampler", "hires", "refiner", "decode"].index(k[0]), k[1])):
        p, d = passes[(stage, segment)], details.get((stage, segment), {})
        s = seams.get(stage)
        seam = "-"
        if s and 1 <= segment <= len(s["video"]):
            seam = f"{s['video'][segment - 1]:.2f} / {s['audio'][segment - 1]:.2f}"
        lines.append(f"{stage} | {segment} | {_s(p.get('s_per_step'))} | {_gib(p.get('process_peak_bytes'))} | "
                     f"{_gib(d.get('torch_peak_bytes'))} / {_gib((p.get('call_end_max') or {}).get('torch_reserved'))} | "
                     f"{_gib(d.get('predicted_peak_bytes'))} | "
                     f"{d.get('seq_len', '-')} | {d.get('memory_mode', '-')} | {seam}")
    lines += ["", "stage | passes | result | wall s | process peak GiB (NVML) | host RSS peak GiB (all / anon / file) "
                  "| plan RAM GiB | plan est. s | seams inside (video / audio max) | host RAM | MemAvailable min GiB "
                  "| pinned peak GiB | disk read / model call GiB", "---|---|---|---|---|---|---|---|---|---|---|---|---"]
    for r in stages:
        p = plan.get(r["stage"], {})
        s = r.get("seams") or {}
        inside = f"{s['inside_video_max']:.2f} / {s['inside_audio_max']:.2f}" if s else "-"
        lines.append(f"{r['stage']} | {r['passes'][0]}..{r['passes'][1] or 'end'} | {r['result']} | "
                     f"{_s(r.get('wall_s'))} | {_gib(r.get('process_peak_bytes'))} | "
                     f"{_gib(r.get('host_rss_peak_bytes'))} / {_gib(r.get('host_anon_peak_bytes'))} / "
                     f"{_gib(r.get('host_file_peak_bytes'))} | {_gib(p.get('ram_need_bytes'))} | "
                     f"{_s(p.get('estimated_s'))} | {inside} | {_host_ram(r)} | "
                     f"{_gib(r.get('mem_available_min_bytes'))} | {_gib(r.get('pinned_peak_bytes'))} | "
                     f"{_gib(r.get('disk_read_per_call_bytes'))}")
        if r.get("error"):
            lines.append(f"  error: {r['error'][:300]}")
    return "\n".join(lines)
