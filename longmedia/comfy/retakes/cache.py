"""The LongMedia Retakes node's cache: a `RetakeCache` over the durable store in ComfyUI's temp folder.

The node's output is this object; ComfyUI's output cache keeps it while the node's inputs stay the same and the
node stays in the graph, and may drop it at any time (ComfyUI 0.33's RAM-pressure cache drops every output the
running prompt does not use, so any other prompt does). The segments outlive it: each is in the store under its
chain key (`segments/retake_store.py`, bounded by disk_mb), and the next cache, made when the node runs again,
serves them. Changing a bound makes a new cache over the same store. ComfyUI's free-memory request removes the
store (`free_request.py`); ComfyUI empties its temp folder at start-up.
"""

from __future__ import annotations

from ...segments.retakes import RetakeCache
from ...units import MIB


def new_retake_cache(ram_mb: int, disk_mb: int) -> RetakeCache:
    import folder_paths

    return RetakeCache(int(ram_mb) * MIB, int(disk_mb) * MIB, folder_paths.get_temp_directory())
