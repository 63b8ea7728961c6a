"""Fixtures for tests against a real ComfyUI checkout (LONGMEDIA_COMFYUI_ROOT).

Unset: every test under tests/comfyui is skipped and the summary says so loudly.
Set: `comfy_server` (session) is a running server with our pack, the test nodes and the tiny H3
checkpoints; `comfy_inprocess` (session) is ComfyUI's `comfy` package imported here on the CPU;
`tiny_checkpoints` maps variant -> checkpoint path; `sampler_env` (module) is the in-process sampler tests' tiny
patchers and modules.
"""

from __future__ import annotations

import os
from pathlib import Path

import harness  # this folder is on sys.path: pytest's rootdir-relative import of a folder without __init__.py
import pytest
import torch

HERE = Path(__file__).resolve().parent
SKIP_REASON = (f"{harness.ENV_VAR} is not set: real-ComfyUI tests skipped "
               f"(set {harness.ENV_VAR}=/path/to/ComfyUI to run them)")
_SKIPPED_KEY = pytest.StashKey[list]()


def _in_this_dir(item: pytest.Item) -> bool:
    return HERE in Path(item.path).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = None if os.environ.get(harness.ENV_VAR, "").strip() else pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if _in_this_dir(item):
            item.add_marker(pytest.mark.comfyui)
            if skip is not None:
                item.add_marker(skip)
                config.stash.setdefault(_SKIPPED_KEY, []).append(item.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    skipped = config.stash.get(_SKIPPED_KEY, [])
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} REAL-COMFYUI TESTS SKIPPED: {harness.ENV_VAR} IS NOT SET",
                                   yellow=True, bold=True)
        terminalreporter.write_line(SKIP_REASON)


@pytest.fixture(scope="session")
def comfyui_root() -> Path:
    root = harness.comfyui_root()
    if root is None:
        pytest.skip(SKIP_REASON)
    return root


@pytest.fixture(scope="session")
def comfy_inprocess(comfyui_root: Path):
    """ComfyUI's `comfy` package, imported from the checkout in this process with `--cpu` set (the checkout on
    sys.path for the session, through pytest's MonkeyPatch)."""
    with pytest.MonkeyPatch.context() as mp:
        yield harness.import_comfy_in_process(comfyui_root, mp)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from longmedia.testing.tiny_h3 import write_tiny_h3

    out = tmp_path_factory.mktemp("tiny_h3")
    return {v: write_tiny_h3(out, variant=v) for v in harness.TINY_VARIANTS}


@pytest.fixture(scope="session")
def comfy_server(comfyui_root: Path, tmp_path_factory: pytest.TempPathFactory):
    """A ComfyUI server (--cpu, 127.0.0.1, free port) over a temporary base directory; stopped at the end."""
    base = harness.prepare_base_directory(tmp_path_factory.mktemp("comfy_base"))
    server = harness.start_server(comfyui_root, base)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sampler_env(comfy_inprocess, tiny_checkpoints):
    """What the in-process sampler tests sample with (`harness.sampler_job`, `harness.run_longmedia`): the tiny fp32
    and int8 patchers under "models", LongMedia's sampler core under "core", ComfyUI's samplers, custom-sampler and
    H3 node modules. Module scope: each test module loads its own patchers."""
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy.passes import sampler as comfy_sampler

    models = {v: comfy.sd.load_diffusion_model(str(tiny_checkpoints[v])) for v in ("fp32", "int8")}
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "models": models, "core": comfy_sampler}


@pytest.fixture(scope="module", autouse=True)
def _inside_comfy_execution(comfy_execution_context):
    """Every test here, and every module fixture that samples, runs inside torch.inference_mode() as ComfyUI's
    execution.py runs nodes (a server test's own process is ComfyUI's, so it is there already)."""
    assert torch.is_inference_mode_enabled()
    yield


@pytest.fixture
def prefetch_seen(comfy_inprocess, monkeypatch):
    """What each model call hands ComfyUI's `make_prefetch_queue` as `prefetch_dynamic_vbars`, in a list, with the
    host's own value forced True as `_apply_model` sets it for a dynamic-VRAM patcher (the CPU host has none):
    `prefetch_seen.mark_dynamic(model_options)` adds that outer DIFFUSION_MODEL wrapper."""
    import comfy.model_prefetch
    import comfy.patcher_extension as ext

    real = comfy.model_prefetch.make_prefetch_queue

    def spy(queue, device, transformer_options):
        seen.append(transformer_options.get("prefetch_dynamic_vbars"))
        return real(queue, device, transformer_options)

    def as_if_dynamic(executor, x, timestep, context, transformer_options, *args, **kwargs):
        transformer_options["prefetch_dynamic_vbars"] = True
        return executor(x, timestep, context, transformer_options, *args, **kwargs)

    class Seen(list):
        def mark_dynamic(self, model_options: dict) -> None:
            ext.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "test_outer", as_if_dynamic, model_options,
                                     is_model_options=True)

    seen = Seen()  # read by spy() when a model call runs
    monkeypatch.setattr(comfy.model_prefetch, "make_prefetch_queue", spy)
    return seen
