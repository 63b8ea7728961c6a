"""Ulysses sequence parallelism over torch.distributed: N ranks each hold 1/N of the packed rows, and two
all-to-alls per block give each rank H/N whole heads over the full sequence for attention.

`shards` (which rows and heads a rank holds), `group` (a torch.distributed process group, gloo or NCCL, and the
collectives this floor uses), `ulysses` (the exchanging attention, one block per rank through the exact
streamed block, the one gather at the end), `cost` (the planner's model of a rank's time and link bytes).
"""
