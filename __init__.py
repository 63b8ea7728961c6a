"""LongMedia for ComfyUI: long MiniMax H3 video+audio on 8-24 GB GPUs.

ComfyUI imports this file when the pack sits in `custom_nodes/`. The nodes live in `nodes/`; the
ComfyUI-free core in `longmedia/`; the frontend extension in `web/`.
"""

import importlib.util

WEB_DIRECTORY = "./web"
__all__ = ["WEB_DIRECTORY"]

# The oldest ComfyUI the pack runs on: the first with MiniMax H3 (and the V3 node API, comfy_api.latest).
MIN_COMFYUI = "0.33.0"

# Outside ComfyUI (pip install, the CLI, pytest collecting this folder) there is no node API to register.
if importlib.util.find_spec("comfy_api") is not None:
    try:
        from .nodes import comfy_entrypoint  # noqa: F401
    except ModuleNotFoundError as error:  # named: only a ComfyUI too old for the V3 node API is restated
        if error.name not in ("comfy_api.latest", "comfy_api.latest._io"):
            raise
        raise ImportError(f"LongMedia needs ComfyUI {MIN_COMFYUI} or newer (MiniMax H3 and the V3 node API); this "
                          f"ComfyUI has no {error.name}: update ComfyUI (git pull, or ComfyUI-Manager's "
                          "'Update ComfyUI') and restart it") from None

    __all__.append("comfy_entrypoint")
