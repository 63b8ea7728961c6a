"""No file in bench/, tests/ or tools/ edits `sys.path`: the repository root is importable through pytest's `pythonpath`
option (pyproject) and `python -m bench.<name>`; a ComfyUI checkout goes on the path in one named place each
(`bench.cards.comfy_process.child_env` for child processes, pytest's MonkeyPatch.syspath_prepend in process)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove)\s*\(|\[[^\]]*\]\s*=|\+?=[^=])")
FILES = sorted(p for folder in ("bench", "tests", "tools") for p in (REPO / folder).rglob("*.py"))


def test_the_pattern_catches_every_way_of_editing_the_path():
    caught = ["sys.path.insert(0, root)", "sys.path.append(x)", "sys.path[:0] = [a]", "sys.path = [a]",
              "sys.path += [a]", "sys.path.extend(xs)"]
    assert all(EDIT.search(line) for line in caught)
    assert not any(EDIT.search(line) for line in ("if root in sys.path:", "print(sys.path)", "sys.path == x"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_sys_path_edit(path):
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if EDIT.search(line)
             and path.name != Path(__file__).name]
    assert not found, found
