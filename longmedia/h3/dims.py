"""Model dimensions of a MiniMax H3 transformer (full size and the tiny test sizes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class H3Dims:
    """Shape facts of an H3 DiT, as ComfyUI's model detection reads them from a state dict."""

    hidden: int = 5376
    heads: int = 56
    head_dim: int = 128
    ffn: int = 14336
    num_blocks: int = 50
    refiner_blocks: int = 2
    text_dim: int = 5120
    video_channels: int = 24
    audio_channels: int = 32
    rope_inv_freq_len: int = 16
    time_embed_dim: int = 2688

    @property
    def inner(self) -> int:
        """Attention width: heads x head_dim (7168 at full size, wider than hidden)."""
        return self.heads * self.head_dim

    @property
    def rot_dim(self) -> int:
        """Rotary prefix of each head: three axes x inv_freq_len x 2 (96 of 128 at full size)."""
        return 3 * self.rope_inv_freq_len * 2

    @property
    def block_params(self) -> int:
        """Parameters of one DiT block (linears, norms and its adaLN projection)."""
        h, i, f = self.hidden, self.inner, self.ffn
        linears = h * 3 * i + i * h + h * 2 * f + f * h
        adaln = self.time_embed_dim * 6 * h * 3 + 6 * h * 3
        norms = 2 * h + 2 * self.head_dim
        return linears + adaln + norms


H3_FULL = H3Dims()
