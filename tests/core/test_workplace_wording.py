"""The repository describes a GPU machine in general terms (issue 47): tools/gpu and docs/lab say "a GPU machine
without network" and how to copy files to it, never the wording of the service our own runs borrowed machines from
(a lent machine, device calls, what one call carries, idle releases, polling a call's output folder)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKPLACE = re.compile(r"\blent\b|\blending\b|device[- ]calls?\b|(?:of|session's|the) device time\b(?! on)|\bcarr(?:y|ies|ied)\s*\[|"
                       r"\b\d+ MiB (?:a|one) (?:device )?call|a call (?:may )?carr|idle release|stays? lent|"
                       r"warm machine|run\(command=|\bcarry=|\bfiles_at\b|budget_left|\bcall \d\b|\bcalls? on (?:one|a) warm", re.I)


def texts():
    for folder in ("tools/gpu", "docs/lab"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix not in (".jsonl", ".json", ".whl", ".xz"):   # measured rows stay as recorded
                yield path


def test_tools_gpu_and_docs_lab_use_no_workplace_wording():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for path in texts()
             for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if WORKPLACE.search(line)]
    assert not found, "\n".join(found)


def test_tools_gpu_readme_says_how_to_copy_files_to_a_machine_without_network():
    text = " ".join((ROOT / "tools/gpu/README.md").read_text(encoding="utf-8").split())
    assert "GPU machine without network" in text and "copy" in text
