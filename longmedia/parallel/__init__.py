"""Ulysses sequence parallelism over torch.distributed: N ranks each hold 1/N of the packed rows, and two
all-to-alls per block give each rank H/N whole heads over the full sequence for attention.

`partition` (which rows and heads a rank holds; torch-free), `shards` (a rank's rows of the packed tensors),
`group` (a torch.distributed process group, gloo or NCCL, the collectives this floor uses, the link measured),
`ulysses` (the exchanging attention, one block per rank through the exact streamed block, the one gather at
the end), `cost` (a rank's link bytes and exchange buffers: torch-free, the planner's).
"""
