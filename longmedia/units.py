"""Byte units, defined once: every GiB and MiB in the package and the benches is these."""

GIB = 1024 ** 3
MIB = 1024 ** 2
