"""The retake cache's durable part: finished segments on disk, one file per chain key, found by any `RetakeCache`.

The folder is `<parent>/longmedia_retakes/<code fingerprint>/` (the parent: ComfyUI's temp folder, which ComfyUI
empties at start-up): a LongMedia of other code never reads these files, and a store made for new code removes
the folders of other fingerprints. A file `<key>.pt` holds `{"key", "tensors", "record"}` (the record as JSON
text, `record_codec`), written by torch.save to a temporary name and renamed, so a crashed writer leaves no file
under a key, and read with `weights_only=True`. Files are used least recently first when the store is bounded
(a read touches the file). Only keys that know nothing by identity come here (`RetakeCache.put`): such a key
means the same inputs in any later cache, after ComfyUI dropped the Retakes node's output.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import uuid
from pathlib import Path

import torch

from .record_codec import RecordCodecError, decode_record

__all__ = ["RetakeStore", "code_fingerprint", "clear_store", "STORE_FOLDER", "UnreadableEntry"]

STORE_FOLDER = "longmedia_retakes"
FORMAT = 1


class UnreadableEntry(Exception):
    """A stored segment that cannot be read back (cut short, another format, a record of another shape)."""


def clear_store(parent: Path | str) -> None:
    """Remove every stored segment under `parent` (ComfyUI's free-memory request: `comfy/retakes/free_request.py`)."""
    shutil.rmtree(Path(parent) / STORE_FOLDER, ignore_errors=True)


def code_fingerprint() -> str:
    """A digest of LongMedia's own sources and torch's version: what produced the stored segments."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"format {FORMAT}; torch {torch.__version__};".encode())
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class RetakeStore:
    """Segments by chain key in `<parent>/longmedia_retakes/<fingerprint>/` (`fingerprint`: `code_fingerprint()`
    when None)."""

    def __init__(self, parent: Path | str, fingerprint: str | None = None) -> None:
        self.root = Path(parent) / STORE_FOLDER
        self.folder = self.root / (code_fingerprint() if fingerprint is None else fingerprint)
        if self.root.is_dir():
            for other in self.root.iterdir():
                if other.is_dir() and other.name != self.folder.name:
                    shutil.rmtree(other, ignore_errors=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.pt"

    def write(self, key: str, tensors: tuple[torch.Tensor, ...], record_json: str) -> Path:
        """Store a segment under `key` (OSError or RuntimeError: nothing is left under the key or a temporary
        name)."""
        return self._save(self.path(key), {"key": key, "tensors": list(tensors), "record": record_json})

    def write_private(self, name: str, tensors: tuple[torch.Tensor, ...]) -> Path:
        """A file only its writer knows (a key with identity parts): no record, never found by `read`."""
        return self._save(self.folder / f"{name}.private", list(tensors))

    def read(self, key: str) -> tuple[tuple[torch.Tensor, ...], object] | None:
        """The segment under `key` (None: none stored; UnreadableEntry: the file is damaged and was removed)."""
        path = self.path(key)
        try:
            data = torch.load(path, weights_only=True)
            if not isinstance(data, dict) or data.get("key") != key:
                raise UnreadableEntry(f"{path.name} holds another key")
            tensors = tuple(data["tensors"])
            if not all(isinstance(t, torch.Tensor) for t in tensors):
                raise UnreadableEntry(f"{path.name} holds other values")
            record = decode_record(data["record"])
        except FileNotFoundError:
            return None
        # named: cut short or overwritten outside LongMedia (OSError, RuntimeError, EOFError, UnpicklingError),
        # another layout (KeyError, TypeError), a record this code does not read (RecordCodecError)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, KeyError, TypeError, RecordCodecError,
                UnreadableEntry) as error:
            path.unlink(missing_ok=True)
            raise UnreadableEntry(str(error)[:160]) from error
        try:
            os.utime(path)
        except OSError:   # named: removed meanwhile by another cache's bound; the segment was read
            pass
        return tensors, record

    def keys(self) -> dict[str, int]:
        """Stored keys and their file sizes."""
        out = {}
        for path in self._files("*.pt"):
            try:
                out[path.stem] = path.stat().st_size
            except FileNotFoundError:   # named: removed meanwhile by another cache's bound
                continue
        return out

    def bytes(self) -> int:
        return sum(self.keys().values())

    def bound(self, max_bytes: int, other_bytes: int = 0, keep: str | None = None) -> list[str]:
        """Remove the least recently used segments until they and `other_bytes` fit `max_bytes` (never `keep`);
        returns their keys."""
        entries = []
        for path in self._files("*.pt"):
            try:
                st = path.stat()
            except FileNotFoundError:   # named: removed meanwhile by another cache's bound
                continue
            entries.append((st.st_mtime_ns, path, st.st_size))
        total = sum(size for _, _, size in entries) + other_bytes
        removed = []
        for _, path, size in sorted(entries, key=lambda e: e[0]):
            if total <= max_bytes:
                break
            if path.stem == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size
            removed.append(path.stem)
        return removed

    def remove(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def clear(self) -> None:
        """Every stored segment, of any fingerprint."""
        clear_store(self.root.parent)

    def _files(self, pattern: str) -> list[Path]:
        try:
            return list(self.folder.glob(pattern))
        except FileNotFoundError:   # named: no store yet, or cleared meanwhile
            return []

    def _save(self, path: Path, obj) -> Path:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            torch.save(obj, tmp)
            os.replace(tmp, path)
        except (OSError, RuntimeError):  # named: a full or unwritable folder (torch's writer raises RuntimeError)
            tmp.unlink(missing_ok=True)
            raise
        return path
