"""bench.first_row_gap: the seconds before a bench row's first model call, and whether its speed timings repeat."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench import first_row_gap as frg

REPO = Path(__file__).resolve().parents[2]


def _row(label, first, report_first, warmup, timings, **kw):
    reason = f"attention: exact backends ordered by speed measured on GPU (timed at head_dim 128): {timings}"
    return {"label": label, "card_gib": 16, "result": "ok", "first_step_s": first, "report_first_step_s": report_first,
            "warmup_s": warmup, "plan_json": json.dumps({"reasons": ["other", reason]}), **kw}


def test_the_gap_is_the_bench_first_step_less_the_report_and_the_warm_up():
    rng = random.Random(21)
    first, report, warm = rng.uniform(40, 60), rng.uniform(20, 35), rng.uniform(1, 3)
    got = frg.gaps([_row("a", first, report, warm, "x 1 ms, y 2 ms", probe_s=4.5),
                    _row("b", 20.0, 15.0, 0.0, "x 1 ms, y 2 ms"),
                    _row("c", 20.0, 15.0, 0.0, "x 1.1 ms, y 2 ms"),
                    {"label": "stock", "result": "ok", "first_step_s": 55.0},          # one clock only: left out
                    _row("d", 9.0, 8.0, 0.0, "x 1 ms", result="OOM")])               # not completed: left out
    assert [g["label"] for g in got] == ["a", "b", "c"]
    assert abs(got[0]["gap_s"] - (first - report - warm)) < 1e-9 and got[0]["probe_s"] == 4.5
    assert got[0]["warmup_s"] == warm and got[0]["over_steady_s"] is None and got[1]["warmup_s"] == 0.0
    assert [g["timings"] for g in got] == ["first in this file", "same as an earlier row's (disk cache)",
                                         "first in this file"]


def test_only_the_first_longmedia_row_of_each_h100_run_waited_before_its_first_model_call():
    """The evidence in docs/lab/2026-12-07-performance-record.md ("Where the first row's extra seconds go"): in each run with fresh speed
    timings its first row waited over 10 s; every row whose timings repeat an earlier row's waited under 2 s."""
    data = REPO / "docs/lab/data"
    for name in ("2026-12-05-h100-sol-16.jsonl", "2026-12-05-h100-flash4-cards.jsonl",
                 "2026-12-06-h100-scheduled-sol-cards.jsonl", "2026-12-06-h100-unconstrained-cards.jsonl",
                 "2026-12-06-h100-scheduled-sol-unconstrained-cards.jsonl"):
        got = frg.gaps([json.loads(line) for line in (data / name).read_text().splitlines()])
        assert got[0]["timings"] == "first in this file" and got[0]["gap_s"] > 10, (name, got[0])
        assert all(g["timings"].endswith("(disk cache)") and g["gap_s"] < 2 for g in got[1:]), (name, got[1:])


def test_the_flash4_warm_up_rows_show_step_one_at_the_steady_step_with_the_speed_timings_read_from_disk():
    """docs/lab/data/2026-12-07-h100-flash4-warmup-cards.jsonl: the row whose speed timings came from disk compiled
    flash-attn-4 in the warm-up, and its step 1 ran within 0.5 s of its steady step (before: 4.2-4.6 s over)."""
    rows = (REPO / "docs/lab/data/2026-12-07-h100-flash4-warmup-cards.jsonl").read_text().splitlines()
    (got,) = frg.gaps([json.loads(line) for line in rows])
    assert got["probe_s"] == 0 and got["warmup_s"] > 1 and 0 <= got["over_steady_s"] < 0.5, got
    line = frg.table(REPO / "docs/lab/data/2026-12-07-h100-flash4-warmup-cards.jsonl")[1]
    assert "warm-up 6.29 s; step 1 +0.39 s over the steady step" in line, line
