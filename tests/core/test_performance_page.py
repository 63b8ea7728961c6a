"""docs/PERFORMANCE.md is a user page (issue 30): a table by card class, figures with their commands, and none of
the lab notebook's run bookkeeping (commit hashes, call times, work-period labels), which lives in docs/lab/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


# --- issue 47: a page for users, whose numbers agree with the other user pages ------------------------------------

USER_PAGES = ("README.md", "docs/USER_GUIDE.md", *sorted(f"web/docs/{p.name}" for p in (ROOT / "web/docs").glob("*.md")))


def test_the_page_is_short_and_answers_card_ram_and_clip_first():
    assert len(PAGE.splitlines()) <= 155
    order = [PAGE.index(h) for h in ("## Your card, your RAM, your clip", "## Faster, approximate",
                                     "## Long jobs and Decode & Save", "## How we measure")]
    assert order == sorted(order) and PAGE.index("## Your card, your RAM, your clip") == PAGE.index("\n## ") + 1


LAB_WORDING = (
    ("a date", r"\b20\d\d-\d\d-\d\d\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}\b", 0),
    ("a machine ordinal", r"\b(?:a|the) (?:second|third|fourth|fifth|another|fresh) (?:H100|H200|machine)", re.I),
    ("a checksum", r"checksum|-?\d{5,}\.\d\d\b", re.I),
    ("a lab-run phrase", r"\brerun\b|\bpoll\b|overwritten|\bdriver\b|in (?:all|one) call|on this machine|earlier runs?\b|"
                         r"run order|\bwas lent\b|\bsession\b|printed table", re.I),
)


def lab_wording(text: str) -> list[tuple[str, str]]:
    """(what, the words) for each date, machine ordinal ("a third H100"), checksum or lab-run phrase in a user page;
    links into docs/lab/, whose file names start with a date, are not dates of the page."""
    text = text.replace("lab/2026-", "lab/")
    return [(what, m.group(0)) for what, pattern, flags in LAB_WORDING for m in re.finditer(pattern, text, flags)]


def test_no_date_machine_ordinal_checksum_or_lab_run_phrase():
    assert not lab_wording(PAGE)


# (what, {page: regex with one group}): each figure that more than one user page states, stated the same way
SHARED_FIGURES = {
    "the full INT8 model's step under a 16 GiB limit (H200)": {
        "docs/PERFORMANCE.md": r"\| 16 GiB \| low_vram \| \*\*([\d.]+)\*\*",
        "README.md": r"A step takes ([\d.]+) s there",
        "docs/USER_GUIDE.md": r"([\d.]+) s for the 50-block INT8 model at 14\.4 s"},
    "its process peak under 16 GiB": {
        "docs/PERFORMANCE.md": r"\| 16 GiB \| low_vram \| \*\*[\d.]+\*\* \| out of memory \| ([\d.]+ GiB)",
        "README.md": r"runs in low_vram at ([\d.]+ GiB) of process memory"},
    "Decode & Save's RAM for one chunk at 1344x768": {
        "docs/PERFORMANCE.md": r"RAM holds one chunk \(about ([\d.]+ [MG]iB)",
        "docs/USER_GUIDE.md": r"RAM holds one chunk \(about ([\d.]+ [MG]iB)",
        "web/docs/LongMediaDecodeSave.md": r"RAM holds one chunk \(about ([\d.]+ [MG]iB)"},
    "stock VAEDecode's whole 60 s video at 1344x768": {
        "docs/PERFORMANCE.md": r"\(([\d.]+ GiB) for\s+60 s at 1344x768\)",
        "docs/USER_GUIDE.md": r"([\d.]+ GiB) for 60 s at 1344x768",
        "web/docs/LongMediaDecodeSave.md": r"([\d.]+ GiB) for 60 s at 1344x768"},
    "a step with 32 GiB of RAM over all RAM (H100)": {
        "docs/PERFORMANCE.md": r"\| 32 GiB \(a run of its own[^|]*\| 36\.39 \| ([\d.]+x) \|",
        "README.md": r"step took ([\d.]+x) its all-RAM time with 32 GiB",
        "docs/USER_GUIDE.md": r"step took ([\d.]+x) its all-RAM time with 32 GiB"},
    "the 60 s job's 10 s passes with 32 GiB of RAM over all RAM (H100)": {
        "docs/PERFORMANCE.md": r"22\.6 s with all\s+RAM on another H100, ([\d.]+x)",
        "README.md": r"10 s passes hide less \(([\d.]+x) with 32 GiB",
        "docs/USER_GUIDE.md": r"10 s passes took ([\d.]+x) with 32 GiB"},
}


@pytest.mark.parametrize("what", sorted(SHARED_FIGURES))
def test_a_figure_on_several_user_pages_is_the_same_on_each(what):
    found = {}
    for page, pattern in SHARED_FIGURES[what].items():
        m = re.search(pattern, " ".join((ROOT / page).read_text(encoding="utf-8").split()))
        assert m, (what, page)
        found[page] = m.group(1)
    assert len(set(found.values())) == 1, (what, found)


def test_the_user_pages_quote_no_step_time_the_page_does_not_have():
    """Any 'N s per step' / 'N s/step' a user page states for the full model is a figure of this page."""
    for page in USER_PAGES:
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        for figure in re.findall(r"\b(\d+\.\d) s (?:per step|a step)\b|A step takes (\d+\.\d) s", text):
            value = next(f for f in figure if f)
            assert f"**{value}**" in PAGE or f" {value} s" in PAGE or f"{value} " in PAGE, (page, value)


@pytest.mark.parametrize("card, estimate", [(8, 616), (12, 320), (16, 192), (24, 113)])
def test_the_per_step_estimates_are_what_the_plan_prints(capsys, card, estimate):
    from longmedia.cli import main

    row = next(line for line in PAGE.splitlines() if line.startswith(f"| {card} GB | "))
    assert f"about {estimate} |" in row and f"--vram-gb {card} --ram-gb 64 --seconds 10" in row, row
    assert main(["plan", "--vram-gb", str(card), "--ram-gb", "64", "--seconds", "10"]) == 0
    got = float(re.search(r"DiT main pass: .*?about ([\d.]+) s per step", capsys.readouterr().out).group(1))
    assert round(got) == estimate, got
