"""README's and docs/PERFORMANCE.md's "What a clip costs": every cell is the `whole clip` line of the command printed
beside the table for its path (CARD and CLIP from its row and column; the EasyCache rows' too, the plan's best case),
and the shipped 60 s workflow's three figures are those of the commands under them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from longmedia.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"README.md": ("## What a clip costs", "## Your first video"),
         "docs/PERFORMANCE.md": ("### What a clip costs", "## Faster, approximate")}


def section(page: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    start, end = PAGES[page]
    return text[text.index(start):text.index(end)]


def whole_clip_minutes(capsys, command: str) -> int:
    words = command.split()
    assert words[:4] == ["python", "-m", "longmedia", "plan"], command
    assert main(words[3:]) == 0, command
    m = re.search(r"^whole clip: about (\d+) min", capsys.readouterr().out, re.M)
    assert m, command
    return int(m.group(1))


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_cell_is_what_its_command_prints(capsys, page):
    text = section(page)
    commands = dict(re.findall(r"^- (.+?): `(python -m longmedia plan [^`]+)`$", text, re.M))
    clips = [int(c) for c in re.findall(r"^\| card \| path \| (\d+) s \| (\d+) s \| (\d+) s \|$", text, re.M)[0]]
    rows = re.findall(r"^\| (\d+) GB \(`--vram-gb \d+`\) \| (.+?) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M)
    assert clips == [10, 30, 60] and len(commands) == 4
    assert sorted({int(r[0]) for r in rows}) == [8, 12, 16, 24] and len(rows) == 16
    for card, path, *cells in rows:
        for clip, cell in zip(clips, cells):
            command = commands[path].replace("CARD", card).replace("CLIP", str(clip))
            assert whole_clip_minutes(capsys, command) == int(cell), (page, card, path, clip)
    # EasyCache's rows are its best case (step_cache.py's bound), marked so, and plan the turbo command with --easycache
    cached = [r for r in rows if "EasyCache" in r[1]]
    assert len(cached) == 4 and all(r[1] == "turbo + EasyCache (at best)" for r in cached)
    assert commands["turbo + EasyCache (at best)"] == commands["turbo: 8 steps, cfg 1"] + " --easycache"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_shipped_60_s_workflow_figures_and_the_turbo_goal(capsys, page):
    text = section(page)
    para = text[text.index("The shipped 60 s workflow"):]
    figures = [int(f) for f in re.findall(r"about (\d+) min", para)]
    base = re.search(r"`(python -m longmedia plan --seconds 60 [^`]+)`", para).group(1)
    turbo = re.search(r"then `(--steps 8 [^`]+)`", para).group(1)
    sol = f"{turbo} --attention-mode scheduled_sol"
    cut = base.split(" --steps ")[0]
    got = [whole_clip_minutes(capsys, c) for c in (base, f"{cut} {turbo}", f"{cut} {sol}")]
    assert figures == got
    assert got[2] <= 0.35 * got[0]       # the turbo goal: a 60 s clip with scheduled_sol within 0.35x of 20 steps
    ratios = [float(r) for r in re.findall(r"\((\d\.\d+)x\)", para)]
    assert ratios == [round(got[1] / got[0], 2), round(got[2] / got[0], 2)]


def test_the_readme_answers_how_long_a_clip_takes_before_the_first_video():
    """Issue 46: a user reads what a clip costs on each card class before "Your first video"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.index("## What your machine needs") < text.index("## What a clip costs") < text.index(
        "## Your first video")
    cards = re.findall(r"^\| (\d+) GB \(`--vram-gb \d+`\) \| ", section("README.md"), re.M)
    assert sorted(set(cards), key=int) == ["8", "12", "16", "24"]


def test_the_ram_sentence_is_what_the_turbo_command_prints_with_ram_gb(capsys):
    """README: the 60 s turbo clip on a 16 GB card with 64, 32 and 16 GB of RAM (the disk reads the plan adds)."""
    text = section("README.md")
    m = re.search(r"about (\d+) min with 64 GB, (\d+) with 32 GB, (\d+) with 16 GB", text)
    assert m, "the README's RAM sentence"
    turbo = dict(re.findall(r"^- (.+?): `(python -m longmedia plan [^`]+)`$", text, re.M))["turbo: 8 steps, cfg 1"]
    command = turbo.replace("CARD", "16").replace("CLIP", "60")
    got = [whole_clip_minutes(capsys, f"{command} --ram-gb {ram}") for ram in (64, 32, 16)]
    assert got == [int(g) for g in m.groups()]
