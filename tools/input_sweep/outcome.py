"""What became of one case: its outcome from ComfyUI's reply and history, and what it left on disk and in processes.

Outcomes: `refused_clear` (LongMedia's own input error, short), `refused_by_comfyui` (ComfyUI's own validation of a
type, range or link, or an error raised by a stock node with no pack frame in its traceback), `ran`, `unclear` (a
raw exception from inside the pack, or a pack message over `MAX_MESSAGE_CHARS`), `crash` (the server died or the
prompt hung past its timeout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PACK_ERROR_TITLE = "LongMedia input error"   # longmedia.errors.TITLE: the name ComfyUI shows over our refusals
MAX_MESSAGE_CHARS = 600
PACK_FRAMES = ("ComfyUI-LongMedia", "/longmedia/", "/nodes/")
RETAKE_STORE = Path("temp") / "longmedia_retakes"
QUIET = {"server.log", "comfyui.db", "comfyui.db-journal", "comfyui.db-wal", "comfyui.db-shm"}
OUTCOMES = ("refused_clear", "refused_by_comfyui", "ran", "unclear", "crash")


@dataclass
class Result:
    name: str
    category: str
    expect: str
    outcome: str = ""
    node: str = ""
    error_type: str = ""
    message: str = ""
    seconds: float = 0.0
    problems: dict[str, list[str]] = field(default_factory=dict)   # partial, stray, outside, leftover, lost, stale

    def problem(self, kind: str, what: str) -> None:
        self.problems.setdefault(kind, []).append(what)

    @property
    def surprise(self) -> str:
        """"expected ran, got ..." where a valid case was refused, or an invalid one ran."""
        if self.outcome in ("unclear", "crash") or not self.expect:
            return ""
        got = "ran" if self.outcome == "ran" else "refused"
        return "" if got == self.expect else f"expected {self.expect}, got {self.outcome}"

    def as_json(self) -> dict:
        return {"name": self.name, "category": self.category, "expect": self.expect, "outcome": self.outcome,
                "node": self.node, "error_type": self.error_type, "message": self.message[:2000],
                "message_chars": len(self.message), "seconds": round(self.seconds, 2), "problems": self.problems,
                "surprise": self.surprise}


def _is_pack(class_type: str) -> bool:
    return class_type.startswith("LongMedia") and not class_type.startswith("LongMediaTest")


def classify_validation(result: Result, reply: dict) -> None:
    """A 400 from POST /prompt: ComfyUI's node_errors (or a prompt-level error). Ours when a LongMedia node's own
    validate_inputs refused it; unclear when validation raised inside one of our nodes."""
    node_errors = reply.get("node_errors") or {}
    for nid, entry in node_errors.items():
        ctype = entry.get("class_type", "")
        for error in entry.get("errors", []):
            message = f"{error.get('message', '')}: {error.get('details', '')}"
            result.node, result.message = f"{nid} ({ctype})", message
            result.error_type = error.get("type", "")
            if _is_pack(ctype) and result.error_type == "custom_validation_failed":
                result.outcome = "refused_clear" if len(message) <= MAX_MESSAGE_CHARS else "unclear"
                return
            if _is_pack(ctype) and result.error_type == "exception_during_validation":
                # our validate_inputs raised (exception_during_inner_validation is ComfyUI resolving a link)
                result.outcome = "unclear"
                return
    error = reply.get("error") or {}
    if not node_errors:
        result.error_type = error.get("type", "") if isinstance(error, dict) else "error"
        result.message = f"{error.get('message', '')}: {error.get('details', '')}" if isinstance(error, dict) else str(error)
    result.outcome = "refused_by_comfyui"


def classify_history(result: Result, entry: dict) -> None:
    """A finished prompt's history entry: ran, or which node failed and how."""
    status = entry.get("status", {})
    if status.get("status_str") == "success":
        result.outcome = "ran"
        return
    for event, data in status.get("messages", []):
        if event != "execution_error":
            continue
        ctype = data.get("node_type", "")
        result.node = f"{data.get('node_id')} ({ctype})"
        result.error_type = data.get("exception_type", "")
        result.message = str(data.get("exception_message", ""))
        trace = "".join(data.get("traceback", []))
        ours = result.error_type == PACK_ERROR_TITLE
        if ours:
            result.outcome = "refused_clear" if len(result.message) <= MAX_MESSAGE_CHARS else "unclear"
        elif _is_pack(ctype) or any(mark in trace for mark in PACK_FRAMES):
            result.outcome = "unclear"
        else:
            result.outcome = "refused_by_comfyui"
        return
    result.outcome = "unclear"
    result.message = f"prompt did not succeed and named no error: {str(status)[:500]}"


# --- the files and processes a case leaves -------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (links not followed; models/ and custom_nodes/ skipped): relative path ->
    (size, mtime_ns)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        if rel == Path("base"):
            dirs[:] = [d for d in dirs if d not in ("models", "custom_nodes")]
        for name in files:
            path = Path(folder) / name
            try:
                st = path.lstat()
            except FileNotFoundError:   # named: a file removed while we walk (the server's own temp files)
                continue
            out[str(rel / name)] = (st.st_size, st.st_mtime_ns)
    return out


def reported_outputs(entry: dict) -> list[str]:
    """The output files a finished prompt's history names (Decode & Save's video, the raw-latent saves)."""
    names = []
    for node_out in entry.get("outputs", {}).values():
        for item in node_out.get("images", []) + node_out.get("gifs", []):
            if isinstance(item, dict) and item.get("type", "output") == "output":
                names.append(str(Path(item.get("subfolder", "")) / item["filename"]))
        for item in node_out.get("longmedia_latent", []):
            names.append(item["filename"])
    return names


def check_files(result: Result, before: dict, after: dict, reported: list[str], started_ns: int) -> list[Path]:
    """Partial, stray, outside, lost and stale files; returns the case's own output files (relative to the work
    folder) to remove."""
    own = []
    out_prefix = str(Path("base") / "output")
    for name in reported:
        rel = str(Path(out_prefix) / name)
        if rel not in after:
            result.problem("lost", name)
        elif after[rel][0] == 0:
            result.problem("lost", f"{name} (empty)")
        elif after[rel][1] < started_ns:
            result.problem("stale", name)
        own.append(Path(rel))
    for rel, stat in after.items():
        if before.get(rel) == stat:
            continue
        path = Path(rel)
        if path in own:
            continue   # a reported output (its name may start with a dot: the prefix the user gave)
        base_rel = path.relative_to("base") if path.parts[:1] == ("base",) else None
        if path.name.endswith(".partial") or (path.name.startswith(".") and base_rel is not None
                                              and base_rel.parts[:1] in (("output",), ("temp",))):
            result.problem("partial", rel)
        elif base_rel is None:
            result.problem("outside", rel)
        elif base_rel.parts[:1] == ("output",):
            result.problem("stray", rel)
            own.append(path)
        elif base_rel.parts[:2] == RETAKE_STORE.parts:
            continue
        elif base_rel.parts[:1] == ("temp",):
            result.problem("stray", rel)
        elif str(base_rel) in QUIET or base_rel.parts[:1] == ("user",):
            continue
        else:
            result.problem("outside", rel)
    return own
