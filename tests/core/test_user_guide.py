"""docs/USER_GUIDE.md is a user page (issue 47): its top-level sections are the tasks of its "Find your task" index,
in that order, and it carries none of the lab notebook's provenance (dates, which machine measured what, run
phrases), which lives in docs/lab/; every figure names its command or links to the page that states it with one."""

from __future__ import annotations

import re

from test_performance_page import ROOT, lab_wording

GUIDE = (ROOT / "docs" / "USER_GUIDE.md").read_text(encoding="utf-8")
TASKS = ("Your first video", "A long clip", "Directing and retakes", "Speed options", "A small card or little RAM",
         "Reading the plan panel", "When something fails")


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _sections(level: str) -> list[str]:
    return re.split(rf"\n{level} ", GUIDE)[1:]


def test_the_top_level_sections_are_the_index_s_tasks_in_order():
    index = GUIDE.split("Find your task:", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"^- \*\*\[([^\]]+)\]\(#([^)]+)\)\*\*", index, re.M)
    headings = re.findall(r"^## (.+)$", GUIDE, re.M)
    assert [title for title, _ in links] == list(TASKS), links
    assert headings == list(TASKS), headings
    assert [anchor for _, anchor in links] == [_anchor(t) for t in TASKS], links


def test_no_date_machine_ordinal_or_lab_run_phrase():
    assert not lab_wording(GUIDE)
    # which machine measured a figure is the lab's record (the figure links to it), not the user's instruction
    assert not re.findall(r"\bon (?:an?|the|two) (?:NVIDIA )?H[12]00s?\b|\bin our (?:GPU )?(?:runs|tests)\b|"
                          r"\btested on\b|\bfourth session\b", GUIDE, re.I)


def test_every_section_with_a_figure_names_its_command_or_links_it():
    """A subsection that states a measured or planned decimal figure carries a command or a link to where the figure
    stands with its command (PERFORMANCE.md, a lab record)."""
    for section in _sections("###") + [s.split("\n### ")[0] for s in _sections("##")]:
        prose = re.sub(r"`[^`\n]*`", "", section)        # a value in code (`10.5s: ...`, `--seconds 14.4`) is no figure
        if re.search(r"\b\d+\.\d+ ?(?:s|x|GiB|MiB|ms|min)\b", prose):
            assert re.search(r"python -m (?:bench\.|longmedia plan)|\]\((?:PERFORMANCE\.md|lab/)", section), \
                section[:80]


def test_random_weight_measurements_are_not_quality_figures():
    text = " ".join(GUIDE.split())
    assert "random weights" in text and "not a measure of picture quality" in text
