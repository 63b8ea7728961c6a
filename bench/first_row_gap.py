"""What lies before the first model call of each bench row: the bench's first step less LongMedia's own.

    python -m bench.first_row_gap ROWS.jsonl [ROWS.jsonl ...]
    python -m bench.first_row_gap --smoke          # two made-up rows on the CPU

bench.cards times step 1 from the sampler node's start (`first_step_s`); LongMedia's report times it from the
first model call (`report_first_step_s`) and names the kernel warm-up before it (`warmup_s`). The gap between them
is setup before the first model call. Per row, in run order: the gap, the attention speed timing's seconds when the
row has them (`probe_s`, reported since 2026-12-06), the kernel warm-up's seconds, how far LongMedia's step 1 ran over
its steady step (a compile left to step 1 shows here), and whether the speed timing's results in the plan's reasons are the
first in the file (timed in that row, unless an earlier run on the machine had timed them) or repeat an earlier row's
(read from the disk cache).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

SPEED_TIMINGS = re.compile(r"exact backends ordered by speed measured on [^:]*: ([^;]*)")


def speed_timings(row: dict) -> str | None:
    """The speed timing's results as the row's plan states them ("flash4 24.8 ms, sdpa_cudnn 25.1 ms, ..."), or None."""
    plan = json.loads(row.get("plan_json") or "{}")
    for reason in plan.get("reasons", ()):
        found = SPEED_TIMINGS.search(reason)
        if found:
            return found.group(1)
    return None


def gaps(rows: list[dict]) -> list[dict]:
    """One entry per completed row with both clocks, in run order: label, card, gap (s), probe_s, warm-up (s), step 1
    over the steady step by LongMedia's report (s, None without a steady step), speed timings first in these rows or
    repeated."""
    out, seen = [], set()
    for row in rows:
        if row.get("result") != "ok" or not row.get("first_step_s") or not row.get("report_first_step_s"):
            continue
        timings, steady = speed_timings(row), row.get("report_steady_step_s")
        out.append({"label": row.get("label"), "card_gib": row.get("card_gib"),
                    "gap_s": row["first_step_s"] - row["report_first_step_s"] - (row.get("warmup_s") or 0.0),
                    "probe_s": row.get("probe_s"), "warmup_s": row.get("warmup_s") or 0.0,
                    "over_steady_s": None if not steady else row["report_first_step_s"] - steady,
                    "timings": None if timings is None else ("same as an earlier row's (disk cache)" if timings in seen
                                                      else "first in this file")})
        if timings is not None:
            seen.add(timings)
    return out


def table(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [f"{path.name}:"]
    for g in gaps(rows):
        took = "" if g["probe_s"] is None else f", probe_s {g['probe_s']:.2f} s"
        over = "" if g["over_steady_s"] is None else f"; step 1 {g['over_steady_s']:+.2f} s over the steady step"
        lines.append(f"  {g['label']} @ {g['card_gib']} GiB: {g['gap_s']:.2f} s before the first model call "
                     f"(speed timings: {g['timings'] or 'none in the plan'}{took}); warm-up {g['warmup_s']:.2f} s"
                     f"{over}")
    return lines


def _smoke() -> int:
    reason = ("attention: exact backends ordered by speed measured on GPU sm90, torch x (timed at head_dim 128): "
              "a 1 ms, b 2 ms")
    rows = [{"label": "longmedia", "card_gib": 16, "result": "ok", "first_step_s": 50.0, "report_first_step_s": 36.0,
             "warmup_s": 0.0, "plan_json": json.dumps({"reasons": [reason]})},
            {"label": "longmedia_sol", "card_gib": 16, "result": "ok", "first_step_s": 17.0,
             "report_first_step_s": 14.0, "warmup_s": 2.2, "plan_json": json.dumps({"reasons": [reason]})}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        lines = table(path)
    print("\n".join(lines))
    ok = "14.00 s before" in lines[1] and "first in this file" in lines[1] and "disk cache" in lines[2]
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="*", type=Path, help="bench.cards rows (cards.jsonl)")
    p.add_argument("--smoke", action="store_true", help="two made-up rows on the CPU")
    a = p.parse_args(argv)
    if a.smoke:
        return _smoke()
    if not a.rows:
        p.error("give one or more rows files (or --smoke)")
    for path in a.rows:
        print("\n".join(table(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
