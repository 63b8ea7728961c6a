"""Attention kernels: exact query-streaming and Sol (Triton), their fp32 torch references, int8 K/V helpers,
and the Windows Triton toolchain fix.

Import the Triton modules explicitly (`longmedia.kernels.qstream_attention`, `.sol_attention`); this package
itself imports nothing, so the references work where Triton is missing.
"""
