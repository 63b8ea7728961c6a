"""The input error every LongMedia entry point raises, and the range checks that build its messages."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Suggestion:
    """The one input to change next and the value to give it, as the message's fix says it (a program reads this,
    never the message text): e.g. Suggestion("segment_seconds", 5.88)."""

    input: str
    value: object


TITLE = "LongMedia input error"
SHOWN_VALUE_CHARS = 200  # an error message quotes at most this much of the value it refuses


def shown(value: object) -> str:
    """`value` as an error message quotes it: its repr, cut to `SHOWN_VALUE_CHARS` with its full length said (a
    megabyte of text refused must not come back as a megabyte of message)."""
    text = repr(value)
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    size = f"{len(value)} characters" if isinstance(value, (str, bytes)) else f"{len(text)} characters as text"
    return f"{text[:SHOWN_VALUE_CHARS - 20]}... ({size})"


def _titled(cls: type) -> type:
    """`cls` named as the title ComfyUI shows over the message (its execution.full_type_name reads `__module__` and
    `__qualname__`, 'builtins' dropped; a pack's module is its folder's path). Its real place is kept for pickling."""
    cls._location = (cls.__module__, cls.__qualname__)
    cls.__module__, cls.__qualname__ = "builtins", TITLE
    return cls


def _rebuild(location: tuple[str, str], args: tuple, state: dict) -> Exception:
    import importlib

    cls = importlib.import_module(location[0])
    for part in location[1].split("."):
        cls = getattr(cls, part)
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class LongMediaInputError(ValueError):
    """A user-facing input is out of range; the message names the input, its value, the range and the fix.

    `suggestion`: where the fix is one input set to one value, that input and value, typed. ComfyUI titles it
    "LongMedia input error" (subclasses too), not by the pack's file path."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _titled(cls)

    def __reduce__(self):
        return _rebuild, (type(self)._location, self.args, dict(self.__dict__))

    def __init__(self, name: str, value: object, allowed: str, fix: str, *,
                 suggestion: Suggestion | None = None) -> None:
        self.input_name = name
        self.value = value
        self.allowed = allowed
        self.fix = fix
        self.suggestion = suggestion
        super().__init__(f"{name}={shown(value)} is not allowed: expected {allowed}. {fix}")


_titled(LongMediaInputError)


def check_int(name: str, value: object, low: int, high: int, fix: str, *, zero_ok: bool = False) -> int:
    """`value` as an int in [low, high] (or exactly 0 when `zero_ok`), else LongMediaInputError."""
    allowed = f"an integer from {low} to {high}" + (" (or 0)" if zero_ok else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise LongMediaInputError(name, value, allowed, fix)
    if zero_ok and value == 0:
        return 0
    if not low <= value <= high:
        raise LongMediaInputError(name, value, allowed, fix)
    return value


def check_float(name: str, value: object, low: float, high: float, fix: str) -> float:
    """`value` as a finite float in [low, high], else LongMediaInputError."""
    allowed = f"a number from {low:g} to {high:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LongMediaInputError(name, value, allowed, fix)
    value = float(value)
    if not math.isfinite(value) or not low <= value <= high:
        raise LongMediaInputError(name, value, allowed, fix)
    return value


def check_choice(name: str, value: object, choices: tuple[str, ...], fix: str = "") -> str:
    """`value` as one of `choices`, else LongMediaInputError."""
    if not isinstance(value, str) or value not in choices:
        raise LongMediaInputError(name, value, "one of " + ", ".join(repr(c) for c in choices),
                                  fix or "Pick one of the listed values.")
    return value
