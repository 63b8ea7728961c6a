"""The newcomer's path through the README is true (issue 47): the clone command names this pack's repository,
step 4 says where each shipped workflow takes its prompt, a CPU-only torch line stands beside the torch note, and
the "Supported ComfyUI" table speaks to users (no model internals)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start:end if end > 0 else None]


def step(n: int) -> str:
    steps = section("## Your first video")
    return steps[steps.index(f"\n{n}. "):steps.index(f"\n{n + 1}. ") if f"\n{n + 1}. " in steps else None]


def test_step_1_clones_this_pack_from_its_repository():
    url = re.search(r'^Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"git clone {url}" in step(1), step(1)


def prompt_place(workflow: dict) -> str:
    """Where a UI graph takes its prompt: 'Prompt' (a CLIPTextEncode titled Prompt feeding Setup's positive) or
    'Setup' (the CLIP connected to Setup, the prompt in its prompt or segment_prompts box)."""
    nodes = {n["id"]: n for n in workflow["nodes"]}
    setup = next(n for n in workflow["nodes"] if n["type"] == "LongMediaSetup")
    linked = {i["name"]: i["link"] for i in setup.get("inputs", []) if i.get("link") is not None}
    if "clip" in linked:
        return "Setup"
    source = next(link[1] for link in workflow["links"] if link[0] == linked["positive"])
    assert nodes[source]["type"] == "CLIPTextEncode" and nodes[source].get("title") == "Prompt"
    return "Prompt"


def test_step_4_says_where_every_shipped_workflow_takes_its_prompt():
    text = " ".join(step(4).split())
    places = {path.stem: prompt_place(json.loads(path.read_text()))
              for path in sorted((ROOT / "workflows").glob("*.json")) if not path.name.endswith(".api.json")}
    assert "Prompt" in places.values() and "Setup" in places.values()
    assert "in the node titled **Prompt**" in text, text
    for name, place in places.items():
        named = f"`{name}`" in text
        assert named == (place == "Setup"), (name, place, text)
    assert "Setup's `prompt` or `segment_prompts`" in text


def test_a_cpu_only_torch_line_stands_beside_the_torch_note():
    note = README[:README.index("```bash")]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in note
    assert "CI installs the CPU build of torch first" in " ".join(note.split())


def test_the_supported_comfyui_table_speaks_to_users():
    table = [line for line in section("## Supported ComfyUI").splitlines() if line.startswith("|")]
    assert len(table) >= 4, table
    internals = re.compile(r"PDD|malloc|modulation|VSA|BlockSparseAttention|snapshot|comfy-kitchen|comfy-aimdo|"
                           r"tests/|overlay", re.I)
    assert not [line for line in table if internals.search(line)], table
