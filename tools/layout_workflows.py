"""Lay out the example UI workflows (workflows/*.json): stage columns, one group per stage, model download info.

    python tools/layout_workflows.py

Re-runnable; it changes only layout and metadata, never a value or a link's ends:
* Setup lists `positive` before `negative` and keeps only the sockets its family uses (the frontend shows the
  same ones: frames for fl2va, reference slots up to one past the last connected one for ref2va), under their
  V3 dynamic names (family.first_frame, family.pictures.ref_image_1: nodes/setup.py's DynamicCombo and
  Autogrow groups; a flat name from an older file is renamed, its label keeping the short name);
* each node goes into its stage's column, stacked at its saved size (sizes come from the browser test:
  `LONGMEDIA_UPDATE_WORKFLOWS=1 pytest tests/comfyui/test_web_extension.py -k workflow_renders` writes the
  sizes the canvas computes), with a group around each stage;
* every loader carries `properties.models` (name, url, directory) for ComfyUI's missing-models panel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
HF = "https://huggingface.co/Comfy-Org/MiniMax-H3/resolve/main"   # the stock H3 templates' model repository
LOADER_DIRS = {"UNETLoader": "diffusion_models", "CLIPLoader": "text_encoders", "VAELoader": "vae"}
# stage -> node types, left to right; a stage whose types are in STAGE_ROW sits side by side, the rest stack
STAGES = (
    ("Models", ("UNETLoader", "CLIPLoader", "VAELoader", "MarkdownNote")),
    ("Prompt and pictures", ("CLIPTextEncode", "LoadImage")),
    ("Job", ("LongMediaSetup",)),
    ("Sampling settings", ("CFGGuider", "KSamplerSelect", "BasicScheduler", "RandomNoise", "LongMediaRetakes")),
    ("LongMedia stages", ("LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner")),
    ("Decode and save", ("VAEDecode", "VAEDecodeAudio", "CreateVideo", "SaveVideo", "LongMediaDecodeSave")),
)
STAGE_ROW = {"LongMedia stages"}
COLORS = ("#3f789e", "#8a8", "#a1309b", "#88a", "#b58b2a", "#444")
TITLE_PX, GAP_PX, PAD_PX, GROUP_TITLE_PX, COLUMN_GAP_PX = 30, 30, 12, 42, 70
FRAME_INPUTS = ("first_frame", "last_frame")
KINDS = ((("ref_image_",), 9), (("ref_video_", "ref_video_audio_"), 3), (("ref_audio_",), 3))
GROUPS = {"ref_image_": "pictures", "ref_video_": "videos", "ref_video_audio_": "video_audios", "ref_audio_": "audios"}


def dynamic_name(name: str) -> str | None:
    """Setup's V3 dynamic input name for a flat one (web/lib/setup_sockets.js dynamicName), else None."""
    if name in FRAME_INPUTS:
        return f"family.{name}"
    return next((f"family.{group}.{name}" for prefix, group in GROUPS.items()
                 if name.startswith(prefix) and name[len(prefix):].isdigit()), None)


def setup_sockets(family: str, linked: set[str]) -> set[str]:
    """Setup's frame/reference sockets shown for `family` (the web extension's setupSockets)."""
    if family == "fl2va":
        return set(FRAME_INPUTS)
    if family != "ref2va":
        return set()
    out = set()
    for prefixes, count in KINDS:
        last = max((int(n[len(p):]) for n in linked for p in prefixes
                    if n.startswith(p) and n[len(p):].isdigit()), default=0)
        out |= {f"{p}{i}" for i in range(1, min(count, last + 1) + 1) for p in prefixes}
    return out


def managed(name: str) -> bool:
    return name in FRAME_INPUTS or any(name.startswith(p) and name[len(p):].isdigit()
                                       for prefixes, _ in KINDS for p in prefixes)


def fix_setup(wf: dict) -> None:
    links = {link[0]: link for link in wf["links"]}
    for node in wf["nodes"]:
        if node["type"] != "LongMediaSetup":
            continue
        inputs = node["inputs"]
        for entry in inputs:
            if dynamic_name(entry["name"]):
                entry["label"] = entry["name"]
                entry["name"] = dynamic_name(entry["name"])
        by_name = {i["name"]: i for i in inputs}
        short = {i["name"]: i["name"].rsplit(".", 1)[-1] for i in inputs}
        linked = {short[i["name"]] for i in inputs if i.get("link") is not None}
        shown = setup_sockets(node["widgets_values"][3], linked) | {n for n in linked if managed(n)}
        head = [by_name[n] for n in ("positive", "negative") if n in by_name]
        rest = [i for i in inputs if i["name"] not in ("positive", "negative") and (not managed(short[i["name"]]) or
                                                                                    short[i["name"]] in shown)]
        node["inputs"] = head + rest
        for slot, entry in enumerate(node["inputs"]):
            if entry.get("link") is not None:
                links[entry["link"]][4] = slot


def add_models(wf: dict) -> None:
    for node in wf["nodes"]:
        folder = LOADER_DIRS.get(node["type"])
        if folder:
            name = node["widgets_values"][0]
            node.setdefault("properties", {})["models"] = [
                {"name": name, "url": f"{HF}/{folder}/{name}", "directory": folder}]


def layout(wf: dict) -> None:
    x = 0
    groups = []
    for index, (title, types) in enumerate(STAGES):
        nodes = sorted((n for n in wf["nodes"] if n["type"] in types),
                       key=lambda n: (types.index(n["type"]), n["id"]))
        if not nodes:
            continue
        top = GROUP_TITLE_PX + TITLE_PX
        y, right, bottom = top, x, top
        for node in nodes:
            node["pos"] = [x + PAD_PX, y]
            right = max(right, x + PAD_PX + node["size"][0])
            bottom = max(bottom, y + node["size"][1])
            if title in STAGE_ROW:
                x += node["size"][0] + GAP_PX + PAD_PX
            else:
                y += node["size"][1] + TITLE_PX + GAP_PX
        groups.append({"id": index + 1, "title": title, "color": COLORS[index], "font_size": 24, "flags": {},
                       "bounding": [x0 := (nodes[0]["pos"][0] - PAD_PX), GROUP_TITLE_PX - 6,
                                    right + PAD_PX - x0, bottom + PAD_PX - GROUP_TITLE_PX + 6]})
        x = right + PAD_PX + COLUMN_GAP_PX
    wf["groups"] = groups


def main() -> None:
    for path in sorted(WORKFLOWS.glob("*.json")):
        wf = json.loads(path.read_text(encoding="utf-8"))
        if "nodes" not in wf:
            continue   # an API prompt
        fix_setup(wf)
        add_models(wf)
        layout(wf)
        text = json.dumps(wf, indent=1, ensure_ascii=False) + "\n"
        path.write_text(re.sub(r"\[\s+(-?[\d.]+),\s+(-?[\d.]+)\s+\]", r"[\1, \2]", text), encoding="utf-8")
        print(f"laid out {path}")


if __name__ == "__main__":
    main()
