"""Per-segment prompts: Setup's `segment_prompts` text, read as a list or a time schedule, resolved per segment.

Two forms, one entry per non-blank line:
* a list: line i is segment i's prompt;
* a schedule: every line is `<seconds>s: <prompt>` (`0s: a fox in snow`, `10.5s: it runs`); a prompt applies
  from the segment whose new frames hold that time.
Missing entries repeat the previous prompt; segments before a schedule's first time use Setup's `prompt`.
Errors name `segment_prompts` and the line: a malformed schedule, more prompts than segments, two times in
one segment, times out of order or past the job's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import LongMediaInputError
from ..h3 import lattice as L
from .timeline import SegmentPlan

__all__ = ["PromptEntry", "parse_segment_prompts", "segment_prompt_texts", "SegmentPrompts", "short_prompt",
           "NAME"]

NAME = "segment_prompts"
_KEYED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*s\s*:\s*(.*?)\s*$")
_LOOKS_KEYED = re.compile(r"^\s*[-+]?[\d.]+\s*[a-z]*\s*:")
SHORT_CHARS = 40


@dataclass(frozen=True)
class PromptEntry:
    """One line of `segment_prompts`: its prompt, and its time in seconds (None in the list form)."""

    text: str
    seconds: float | None = None
    line: int = 0          # 1-based line number in the input, for error messages


def parse_segment_prompts(text: str) -> tuple[PromptEntry, ...]:
    """The entries of `segment_prompts` (empty text: none). Raises on a malformed schedule."""
    if not isinstance(text, str):
        raise LongMediaInputError(NAME, type(text).__name__, "text: one prompt per line, or `0s: ...` lines",
                                  "Type the prompts, one per line.")
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _KEYED.match(line)
        if match is None and _LOOKS_KEYED.match(line):
            raise LongMediaInputError(f"{NAME} line {number}", line.strip(),
                                      "a time as `<seconds>s: <prompt>` (e.g. `0s: ...`, `12.5s: ...`)",
                                      "Write the time in seconds followed by `s:`.")
        if match is not None:
            seconds, prompt = float(match.group(1)), match.group(2)
            if not prompt:
                raise LongMediaInputError(f"{NAME} line {number}", line.strip(), "a prompt after the time",
                                          "Type the prompt after `s:`, or delete the line.")
            entries.append(PromptEntry(prompt, seconds, number))
        else:
            entries.append(PromptEntry(line.strip(), None, number))
    keyed = [e.seconds is not None for e in entries]
    if any(keyed) and not all(keyed):
        bad = entries[keyed.index(False)] if keyed[0] else entries[keyed.index(True)]
        raise LongMediaInputError(f"{NAME} line {bad.line}", bad.text, "every line timed (`0s: ...`) or none "
                                  "(one prompt per segment, in order)", "Give every line a time, or none.")
    for a, b in zip(entries, entries[1:]):
        if b.seconds is not None and b.seconds <= a.seconds:
            raise LongMediaInputError(f"{NAME} line {b.line}", f"{b.seconds:g}s",
                                      f"a time after the previous line's {a.seconds:g}s", "List times in order.")
    return tuple(entries)


def _owner(plan: SegmentPlan, entry: PromptEntry) -> int:
    frame = round(entry.seconds * L.FPS)
    for seg in plan.segments:
        if frame < seg.pass_end:
            return seg.index
    raise LongMediaInputError(f"{NAME} line {entry.line}", f"{entry.seconds:g}s",
                              f"a time within the job's {plan.seconds:.2f} s",
                              "Move the time inside the job, or lengthen the job.")


def segment_prompt_texts(text: str, plan: SegmentPlan | None, base: str) -> tuple[str, ...] | None:
    """Every segment's prompt from `segment_prompts` (None when it is empty); `plan` None is one segment."""
    entries = parse_segment_prompts(text)
    if not entries:
        return None
    count = plan.count if plan is not None else 1
    if entries[0].seconds is None:
        if len(entries) > count:
            raise LongMediaInputError(NAME, f"{len(entries)} prompts", f"at most {count} (one per segment)",
                                      "Drop the extra lines, or make the job longer or its segments shorter.")
        texts = [e.text for e in entries]
        return tuple(texts + [texts[-1]] * (count - len(texts)))
    owners = {}
    for entry in entries:
        index = _owner(plan, entry) if plan is not None else (0 if entry.seconds == 0 else -1)
        if index < 0:
            raise LongMediaInputError(f"{NAME} line {entry.line}", f"{entry.seconds:g}s", "0s for a one-pass job",
                                      "Set segment_seconds to give later times their own segments.")
        if index in owners:
            starts = ", ".join(f"{s.new_start / L.FPS:.2f}s" for s in plan.segments)
            raise LongMediaInputError(f"{NAME} line {entry.line}", f"{entry.seconds:g}s",
                                      f"one time per segment (segment {index} already starts its prompt at line "
                                      f"{owners[index].line}); segments start at {starts}",
                                      "Drop one of the two times, or shorten segment_seconds.")
        owners[index] = entry
    if 0 not in owners and not base.strip():
        raise LongMediaInputError(NAME, f"first time {entries[0].seconds:g}s", "a schedule from 0s, or a prompt in "
                                  "Setup's prompt box for the segments before its first time",
                                  "Add a `0s: ...` line, or type a prompt in the prompt box.")
    texts, current = [], base
    for i in range(count):
        current = owners[i].text if i in owners else current
        texts.append(current)
    return tuple(texts)


def short_prompt(text: str, chars: int = SHORT_CHARS) -> str:
    """A prompt on one line, cut to `chars` with an ellipsis (the segment tables)."""
    flat = " ".join(text.split()).replace("|", "/")   # the tables split their cells on " | "
    return flat if len(flat) <= chars else flat[:chars - 1] + "\u2026"


@dataclass(frozen=True, eq=False)
class SegmentPrompts:
    """Every segment's prompt and its CONDITIONING, encoded by Setup's text encoder (a repeated prompt shares one).

    `conditioning[i]` is ComfyUI's CONDITIONING list for segment i (opaque here); `texts[i]` its prompt.
    """

    texts: tuple[str, ...]
    conditioning: tuple[object, ...]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.conditioning):
            raise ValueError(f"{len(self.texts)} prompts for {len(self.conditioning)} conditionings")

    @property
    def count(self) -> int:
        return len(self.texts)

    def to_dict(self) -> dict:
        return {"texts": list(self.texts)}
