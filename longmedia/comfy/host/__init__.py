"""Facts read off the running ComfyUI: its features, its attention, its memory and pins, the LoRA patches it holds, the attention speeds measured on its device."""
