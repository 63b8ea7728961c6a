"""What a run installs on its clone of ComfyUI's patcher and guider (block replacement, attention override, final layer), and the residency boundary before it."""
