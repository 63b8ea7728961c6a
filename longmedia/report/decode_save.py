"""Decode & Save's report: what it wrote and what it held in RAM (JSON for the node's `report` output, kind
`decode_save`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

CHUNKED = "chunked"                 # the H3 VAE's temporal chunks stream into the writer
STOCK_DECODE = "stock_decode"       # named fallback: the VAE has no chunked io, VAE.decode holds the whole video


@dataclass(frozen=True)
class DecodeSaveReport:
    """What Decode & Save wrote and what it held in RAM (JSON for the node's `report` output)."""

    filename: str
    subfolder: str
    frames: int
    width: int
    height: int
    fps: float
    bit_depth: int
    crf: float
    decode_path: str                 # CHUNKED or STOCK_DECODE
    chunks: int                      # writes the decoder made (one per temporal chunk, plus the last overlap)
    largest_chunk_frames: int
    largest_chunk_bytes: int         # host bytes of the largest chunk of frames held at once
    whole_video_bytes: int           # what stock VAEDecode holds: every frame as float32 in RAM
    audio_samples: int               # per channel, after the cut to the video's length (0: no audio)
    audio_bytes: int                 # the decoded waveform, whole, in RAM during the decode
    seconds: float
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"kind": "decode_save"} | asdict(self) | {"notes": list(self.notes)}

    def summary_lines(self) -> list[str]:
        mib = 2 ** 20
        held = ("one chunk at a time" if self.decode_path == CHUNKED else "the whole video (stock decode fallback)")
        return [f"saved {self.subfolder + '/' if self.subfolder else ''}{self.filename}: {self.frames} frames "
                f"{self.width}x{self.height} at {self.fps:g} fps in {self.seconds:.1f} s",
                f"RAM held {held}: largest {self.largest_chunk_frames} frames = "
                f"{self.largest_chunk_bytes / mib:.0f} MiB (stock VAEDecode: {self.whole_video_bytes / mib:.0f} MiB); "
                f"audio {self.audio_bytes / mib:.1f} MiB", *self.notes]
