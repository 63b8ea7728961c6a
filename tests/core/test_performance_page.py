"""docs/PERFORMANCE.md is a user page (issue 30): a table by card class, figures with their commands, and none of
the lab notebook's run bookkeeping (commit hashes, call times, work-period labels), which lives in docs/lab/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")


def test_no_commit_hash_call_time_or_work_period_label():
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", PAGE) if re.search(r"\d", w) and re.search(r"[a-f]", w)]
    assert not hashes, hashes
    assert not re.findall(r"\b\d{1,2}:\d{2}(?::\d{2})?\b", PAGE)            # 14:06 UTC, 16:33
    assert not re.findall(r"\b(?:session|work period|device call)\b", PAGE, re.I)
    assert not re.findall(r"\b(?:first|second|third|fourth|fifth|previous|this|next) (?:session|call|run)\b", PAGE, re.I)


def test_the_card_table_has_every_card_class_and_the_unconstrained_row():
    rows = [line for line in PAGE.splitlines() if line.startswith("| ")]
    for card in ("8 GiB", "12 GiB", "16 GiB", "24 GiB", "unconstrained"):
        assert any(line.startswith(f"| {card}") for line in rows), card


def test_every_figure_section_names_its_command():
    """Each section with a measured or planned figure carries a `python -m ...` command for it."""
    for section in re.split(r"\n## ", PAGE)[1:]:
        if re.search(r"\d+\.\d+", section):
            assert "python -m bench." in section or "python -m longmedia plan" in section, section[:80]


def test_the_lab_records_it_points_to_exist():
    for link in re.findall(r"\]\((lab/[^)]+)\)", PAGE):
        assert (ROOT / "docs" / link).is_file(), link
