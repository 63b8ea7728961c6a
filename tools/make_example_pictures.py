"""Draw the two reference pictures workflows/ref2va_hires_refiner.json loads (workflows/input/*.png).

    python tools/make_example_pictures.py

They are plain drawings (a figure, a market street) so the workflow opens and runs without a download;
copy them into ComfyUI's input/ folder, or pick your own pictures in the Load Image nodes.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parents[1] / "workflows" / "input"
SIZE = (256, 320)


def person() -> Image.Image:
    img = Image.new("RGB", SIZE, (214, 226, 236))
    d = ImageDraw.Draw(img)
    d.ellipse((98, 40, 158, 104), fill=(232, 190, 160))                 # face
    d.pieslice((92, 30, 164, 100), 180, 360, fill=(70, 40, 30))         # hair
    d.rounded_rectangle((78, 108, 178, 250), 24, fill=(200, 60, 70))    # dress
    d.rectangle((96, 250, 116, 312), fill=(232, 190, 160))               # legs
    d.rectangle((140, 250, 160, 312), fill=(232, 190, 160))
    return img


def market() -> Image.Image:
    img = Image.new("RGB", SIZE, (250, 206, 140))                       # golden-hour sky
    d = ImageDraw.Draw(img)
    d.rectangle((0, 200, 256, 320), fill=(150, 120, 90))                # street
    for i, colour in enumerate(((220, 70, 60), (60, 150, 90), (240, 180, 40), (70, 110, 200))):
        x = 8 + i * 62
        d.polygon([(x, 150), (x + 28, 120), (x + 56, 150)], fill=colour)  # awnings
        d.rectangle((x + 4, 150, x + 52, 210), fill=(120, 80, 50))      # stalls
        for j in range(3):
            d.ellipse((x + 8 + j * 14, 160, x + 20 + j * 14, 172), fill=(240 - 40 * j, 120 + 40 * j, 40))
    return img


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, draw in (("longmedia_ref_person.png", person), ("longmedia_ref_market.png", market)):
        draw().save(OUT / name, optimize=True)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
