"""LongMedia core: ComfyUI-free planning and exact streamed execution for MiniMax H3.

Nothing here imports ComfyUI at module level; the adapters that talk to ComfyUI
import `comfy` lazily inside functions.
"""

__version__ = "0.1.0"
