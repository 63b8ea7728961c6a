"""Test-suite setup shared by every layer."""

import os

import pytest
import torch

# No GPU: Triton kernels run under the interpreter. Set before any test module imports triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def comfy_execution_context():
    """What ComfyUI's execution.py wraps every node in: torch.inference_mode() (tensors made inside are
    inference tensors: no version counter, no autograd). Module scope, so module fixtures that sample run
    inside it too; use through `pytestmark = pytest.mark.usefixtures("comfy_execution_context")`."""
    with torch.inference_mode():
        yield
