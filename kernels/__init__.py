"""Attention kernels: exact query-streaming and Sol (Triton), their fp32 torch references, int8 K/V helpers.

Import the Triton modules explicitly (`longmedia.kernels.qstream_attention`, `.sol_attention`);
this package itself imports only torch so the references work where Triton is missing.
"""

from __future__ import annotations

import importlib.util


def triton_available() -> bool:
    """Whether `triton` can be imported here (the kernels need it; the references do not)."""
    return importlib.util.find_spec("triton") is not None
