"""Digests of the values a segment depends on, for retake keys (`segments/retakes.py`).

A value is digested by what it holds: numbers, strings, containers, dataclasses and plain objects field by
field, tensors by their bytes (dtype and shape included), functions by their code, defaults and closure.
What cannot be read as a value (a torch module's weights, an object past `MAX_DEPTH`, a tensor over
`MAX_HASH_BYTES`) is digested by identity and *pinned*: the digest keeps a weak reference to it, and a cached
segment is served only while every pin is alive, so an id reused by another object never matches. An
object that has neither a value nor a weak reference makes the key `Uncacheable` (the run samples every
segment and says why). `special` lets the caller describe objects it knows better (ComfyUI's ModelPatcher:
`comfy/retakes/keys.py`); it returns a plain description, or None to fall back to the rules above.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import types
import uuid
import weakref
from collections.abc import Callable

import torch

from ..units import MIB

__all__ = ["Fingerprint", "ByIdentity", "Uncacheable", "MAX_DEPTH", "MAX_HASH_BYTES", "MAX_MODULE_VALUE_BYTES"]

MAX_DEPTH = 8                    # nesting read as values; deeper objects are known by identity
MAX_HASH_BYTES = 256 * MIB       # a larger tensor is known by identity (its bytes are not hashed each run)
MAX_MODULE_VALUE_BYTES = 16 * MIB   # a larger torch module (a model's weights) is known by identity


class Uncacheable(Exception):
    """A key part that has no value digest and cannot be pinned by a weak reference."""


@dataclasses.dataclass(frozen=True)
class ByIdentity:
    """Marks a value `special` wants known by identity (e.g. a model whose weights are never hashed)."""

    value: object


class Fingerprint:
    """One key's digest: `digest(value)` hashes values; `pins` are the weak references of what was known by
    identity (one Fingerprint per key, never module level)."""

    def __init__(self, special: Callable[[object], object | None] | None = None) -> None:
        self.special = special
        self.pins: list[weakref.ref] = []
        self._active: set[int] = set()

    def digest(self, value: object) -> str:
        h = hashlib.sha256()
        self._feed(h, value, 0)
        return h.hexdigest()

    # -- the rules ------------------------------------------------------------------------------------------
    def _pin(self, h, value: object) -> None:
        try:
            ref = weakref.ref(value)
        except TypeError as error:  # named: no weak reference, so an id alone could match another object later
            raise Uncacheable(f"{type(value).__qualname__} has no value digest and no weak reference") from error
        self.pins.append(ref)
        h.update(f"id:{type(value).__module__}.{type(value).__qualname__}:{id(value)};".encode())

    def _feed(self, h, value: object, depth: int) -> None:
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
            h.update(f"{type(value).__name__}:{value!r};".encode())
            return
        if isinstance(value, (enum.Enum, uuid.UUID, torch.dtype, torch.device)):
            h.update(f"{type(value).__name__}:{value};".encode())
            return
        if isinstance(value, ByIdentity):
            self._pin(h, value.value)
            return
        if isinstance(value, torch.Tensor):
            self._tensor(h, value)
            return
        if depth > MAX_DEPTH or id(value) in self._active or (isinstance(value, torch.nn.Module)
                                                               and _module_bytes(value) > MAX_MODULE_VALUE_BYTES):
            self._pin(h, value)
            return
        if self.special is not None:
            described = self.special(value)
            if described is not None:
                h.update(f"special:{type(value).__qualname__}(".encode())
                self._nested(h, described, depth)
                h.update(b")")
                return
        self._active.add(id(value))
        try:
            self._composite(h, value, depth)
        finally:
            self._active.discard(id(value))

    def _nested(self, h, value: object, depth: int) -> None:
        self._feed(h, value, depth + 1)

    def _composite(self, h, value: object, depth: int) -> None:
        if isinstance(value, (list, tuple)):
            h.update(f"{type(value).__name__}[{len(value)}](".encode())
            for item in value:
                self._nested(h, item, depth)
            h.update(b")")
        elif isinstance(value, dict):
            h.update(f"dict[{len(value)}](".encode())
            for key in sorted(value, key=repr):
                self._nested(h, key, depth)
                self._nested(h, value[key], depth)
            h.update(b")")
        elif isinstance(value, (set, frozenset)):
            parts = sorted(Fingerprint(self.special)._sub(item, self) for item in value)
            h.update(f"set({','.join(parts)});".encode())
        elif isinstance(value, types.ModuleType):
            h.update(f"module:{value.__name__};".encode())
        elif isinstance(value, type):
            h.update(f"type:{value.__module__}.{value.__qualname__};".encode())
        elif isinstance(value, functools.partial):
            h.update(b"partial(")
            for part in (value.func, value.args, value.keywords):
                self._nested(h, part, depth)
            h.update(b")")
        elif isinstance(value, types.MethodType):
            h.update(b"method(")
            self._nested(h, value.__func__, depth)
            self._nested(h, value.__self__, depth)
            h.update(b")")
        elif isinstance(value, types.FunctionType):
            self._function(h, value, depth)
        elif isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            owner = getattr(value, "__self__", None)
            h.update(f"builtin:{getattr(value, '__module__', None)}.{value.__qualname__}(".encode())
            if owner is not None and not isinstance(owner, types.ModuleType):
                self._nested(h, owner, depth)
            h.update(b")")
        elif dataclasses.is_dataclass(value):
            h.update(f"dataclass:{type(value).__module__}.{type(value).__qualname__}(".encode())
            for field in dataclasses.fields(value):
                self._nested(h, field.name, depth)
                self._nested(h, getattr(value, field.name, None), depth)
            h.update(b")")
        else:
            self._object(h, value, depth)

    def _sub(self, value: object, parent: Fingerprint) -> str:
        """A set member's own digest (sets have no order); its pins go to `parent`."""
        digest = self.digest(value)
        parent.pins.extend(self.pins)
        return digest

    def _function(self, h, fn: types.FunctionType, depth: int) -> None:
        h.update(f"function:{fn.__module__}.{fn.__qualname__}(".encode())
        self._code(h, fn.__code__)
        self._nested(h, fn.__defaults__, depth)
        self._nested(h, fn.__kwdefaults__, depth)
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:   # named: an empty cell (a name not bound yet)
                cells.append("<empty cell>")
        self._nested(h, tuple(cells), depth)
        h.update(b")")

    def _code(self, h, code: types.CodeType) -> None:
        """A code object by its bytecode, constants (nested code too) and names."""
        h.update(f"code:{code.co_firstlineno}:{code.co_names}:{code.co_varnames}(".encode())
        h.update(hashlib.sha256(code.co_code).digest())
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(h, const)
            else:
                h.update(f"{type(const).__name__}:{const!r};".encode())
        h.update(b")")

    def _object(self, h, value: object, depth: int) -> None:
        fields = getattr(value, "__dict__", None)
        slots = [s for cls in type(value).__mro__ for s in getattr(cls, "__slots__", ()) if s != "__weakref__"]
        if fields is None and not slots:
            self._pin(h, value)
            return
        h.update(f"object:{type(value).__module__}.{type(value).__qualname__}(".encode())
        items = dict(fields or {})
        for name in slots:
            if name != "__dict__" and hasattr(value, name):
                items[name] = getattr(value, name)
        self._nested(h, items, depth)
        h.update(b")")

    def _tensor(self, h, t: torch.Tensor) -> None:
        size = t.numel() * t.element_size()
        if size > MAX_HASH_BYTES or t.is_sparse or type(t) is not torch.Tensor and not _plain_subclass(t):
            self._pin(h, t)
            return
        try:
            flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        except (RuntimeError, NotImplementedError):  # named: storage torch cannot read back (meta, odd layouts)
            self._pin(h, t)
            return
        h.update(f"tensor:{t.dtype}:{tuple(t.shape)};".encode())
        if flat.numel():
            h.update(memoryview(flat.numpy()))


def _module_bytes(module: torch.nn.Module) -> int:
    """A module's parameters and buffers, in bytes."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def _plain_subclass(t: torch.Tensor) -> bool:
    """A tensor subclass whose storage is its value (torch.nn.Parameter); others (quantised layouts) are pinned."""
    return isinstance(t, torch.nn.Parameter)
