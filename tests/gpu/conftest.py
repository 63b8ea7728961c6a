"""The GPU layer: compiled kernels, the executor on ComfyUI's full-width DiTBlock, the Sampler under Dynamic VRAM.

Without CUDA every test here is skipped and the summary says so loudly. On a GPU machine without network run
`bash tools/gpu/run_tests.sh` (it sources tools/gpu/bootstrap.sh for ComfyUI, comfy-aimdo and
comfy-kitchen). Run this directory on its own: tests/kernels' conftest switches Triton to its
interpreter, which is exactly what this layer must not test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent

REASON = ("no CUDA device: GPU tests skipped (on a CUDA machine: "
          "LONGMEDIA_COMFYUI_ROOT=/path/to/ComfyUI python -m pytest -q tests/gpu)"
          if not torch.cuda.is_available() else
          "TRITON_INTERPRET is set (tests/kernels was collected in this session): run tests/gpu on its own"
          if os.environ.get("TRITON_INTERPRET") else None)
_SKIPPED = pytest.StashKey[list]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if REASON is not None:
                item.add_marker(pytest.mark.skip(reason=REASON))
                config.stash.setdefault(_SKIPPED, []).append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    skipped = config.stash.get(_SKIPPED, [])
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} GPU TESTS SKIPPED", yellow=True, bold=True)
        terminalreporter.write_line(REASON)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.fixture
def rel_err():
    return rel
