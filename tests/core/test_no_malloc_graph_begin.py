"""No code of the pack calls or looks up `malloc_graph_begin`: its arity differs between upstream lines
(`malloc_graph_begin(device)` in model_prefetch 03fb330a, `(self, device)` with model.py 2c64d4aa). The pack
only pauses the host's graph, through `pause_malloc_graph()` (longmedia/comfy/patching/block_patch.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = "malloc_graph_begin"
SOURCES = ("longmedia", "nodes", "tools", "bench", "__init__.py")


def _python_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = REPO / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def uses(source: str) -> list[str]:
    """Where `source` names malloc_graph_begin in code: a call, an attribute, a name, or a string used as a
    name (getattr/hasattr/import); docstrings and comments do not count."""
    found = []
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == FORBIDDEN:
            found.append(f"line {node.lineno}: .{FORBIDDEN}")
        elif isinstance(node, ast.Name) and node.id == FORBIDDEN:
            found.append(f"line {node.lineno}: {FORBIDDEN}")
        elif isinstance(node, ast.alias) and FORBIDDEN in node.name:
            found.append(f"import {node.name}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and node.value.strip() == FORBIDDEN):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def test_the_pack_never_calls_malloc_graph_begin():
    files = _python_files()
    assert len(files) > 50  # the walk found the pack
    offenders = {str(p.relative_to(REPO)): hits for p in files if (hits := uses(p.read_text(encoding="utf-8")))}
    assert offenders == {}, f"use pause_malloc_graph() only; {FORBIDDEN} found in {offenders}"


@pytest.mark.parametrize("code", [
    "import comfy.model_prefetch as p\np.malloc_graph_begin(device)",
    "fn = getattr(prefetch, 'malloc_graph_begin', None)",
    "from comfy.model_prefetch import malloc_graph_begin",
    "with prefetch.malloc_graph_begin(self, device):\n    pass",
])
def test_the_check_sees_every_form(code):
    assert uses(code), code


def test_docstrings_and_pause_are_allowed():
    assert uses('"""malloc_graph_begin(device) differs between lines."""\nprefetch.pause_malloc_graph()') == []
