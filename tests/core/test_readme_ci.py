"""The README opens with what LongMedia is, then exactly two commands; `.ci/run` runs them and the real-ComfyUI layer."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _first_block(text: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "the README has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_says_what_longmedia_is_before_its_two_commands():
    text = (ROOT / "README.md").read_text()
    before = text[:text.index("```bash")]
    assert "ComfyUI custom node pack" in before and "MiniMax H3" in before
    commands = _first_block(text)
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install -e . && python -m longmedia plan")
    assert "python -m pytest -q tests" in commands[1]


def test_ci_runs_the_readme_commands_and_the_comfyui_layer_on_both_trees():
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    for command in _first_block((ROOT / "README.md").read_text()):
        assert command.split("#")[0].strip() in ci, command
    for tree in ('"$shared/comfyui/0.33.0"', 'make_upstream_tree.sh" "$shared/comfyui/0.33.0" "$work/comfyui-upstream"',
                 "bsa-chaining"):
        assert tree in ci, tree
    assert "REAL-COMFYUI LAYER SKIPPED" in ci


def test_the_readme_is_for_users_first():
    """The torch note comes before the commands that need it and names PyPI, with one other index only: PyTorch's
    CPU-only wheels, on its own line beside the note (issue 47); your first video follows the commands; developer
    material comes after; the architecture's own words (rooms, floors) stay in ARCHITECTURE."""
    text = (ROOT / "README.md").read_text()
    commands = text.index("```bash")
    note = text[:commands]
    assert "torch" in note and "PyPI" in note
    assert set(re.findall(r"https://download\.pytorch\.org\S*", text)) == {"https://download.pytorch.org/whl/cpu`"}
    assert text.index("download.pytorch.org") < commands
    assert commands < text.index("## Your first video") < text.index("## For developers")
    assert not re.search(r"\b(?:rooms?|floors?)\b", text, re.I)
    assert "lent" not in text and "carry" not in text
