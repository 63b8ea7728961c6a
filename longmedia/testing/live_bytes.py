"""Count live activation bytes on CPU: a TorchDispatchMode that follows tensor storages.

Every storage an op creates is recorded with its size; a storage counts as live until its last
tensor is gone (a weak reference to the storage expires). The peak is sampled after every op, so
a temporary freed by `del` is counted until the next op, as an allocator would see it. Buffers made
inside a fused C++ kernel without going through the dispatcher are not seen; storages that
existed before the mode started (inputs, weights) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass
class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as lb: ...` then `lb.peak_bytes`."""

    peak_bytes: int = 0
    live: dict = field(default_factory=dict)  # storage key -> (weakref, nbytes)
    outside: dict = field(default_factory=dict)  # storages seen as inputs that the mode did not create


    def __post_init__(self):
        super().__init__()

    def __enter__(self):
        self.outside = {}
        return super().__enter__()

    def _sweep(self) -> int:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            del self.live[key]
        return sum(n for _, n in self.live.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        current = self._sweep()
        for t in tree_leaves((args, kwargs or {})):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in self.live and (key not in self.outside or self.outside[key].expired()):
                    self.outside[key] = StorageWeakRef(storage)
        out = func(*args, **(kwargs or {}))
        current = self._sweep()
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self.live or (key in self.outside and not self.outside[key].expired()):
                continue
            self.live[key] = (StorageWeakRef(storage), storage.nbytes())
            current += storage.nbytes()
        self.peak_bytes = max(self.peak_bytes, current)
        return out
