"""Preview-callback isolation: a failing VideoHelperSuite (VHS) animated-preview hook must not kill a long run.

`IsolatedPreviewCallback` wraps ComfyUI's sampler callback (`callback(step, x0, x, total_steps)`,
from `latent_preview.prepare_callback`). When the callback raises and the traceback passes through
VHS preview code (a frame whose file lies in a `ComfyUI-VideoHelperSuite` / `videohelpersuite`
directory), the failure is logged once, previews are off for the rest of the run and the
progress-only `fallback` (if any) carries on. Any other error stays fatal. One wrapper per run.
"""

from __future__ import annotations

import logging
import re
import traceback
from dataclasses import dataclass
from types import TracebackType
from typing import Callable

VHS_DIRECTORY_NAMES = ("comfyui-videohelpersuite", "videohelpersuite")

Callback = Callable[[int, object, object, int], object]
Log = Callable[[str], None]


def is_vhs_file(filename: str) -> bool:
    """Whether `filename` (POSIX or Windows form) lies inside a VideoHelperSuite directory."""
    parts = [p.lower() for p in re.split(r"[\\/]+", filename)[:-1]]
    return any(p in VHS_DIRECTORY_NAMES or p.startswith("comfyui-videohelpersuite") for p in parts)


def vhs_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The innermost traceback frame in VHS code, or None when the error never passed through VHS."""
    found = None
    for frame in traceback.extract_tb(tb):
        if is_vhs_file(frame.filename):
            found = frame
    return found


@dataclass(frozen=True)
class PreviewFailure:
    """The VHS preview error that turned previews off."""

    step: int
    error_type: str
    message: str
    filename: str
    line: int | None
    function: str

    @property
    def summary(self) -> str:
        return (f"VideoHelperSuite preview failed at step {self.step} with {self.error_type}: {self.message} "
                f"({self.filename}:{self.line} in {self.function}); previews are off for the rest of this run, "
                "sampling continues. Update ComfyUI-VideoHelperSuite or turn its animated previews off.")


def _default_log(message: str) -> None:
    logging.getLogger("longmedia").warning(message)


class IsolatedPreviewCallback:
    """`callback` with VHS preview failures isolated; `fallback` takes over once previews are off."""

    def __init__(self, callback: Callback, *, fallback: Callback | None = None, log: Log | None = None) -> None:
        self._callback = callback
        self._fallback = fallback
        self._log = log if log is not None else _default_log
        self._failure: PreviewFailure | None = None

    @property
    def failure(self) -> PreviewFailure | None:
        return self._failure

    @property
    def previews_disabled(self) -> bool:
        return self._failure is not None

    def __call__(self, step: int, x0, x, total_steps: int):
        if self._failure is None:
            try:
                return self._callback(step, x0, x, total_steps)
            except Exception as exc:  # named reason: only VHS preview errors are isolated, the rest re-raise
                frame = vhs_frame(exc.__traceback__)
                if frame is None:
                    raise
                self._failure = PreviewFailure(step, type(exc).__name__, str(exc), frame.filename, frame.lineno,
                                               frame.name)
                self._log(self._failure.summary)
        return self._fallback(step, x0, x, total_steps) if self._fallback is not None else None


def comfy_preview_callback(model, steps: int, x0_output_dict: dict | None = None, *,
                           log: Log | None = None) -> IsolatedPreviewCallback:
    """ComfyUI's preview callback for `model` (a ModelPatcher), isolated; the fallback keeps the progress bar."""
    import comfy.utils
    import latent_preview

    primary = latent_preview.prepare_callback(model, steps, x0_output_dict)
    bar = comfy.utils.ProgressBar(steps)

    def progress_only(step: int, x0, x, total_steps: int) -> None:
        if x0_output_dict is not None:
            x0_output_dict["x0"] = x0
        bar.update_absolute(step + 1, total_steps, None)

    return IsolatedPreviewCallback(primary, fallback=progress_only, log=log)
