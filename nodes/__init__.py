"""LongMedia's ComfyUI nodes (V3 schema): thin translations from UI inputs to one core call."""

from comfy_api.latest import ComfyExtension, io

from .sampler import LongMediaSampler


class LongMediaExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return [LongMediaSampler]


async def comfy_entrypoint() -> LongMediaExtension:
    return LongMediaExtension()
