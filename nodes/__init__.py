"""LongMedia's ComfyUI nodes (V3 schema): thin translations from UI inputs to one core call."""

from comfy_api.latest import ComfyExtension, io

from ..longmedia.comfy.retakes.free_request import watch_free_requests
from .decode_save import LongMediaDecodeSave
from .hires import LongMediaHiRes
from .refiner import LongMediaRefiner
from .retakes import LongMediaRetakes
from .sampler import LongMediaSampler
from .setup import LongMediaSetup


class LongMediaExtension(ComfyExtension):
    async def on_load(self) -> None:
        watch_free_requests()   # ComfyUI's free-memory request clears the retake store

    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return [LongMediaSetup, LongMediaSampler, LongMediaHiRes, LongMediaRefiner, LongMediaDecodeSave,
                LongMediaRetakes]


async def comfy_entrypoint() -> LongMediaExtension:
    return LongMediaExtension()
