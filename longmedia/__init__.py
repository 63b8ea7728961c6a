"""LongMedia core: ComfyUI-free planning and exact streamed execution for MiniMax H3.

Only `longmedia.comfy` talks to ComfyUI (plain `import comfy...` inside functions); every other floor
imports with ComfyUI absent. `docs/ARCHITECTURE.md` names the floors and what may import what.
"""

__version__ = "0.1.0"
