"""Media, ComfyUI-free: decoded frames into a file (the sink a VAE writes its chunks into, the mp4 writer, the
encoder thread one chunk behind)."""
