"""The LongMedia Retakes node's cache: a `RetakeCache` that spills to ComfyUI's temp folder.

The node's output is this object; ComfyUI's output cache keeps it (the same object reaches the Sampler on every
queue) while the node's inputs stay the same and the node stays in the graph. Changing a bound makes a new, empty
cache; the old one is dropped with its spill folder when ComfyUI lets go of it.
"""

from __future__ import annotations

from ...segments.retakes import RetakeCache
from ...units import MIB


def new_retake_cache(ram_mb: int, disk_mb: int) -> RetakeCache:
    import folder_paths

    return RetakeCache(int(ram_mb) * MIB, int(disk_mb) * MIB, folder_paths.get_temp_directory())
