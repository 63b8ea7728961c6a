"""A retake's record as JSON text, and back: what `RetakeStore` writes beside a finished segment's tensors.

A record is the report of the run that sampled the segment (`report.segmented.SegmentRecord`: frozen dataclasses
of plain values). Written: None, bool, int, float (inf and NaN too), str, list, tuple, dict, enum members,
torch dtypes and dataclasses. Read back: only dataclasses and enums defined in LongMedia's own modules (under the
package this module belongs to), never an arbitrary class named in a file, so a file in the temp folder cannot
make the reader build anything else. A value of another kind raises `RecordCodecError` (the segment then stays
out of the durable store).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json

import torch

__all__ = ["encode_record", "decode_record", "RecordCodecError"]

_ROOT = __name__.rsplit(".segments.", 1)[0]    # "longmedia", or "<pack>.longmedia" inside ComfyUI


class RecordCodecError(ValueError):
    """A record holds a value this codec does not write, or a file names a class it does not read."""


def encode_record(record: object) -> str:
    return json.dumps(_encode(record), separators=(",", ":"))


def decode_record(text: str) -> object:
    try:
        return _decode(json.loads(text))
    except (TypeError, KeyError, AttributeError) as error:  # named: a record of another shape (another version)
        raise RecordCodecError(f"unreadable record: {type(error).__name__}: {error}") from error


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode(value: object):
    if isinstance(value, enum.Enum):     # before the plain values: IntEnum and StrEnum stay members
        _check_ours(type(value).__module__)
        return {"enum": _name(type(value)), "value": _encode(value.value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        _check_ours(type(value).__module__)
        fields = {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return {"dataclass": _name(type(value)), "fields": fields}
    raise RecordCodecError(f"a {type(value).__qualname__} in the record has no JSON form here")


def _decode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "dict" in value:
        return {_freeze(_decode(k)): _decode(v) for k, v in value["dict"]}
    if "dtype" in value:
        dtype = getattr(torch, str(value["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise RecordCodecError(f"unknown dtype {value['dtype']!r}")
        return dtype
    if "enum" in value:
        cls = _class(value["enum"])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise RecordCodecError(f"{value['enum']} is not an enum")
        return cls(_decode(value["value"]))
    if "dataclass" in value:
        cls = _class(value["dataclass"])
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise RecordCodecError(f"{value['dataclass']} is not a dataclass")
        return cls(**{name: _decode(v) for name, v in value["fields"].items()})
    raise RecordCodecError(f"unknown record part {sorted(value)[:3]}")


def _freeze(key):
    return tuple(_freeze(k) for k in key) if isinstance(key, list) else key


def _check_ours(module: str) -> None:
    if module != _ROOT and not module.startswith(_ROOT + "."):
        raise RecordCodecError(f"{module} is not a LongMedia module")


def _class(name: str) -> object:
    module, _, qualname = str(name).partition(":")
    _check_ours(module)
    try:
        obj = importlib.import_module(module)
    except ImportError as error:  # named: a module of another LongMedia version
        raise RecordCodecError(f"no module {module}") from error
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise RecordCodecError(f"no {qualname} in {module}")
    return obj
