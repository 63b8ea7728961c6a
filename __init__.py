"""LongMedia for ComfyUI: long MiniMax H3 video+audio on 8-24 GB GPUs.

ComfyUI imports this file when the pack sits in `custom_nodes/`. The nodes live in `nodes/`; the
ComfyUI-free core in `longmedia/`; the frontend extension in `web/`.
"""

import importlib.util

WEB_DIRECTORY = "./web"
__all__ = ["WEB_DIRECTORY"]

# Outside ComfyUI (pip install, the CLI, pytest collecting this folder) there is no node API to register.
if importlib.util.find_spec("comfy_api") is not None:
    from .nodes import comfy_entrypoint  # noqa: F401

    __all__.append("comfy_entrypoint")
