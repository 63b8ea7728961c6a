"""Issue 48: the Sampler's segmented run, Hi-Res and the Refiner share one pass loop (`comfy/passes/pass_loop.py`),
and no second copy of it remains in `comfy/passes/`. Read from the sources: no ComfyUI needed.
(`tests/comfyui/test_segmented_stages.py` checks the same at run time, with a spy on the loop.)"""

from __future__ import annotations

import ast
from pathlib import Path

import longmedia

PASSES = Path(longmedia.__file__).resolve().parent / "comfy" / "passes"
LOOP = "pass_loop.run_passes"
# what only the loop does, once per pass or once per run: the Cancel check, the job latents it assembles into
LOOP_STEPS = ("throw_exception_if_processing_interrupted", "place", "empty_result", "resumed")


def _called(node: ast.AST) -> set[str]:
    """The names a function calls or hands on, anywhere inside it (`a.b` counts as `b`: `job_latent(seams.place)`
    calls `place` too)."""
    return ({n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)})


def _functions(folder: Path = PASSES) -> dict[str, set[str]]:
    """'module.function' -> the names it calls, for every top-level function of the room."""
    out = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{path.stem}.{node.name}"] = _called(node)
    return out


def _reaches(functions: dict[str, set[str]], start: str, target: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name == target:
            return True
        if name in seen or name not in functions:
            continue
        seen.add(name)
        todo += [f for f in functions if f.split(".")[1] in functions[name]]
    return False


def test_the_sampler_hi_res_and_the_refiner_reach_the_one_pass_loop():
    functions = _functions()
    assert LOOP in functions
    for runner in ("segmented.run_job", "segmented.run_segmented", "stages.run_hires", "stages.run_refiner",
                   "segmented_stages.run_stage_segmented"):
        assert _reaches(functions, runner, LOOP), f"{runner} does not reach {LOOP}"


def test_no_second_copy_of_the_loop_remains():
    functions = _functions()
    for step in LOOP_STEPS:
        callers = sorted(f for f, called in functions.items() if step in called)
        assert callers == [LOOP], f"{step} is called by {callers}, not by the one loop alone"


def test_the_finders_see_a_second_loop(tmp_path):
    """A copy of the loop's steps in another module, and a runner that stops calling the loop, are both found."""
    (tmp_path / "pass_loop.py").write_text("def run_passes():\n    seams.place(1)\n", encoding="utf-8")
    (tmp_path / "copy.py").write_text("def run_stage():\n    for s in x:\n        seams.place(s)\n\n"
                                      "def run_job():\n    return run_passes()\n", encoding="utf-8")
    functions = _functions(tmp_path)
    assert _reaches(functions, "copy.run_job", LOOP) and not _reaches(functions, "copy.run_stage", LOOP)
    assert sorted(f for f, called in functions.items() if "place" in called) == ["copy.run_stage", LOOP]
