"""Sequence parallelism on ComfyUI: the device list, rank 0's hand-over, the sharded block, the ranks (spawned or started by hand) and their bootstrap."""
