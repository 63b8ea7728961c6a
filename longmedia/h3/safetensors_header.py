"""A safetensors file's header, read and checked as the safetensors library checks it, without loading a tensor.

A file is: 8 bytes (little-endian header length N), N bytes of JSON, then the tensor data. The JSON is an
object of tensors, each {"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}, plus an optional
"__metadata__" object of strings. Offsets are relative to the data start; sorted, they tile the data from 0
with no gap or overlap, and the last one ends at the end of the file. Every violation (an interrupted
download, a foreign or corrupt file) raises `LongMediaInputError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import LongMediaInputError

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
               "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
MAX_HEADER_BYTES = 256 * 1024 * 1024
INPUT = "model"   # the input these errors name (the CLI's --model, the planner's model)


@dataclass(frozen=True)
class StoredTensor:
    """One tensor's header entry: storage dtype, shape and byte range inside the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    path: str
    tensors: tuple[StoredTensor, ...]
    metadata: dict[str, str]
    data_start: int      # file offset of the data section (8 + header length)
    file_bytes: int


def _bad(path: str, what: str) -> LongMediaInputError:
    return LongMediaInputError(INPUT, path, "a complete safetensors checkpoint", what)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _tensor(path: str, name: str, info: Any) -> StoredTensor:
    if not isinstance(info, dict):
        raise _bad(path, f"Tensor {name!r} is described by a JSON {type(info).__name__}, not an object.")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
    if missing:
        raise _bad(path, f"Tensor {name!r} has no {' / '.join(missing)} in the header.")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or not dtype:
        raise _bad(path, f"Tensor {name!r} has dtype {dtype!r}, not a dtype name such as 'BF16'.")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _bad(path, f"Tensor {name!r} has shape {shape!r}, not a list of non-negative integers.")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]):
        raise _bad(path, f"Tensor {name!r} has data_offsets {offsets!r}, not [begin, end] with 0 <= begin <= end.")
    t = StoredTensor(name, dtype, tuple(shape), offsets[0], offsets[1])
    if dtype in DTYPE_BYTES:
        numel = 1
        for d in t.shape:
            numel *= d
        if numel * DTYPE_BYTES[dtype] != t.nbytes:
            raise _bad(path, f"Tensor {name!r} ({dtype} {list(t.shape)}) needs {numel * DTYPE_BYTES[dtype]} bytes "
                             f"but its data_offsets span {t.nbytes}.")
    return t


def _metadata(path: str, meta: Any) -> dict[str, str]:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, f"Its __metadata__ is a JSON {type(meta).__name__}"
                         f"{' with non-string values' if isinstance(meta, dict) else ''}, not an object of strings.")
    return meta


def _check_layout(path: str, tensors: list[StoredTensor], data_bytes: int) -> None:
    """Sorted by offset, the tensors tile the data section exactly (as safetensors requires)."""
    at = 0
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if t.begin != at:
            kind = "overlaps the tensor before it" if t.begin < at else f"leaves a gap of {t.begin - at} bytes before it"
            raise _bad(path, f"Tensor {t.name!r} at data bytes {t.begin}-{t.end} {kind} (offsets out of order).")
        at = t.end
    if at > data_bytes:
        raise _bad(path, f"Truncated: the header's tensors end at data byte {at} but the file holds {data_bytes} "
                         f"bytes of data ({data_bytes / at:.0%}); an interrupted download? Download it again.")
    if at < data_bytes:
        raise _bad(path, f"The file has {data_bytes - at} bytes after its last tensor: not a safetensors file the "
                         "header describes.")


def read_header(path: str) -> SafetensorsHeader:
    """The checked header of the safetensors file at `path` (only the header is read)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise _bad(path, f"The file is {size} bytes, too short to hold a safetensors header.")
            (n,) = struct.unpack("<Q", f.read(8))
            if n < 2 or n > MAX_HEADER_BYTES:
                raise _bad(path, f"Its header length field reads {n} bytes, outside 2-{MAX_HEADER_BYTES}: "
                                 "not a safetensors file.")
            if 8 + n > size:
                raise _bad(path, f"Its header length ({n} bytes) is larger than the file ({size} bytes): truncated "
                                 "or not a safetensors file.")
            raw = f.read(n)
    except IsADirectoryError as exc:
        raise LongMediaInputError(INPUT, path, "a readable safetensors file", "It is a directory.") from exc
    except OSError as exc:
        raise LongMediaInputError(INPUT, path, "a readable safetensors file",
                                  f"Check the path ({exc.strerror or exc}).") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _bad(path, f"Its header is not UTF-8 text (byte {exc.start}): not a safetensors file.") from exc
    except json.JSONDecodeError as exc:
        raise _bad(path, f"Its header is not valid JSON ({exc.msg} at character {exc.pos}).") from exc
    except RecursionError as exc:   # json's decoder recurses once per nesting level
        raise _bad(path, "Its header nests JSON too deeply.") from exc
    if not isinstance(header, dict):
        raise _bad(path, f"Its header is a JSON {type(header).__name__}, not an object of tensors.")
    meta = _metadata(path, header.pop("__metadata__", None))
    tensors = [_tensor(path, name, info) for name, info in header.items()]
    _check_layout(path, tensors, size - 8 - n)
    return SafetensorsHeader(path, tuple(tensors), meta, 8 + n, size)
