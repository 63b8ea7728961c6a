"""LongMedia Decode & Save: the Sampler's AV latent decoded in the video VAE's own chunks and written to one mp4."""

from __future__ import annotations

import json

from comfy_api.latest import io, ui

from ..longmedia.comfy.decode_inputs import CRF_AUTO
from ..longmedia.comfy.decode_save import decode_and_save
from .report_output import REPORT_INDENT


class LongMediaDecodeSave(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="LongMediaDecodeSave",
            display_name="LongMedia Decode & Save",
            category="LongMedia",
            description="VAEDecode + VAEDecodeAudio + CreateVideo + SaveVideo in one step whose RAM does not grow "
                        "with the video's length: the H3 video VAE's own 17-frame chunks go straight into the mp4, "
                        "so RAM holds one chunk of frames, never the whole video (same pixels as VAEDecode).",
            inputs=[
                io.Latent.Input("latent", tooltip="The H3 AV latent from LongMedia Sampler, Hi-Res or Refiner "
                                                  "(video [1, 24, T, H/16, W/16] with its audio)."),
                io.Vae.Input("video_vae", tooltip="The H3 video VAE (Load VAE: minimax_h3_video_vae_fp16)."),
                io.Vae.Input("audio_vae", optional=True,
                             tooltip="The H3 audio VAE (Load VAE: minimax_h3_audio_vae_fp32); leave it "
                                     "unconnected for a file without sound."),
                io.String.Input("filename_prefix", default="video/LongMedia",
                                tooltip="File name in ComfyUI's output folder, as SaveVideo takes it (a folder "
                                        "before /, %date:yyyy-MM-dd% style fields); _00001_.mp4 is appended."),
                io.Int.Input("fps", default=24, min=1, max=120,
                               tooltip="Frames per second: 24 is H3's rate (the audio is generated for it)."),
                io.Int.Input("bit_depth", default=8, min=8, max=10, step=2, display_mode=io.NumberDisplay.number,
                             tooltip="8 plays everywhere; 10 keeps smoother gradients (as CreateVideo's bit_depth)."),
                io.Int.Input("crf", default=int(CRF_AUTO), min=-1, max=51, advanced=True, optional=True,
                               tooltip="-1 = the encoder's default, as SaveVideo's auto; else h264 CRF 0-51 "
                                       "(lower is better quality and a larger file)."),
            ],
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
            is_output_node=True,
            outputs=[
                io.Video.Output(display_name="video", tooltip="The saved file as ComfyUI's VIDEO (preview, "
                                                               "SaveVideo and video nodes take it)."),
                io.String.Output(display_name="report", tooltip="What was written and the RAM it held, as JSON."),
            ],
        )

    @classmethod
    def execute(cls, latent, video_vae, filename_prefix, fps, bit_depth, crf=CRF_AUTO,
                audio_vae=None) -> io.NodeOutput:
        result = decode_and_save(latent, video_vae, audio_vae, fps=fps, filename_prefix=filename_prefix,
                                 bit_depth=bit_depth, crf=crf, prompt=cls.hidden.prompt,
                                 extra_pnginfo=cls.hidden.extra_pnginfo)
        r = result.report
        saved = ui.PreviewVideo([ui.SavedResult(r.filename, r.subfolder, io.FolderType.output)])
        return io.NodeOutput(result.video, json.dumps(r.to_dict(), indent=REPORT_INDENT),
                             ui=saved.as_dict() | {"longmedia_decode": [r.to_dict() | {"summary": r.summary_lines()}]})
