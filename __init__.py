"""LongMedia for ComfyUI: long MiniMax H3 video+audio on 8-24 GB GPUs.

ComfyUI imports this file when the pack sits in `custom_nodes/`. The nodes live in `nodes/`; the
ComfyUI-free core in `longmedia/`; the frontend extension in `web/`.
"""

WEB_DIRECTORY = "./web"

try:
    from .nodes import comfy_entrypoint  # noqa: F401
except ImportError as error:  # named: imported outside ComfyUI (pip install, tests): no node API
    if "comfy_api" not in str(error):
        raise

__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
