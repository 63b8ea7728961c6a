"""The title ComfyUI shows over a LongMedia refusal (issue 47): ComfyUI names an exception by its class's
`__module__` + `__qualname__` (execution.full_type_name; 'builtins' drops the module), and for a custom node pack
that module is the pack folder's path (`/.../custom_nodes/ComfyUI-LongMedia.longmedia.errors`). The title must read
"LongMedia input error", for every subclass too, and the error must still pickle and compare as itself."""

from __future__ import annotations

import pickle
import traceback

from longmedia.comfy.patching.block_patch import HandedAttentionError
from longmedia.errors import LongMediaInputError, Suggestion


def full_type_name(klass) -> str:
    """ComfyUI's own naming (execution.full_type_name, identical in 0.33.0 and upstream)."""
    module = klass.__module__
    if module == "builtins":
        return klass.__qualname__
    return module + "." + klass.__qualname__


def test_comfyui_titles_every_longmedia_input_error_in_words():
    assert full_type_name(LongMediaInputError) == "LongMedia input error"
    assert full_type_name(HandedAttentionError) == "LongMedia input error"


def test_the_traceback_line_reads_the_same():
    error = LongMediaInputError("width", 1000, "a multiple of 32", "Use 992 or 1024.")
    last = traceback.format_exception_only(type(error), error)[-1]
    assert last.startswith("LongMedia input error: width=1000 is not allowed"), last


def test_the_error_still_pickles_as_itself():
    error = LongMediaInputError("segment_seconds", 12.0, "at most 10 s", "Use 10.",
                                suggestion=Suggestion("segment_seconds", 10.0))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is LongMediaInputError and str(back) == str(error)
    assert (back.input_name, back.value, back.allowed, back.fix, back.suggestion) == \
        ("segment_seconds", 12.0, "at most 10 s", "Use 10.", Suggestion("segment_seconds", 10.0))
