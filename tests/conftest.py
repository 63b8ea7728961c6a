"""Test-suite setup shared by every layer."""

import os

import torch

# No GPU: Triton kernels run under the interpreter. Set before any test module imports triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
