"""LongMedia Retakes: the cache of finished segments a segmented Sampler reuses after a change (a retake)."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.comfy.retakes.cache import new_retake_cache
from ..longmedia.segments.retakes import DEFAULT_DISK_MB, DEFAULT_RAM_MB, MAX_CACHE_MB

Retakes = io.Custom("LONGMEDIA_RETAKES")


class LongMediaRetakes(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="LongMediaRetakes",
            display_name="LongMedia Retakes",
            category="LongMedia",
            description="Keeps a segmented job's finished segments. Change one segment's seed or prompt and queue "
                        "again: earlier segments are reused, that one and every later one sampled again; the result "
                        "equals a full rerun bit for bit.",
            inputs=[
                io.Int.Input("ram_mb", default=DEFAULT_RAM_MB, min=0, max=MAX_CACHE_MB, step=256,
                             tooltip="The most recent finished segments also kept in RAM, in MB (every segment is in "
                                     "ComfyUI's temp folder as well)."),
                io.Int.Input("disk_mb", default=DEFAULT_DISK_MB, min=0, max=MAX_CACHE_MB, step=1024,
                             tooltip="Finished segments kept in ComfyUI's temp folder, in MB, across queues and other "
                                     "prompts; past it the least recently used are dropped. Free model and node "
                                     "cache empties it."),
            ],
            outputs=[Retakes.Output(display_name="retakes", tooltip="For LongMedia Sampler's retakes input.")],
        )

    @classmethod
    def execute(cls, ram_mb, disk_mb) -> io.NodeOutput:
        return io.NodeOutput(new_retake_cache(ram_mb, disk_mb))
