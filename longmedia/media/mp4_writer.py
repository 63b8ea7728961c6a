"""An mp4 written frame by frame as ComfyUI's stock `VideoFromComponents.save_to` writes it (CreateVideo +
SaveVideo): mp4 with faststart and metadata tags, h264 yuv420p (yuv420p10le at 10 bit), the same frame conversion, fps
as a 1/1000 fraction, AAC audio cut to the video's length and muxed chunk by chunk beside the video. PyAV is
imported when a writer is made.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import torch


class Mp4Writer:
    """An mp4 as stock `VideoFromComponents.save_to` writes it, fed frames as they are decoded."""

    def __init__(self, path: str, *, width: int, height: int, total_frames: int, fps: float, bit_depth: int,
                 crf: float | None, audio: dict | None, metadata: dict | None):
        import av

        self._av = av
        self.is_10bit = bit_depth >= 10
        self.pix_fmt = "yuv420p10le" if self.is_10bit else "yuv420p"
        self.frame_rate = Fraction(round(fps * 1000), 1000)
        # save_to's open: mp4 (named: the .partial name has no extension), faststart, metadata tags
        self.container = av.open(path, mode="w", format="mp4",
                                 options={"movflags": "use_metadata_tags+faststart"})
        for key, value in (metadata or {}).items():
            self.container.metadata[key] = json.dumps(value)
        self.video = self.container.add_stream("h264", rate=self.frame_rate)
        self.video.width, self.video.height, self.video.pix_fmt = width, height, self.pix_fmt
        if crf is not None:
            self.video.options = {"crf": str(crf)}
        self.audio_stream = None
        self.frames_written = 0
        self.samples_written = 0
        self.waveform = None
        if audio is not None:
            self.sample_rate = int(audio["sample_rate"])
            wave = audio["waveform"]
            self.waveform = wave[0, :, :math.ceil((self.sample_rate / self.frame_rate) * total_frames)]
            self.layout = {1: "mono", 2: "stereo", 6: "5.1"}.get(self.waveform.shape[0], "stereo")
            self.audio_stream = self.container.add_stream("aac", rate=self.sample_rate, layout=self.layout)

    def write_frames(self, frames: torch.Tensor) -> None:
        """Frames [n, H, W, 3] in [0, 1], converted as save_to converts them; then the audio up to their end."""
        av = self._av
        for frame in frames:
            if self.is_10bit:
                img = (frame.float() * 65535).clamp(0, 65535).cpu().numpy().astype("uint16")
                vf = av.VideoFrame.from_ndarray(img, format="rgb48le")
            else:
                img = (frame * 255).clamp(0, 255).byte().cpu().numpy()
                vf = av.VideoFrame.from_ndarray(img, format="rgb24")
            self.container.mux(self.video.encode(vf.reformat(format=self.pix_fmt)))
            self.frames_written += 1
        self._write_audio(math.ceil((self.sample_rate / self.frame_rate) * self.frames_written)
                          if self.waveform is not None else 0)

    def _write_audio(self, until: int) -> None:
        if self.waveform is None:
            return
        until = min(until, self.waveform.shape[1])
        if until <= self.samples_written:
            return
        piece = self.waveform[:, self.samples_written:until]
        af = self._av.AudioFrame.from_ndarray(piece.float().cpu().contiguous().numpy(), format="fltp",
                                              layout=self.layout)
        af.sample_rate = self.sample_rate
        af.pts = self.samples_written
        self.container.mux(self.audio_stream.encode(af))
        self.samples_written = until

    def finish(self) -> None:
        self.container.mux(self.video.encode(None))
        if self.audio_stream is not None:
            self._write_audio(self.waveform.shape[1])
            self.container.mux(self.audio_stream.encode(None))
        self.container.close()

    def abort(self) -> None:
        self.container.close()
