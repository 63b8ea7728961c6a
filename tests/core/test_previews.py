"""VHS preview failures are isolated (logged once, previews off); every other callback error stays fatal.

Synthetic tracebacks: code compiled with fake filenames, so real frames carry those filenames.
"""

from __future__ import annotations

import pytest
import torch

from longmedia.comfy.passes.previews import IsolatedPreviewCallback, is_vhs_file, vhs_frame

VHS_POSIX = "/x/ComfyUI/custom_nodes/ComfyUI-VideoHelperSuite/videohelpersuite/latent_preview.py"
VHS_WINDOWS = "C:\\ComfyUI_windows_portable\\ComfyUI\\custom_nodes\\comfyui-videohelpersuite\\videohelpersuite\\lp.py"
COMFY_PREVIEW = "/x/ComfyUI/latent_preview.py"
OTHER_NODE = "/x/ComfyUI/custom_nodes/ComfyUI-SomethingElse/preview.py"

PREVIEWER_SRC = '''
def decode_latent_to_preview_image(x0):
    if x0.shape[1] != 3:
        raise ValueError(f"cannot preview {x0.shape[1]} channels")
    return ("JPEG", x0.mean().item())
'''

CALLBACK_SRC = '''
def make_callback(previewer, record):
    def callback(step, x0, x, total_steps):
        record.append(step)
        preview = previewer(x0)
        return preview
    return callback
'''


def load(src: str, filename: str) -> dict:
    namespace: dict = {}
    exec(compile(src, filename, "exec"), namespace)
    return namespace


def callback_through(previewer_file: str, callback_file: str = COMFY_PREVIEW):
    previewer = load(PREVIEWER_SRC, previewer_file)["decode_latent_to_preview_image"]
    record: list[int] = []
    return load(CALLBACK_SRC, callback_file)["make_callback"](previewer, record), record


def latents(seed: int, channels: int):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, channels, 2, 4, 4, generator=gen), torch.randn(1, channels, 2, 4, 4, generator=gen)


@pytest.mark.parametrize("filename,expected", [
    (VHS_POSIX, True), (VHS_WINDOWS, True),
    ("/x/custom_nodes/ComfyUI-VideoHelperSuite-main/nodes.py", True),
    (COMFY_PREVIEW, False), (OTHER_NODE, False),
    ("/x/custom_nodes/my_videohelpersuite_fork.py", False),  # a file name, not a directory
])
def test_is_vhs_file(filename, expected):
    assert is_vhs_file(filename) is expected


@pytest.mark.parametrize("vhs_file", [VHS_POSIX, VHS_WINDOWS])
def test_vhs_failure_is_logged_once_and_previews_stay_off(vhs_file):
    inner, record = callback_through(vhs_file)
    logs, fallback_calls = [], []
    wrapped = IsolatedPreviewCallback(inner, fallback=lambda *a: fallback_calls.append(a[0]), log=logs.append)

    x0, x = latents(0, 3)
    assert wrapped(0, x0, x, 4)[0] == "JPEG"                     # a healthy preview passes through
    bad0, bad = latents(1, 24)
    assert wrapped(1, bad0, bad, 4) is None                       # VHS raised: isolated
    assert wrapped(2, x0, x, 4) is None and wrapped(3, x0, x, 4) is None   # previews off from now on

    assert record == [0, 1]                                       # the hook was never called again
    assert fallback_calls == [1, 2, 3]                            # progress carried on, failing step included
    assert len(logs) == 1 and "previews are off" in logs[0] and "24 channels" in logs[0]
    failure = wrapped.failure
    assert wrapped.previews_disabled
    assert (failure.step, failure.error_type, failure.filename, failure.function) == (
        1, "ValueError", vhs_file, "decode_latent_to_preview_image")
    assert failure.line == 4


def test_errors_outside_vhs_stay_fatal():
    inner, _ = callback_through(OTHER_NODE)
    wrapped = IsolatedPreviewCallback(inner, log=lambda m: pytest.fail("must not log"))
    bad0, bad = latents(2, 24)
    with pytest.raises(ValueError, match="24 channels"):
        wrapped(0, bad0, bad, 4)
    assert not wrapped.previews_disabled
    x0, x = latents(3, 3)
    assert wrapped(1, x0, x, 4)[0] == "JPEG"                      # still live after a fatal error was raised


def test_innermost_vhs_frame_is_reported_when_vhs_calls_into_other_code():
    # VHS code calls a torch-like helper that raises: the traceback ends outside VHS but passed through it
    helper = load("def helper(t):\n    return t.view(7, -1)\n", "/x/site-packages/torch/helper.py")["helper"]
    vhs = load("def vhs_preview(t, helper):\n    return helper(t)\n", VHS_POSIX)
    try:
        vhs["vhs_preview"](torch.randn(5, 3, generator=torch.Generator().manual_seed(100)), helper)
    except RuntimeError as exc:
        frame = vhs_frame(exc.__traceback__)
    assert frame is not None and frame.filename == VHS_POSIX and frame.name == "vhs_preview"


def test_interrupts_are_never_swallowed():
    class Interrupted(BaseException):  # ComfyUI's InterruptProcessingException is a BaseException
        pass

    namespace = {"Interrupted": Interrupted}
    exec(compile("def vhs_raising(step, x0, x, total):\n    raise Interrupted()\n", VHS_POSIX, "exec"), namespace)
    vhs_raising = namespace["vhs_raising"]
    wrapped = IsolatedPreviewCallback(lambda *a: vhs_raising(*a), log=lambda m: None)
    with pytest.raises(Interrupted):
        wrapped(0, None, None, 1)
    assert not wrapped.previews_disabled


def test_without_fallback_isolated_steps_return_none():
    inner, _ = callback_through(VHS_POSIX)
    wrapped = IsolatedPreviewCallback(inner, log=lambda m: None)
    bad0, bad = latents(4, 8)
    assert wrapped(0, bad0, bad, 2) is None and wrapped(1, bad0, bad, 2) is None
    assert wrapped.failure.step == 0
