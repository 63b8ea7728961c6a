"""Generate docs/PARAMETERS.md from the LongMedia nodes' V3 schemas, without a ComfyUI server.

    LONGMEDIA_COMFYUI_ROOT=/path/to/ComfyUI python -m tools.gen_parameters           # write the doc
    LONGMEDIA_COMFYUI_ROOT=/path/to/ComfyUI python -m tools.gen_parameters --check   # exit 1 when it is stale

ComfyUI is imported in-process from the checkout (CPU), the pack is loaded as a package the way
ComfyUI loads a custom node, and every node of its extension is read through `define_schema()`:
inputs (name, type, default, range or options, tooltip, optional / advanced) and outputs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC_PATH = REPO_ROOT / "docs" / "PARAMETERS.md"
ENV_VAR = "LONGMEDIA_COMFYUI_ROOT"
CHILD_MARK = "LONGMEDIA_GEN_PARAMETERS_CHILD"  # set in the child that main starts with the checkout on PYTHONPATH
PACK_MODULE = "longmedia_pack_schema"   # the name the pack is imported under here
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")


class ComfyUIRootError(ValueError):
    """The ComfyUI checkout to import is missing or is not a checkout."""


@dataclass(frozen=True)
class InputDoc:
    name: str
    type: str
    default: str
    range: str
    tooltip: str
    optional: bool
    advanced: bool
    spec: tuple   # (type, sorted as_dict items): two nodes share an input only when these match

    @property
    def flags(self) -> str:
        return ", ".join(f for f, on in (("optional", self.optional), ("advanced", self.advanced)) if on) or "required"


@dataclass(frozen=True)
class OutputDoc:
    name: str
    type: str
    tooltip: str


@dataclass(frozen=True)
class NodeDoc:
    node_id: str
    display_name: str
    category: str
    description: str
    inputs: tuple[InputDoc, ...]
    outputs: tuple[OutputDoc, ...]


def comfyui_root(value: str | None) -> Path:
    """The checkout to import: --comfyui-root, else $LONGMEDIA_COMFYUI_ROOT."""
    value = (value or os.environ.get(ENV_VAR, "")).strip()
    if not value:
        raise ComfyUIRootError(f"no ComfyUI checkout given: pass --comfyui-root or set {ENV_VAR}=/path/to/ComfyUI "
                               "(the directory holding ComfyUI's main.py)")
    root = Path(value).expanduser().resolve()
    if not (root / "main.py").is_file() or not (root / "comfy").is_dir():
        raise ComfyUIRootError(f"ComfyUI root {value!r} is not a ComfyUI checkout (no main.py and comfy/ there): "
                               "point it at the directory holding ComfyUI's main.py")
    return root


def import_comfyui(root: Path) -> None:
    """ComfyUI's packages, imported from `root` (already on the import path: `main` runs itself again with it on
    PYTHONPATH, tests through pytest's MonkeyPatch), on the CPU."""
    from bench.cards.comfy_process import comfy_importable_from

    if not comfy_importable_from(str(root)):
        raise ComfyUIRootError(f"`comfy` is not imported from {root} in this process: run `python -m "
                               "tools.gen_parameters` from the repository root (it puts the checkout on PYTHONPATH)")
    from comfy.cli_args import args

    args.cpu = True


def load_pack():
    """The pack's root package, imported as ComfyUI imports a custom node folder."""
    if PACK_MODULE in sys.modules:
        return sys.modules[PACK_MODULE]
    spec = importlib.util.spec_from_file_location(PACK_MODULE, REPO_ROOT / "__init__.py",
                                                  submodule_search_locations=[str(REPO_ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACK_MODULE] = module
    spec.loader.exec_module(module)
    return module


def node_classes(pack) -> list:
    async def collect():
        extension = await pack.comfy_entrypoint()
        return list(await extension.get_node_list())
    return asyncio.run(collect())


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    text = str(value)
    return f"`{text}`" if text else '`""`'


def _range(io_type: str, d: dict) -> str:
    if "options" in d:
        return " / ".join(f"`{o}`" for o in d["options"])
    if io_type in ("INT", "FLOAT") and ("min" in d or "max" in d):
        text = f"{_number(d.get('min', '-inf'))} .. {_number(d.get('max', 'inf'))}"
        return text + (f", step {_number(d['step'])}" if "step" in d else "")
    if io_type == "STRING":
        return "text, multiline" if d.get("multiline") else "text"
    if io_type == "BOOLEAN":
        return "true / false"
    return "" if io_type in WIDGET_TYPES else "connection"


def input_doc(inp) -> InputDoc:
    d = inp.as_dict()
    io_type = inp.get_io_type()
    return InputDoc(name=inp.id, type=io_type, default=_value(d.get("default")), range=_range(io_type, d),
                    tooltip=d.get("tooltip") or "", optional=bool(d.get("optional")), advanced=bool(d.get("advanced")),
                    spec=(io_type, tuple(sorted((k, repr(v)) for k, v in d.items()))))


def input_docs(inp) -> list[InputDoc]:
    """One row per input; a V3 DynamicCombo gives its combo row and a row per input of each option (named as
    API prompts name them, family.first_frame), an Autogrow group one row for all its names."""
    if inp.get_io_type() != "COMFY_DYNAMICCOMBO_V3":
        return [input_doc(inp)]
    keys = [option.key for option in inp.options]
    combo = input_doc(inp)
    rows = [replace(combo, type="COMBO (dynamic)", default=_value(keys[0]), range=" / ".join(f"`{k}`" for k in keys))]
    for option in inp.options:
        for sub in option.inputs:
            template = getattr(sub, "template", None)
            if template is None:
                doc = input_doc(sub)
                rows.append(replace(doc, name=f"{inp.id}.{sub.id}", range=f"{doc.range}; {option.key} only"))
                continue
            doc = input_doc(template.input)
            names = template.names
            rows.append(replace(doc, name=f"{inp.id}.{sub.id}.{names[0]} .. {names[-1]}", optional=True,
                                range=f"{doc.range}; {option.key} only; one more appears as each is connected"))
    return rows


def node_doc(cls) -> NodeDoc:
    schema = cls.define_schema()
    outputs = tuple(OutputDoc(name=o.display_name or o.id or o.io_type, type=o.io_type, tooltip=o.tooltip or "")
                    for o in schema.outputs or ())
    return NodeDoc(node_id=schema.node_id, display_name=schema.display_name or schema.node_id,
                   category=schema.category or "", description=schema.description or "",
                   inputs=tuple(d for i in schema.inputs or () for d in input_docs(i)), outputs=outputs)


def shared_controls(nodes: list[NodeDoc], names: tuple[str, ...]) -> tuple[tuple[InputDoc, ...], tuple[str, ...]]:
    """The memory and attention controls, and the nodes that carry all of them unchanged."""
    holders = [n for n in nodes if all(name in {i.name for i in n.inputs} for name in names)]
    if len(holders) < 2:
        return (), ()
    first = {i.name: i for i in holders[0].inputs}
    same = [n for n in holders if all(first[i.name].spec == i.spec for i in n.inputs if i.name in names)]
    return tuple(first[name] for name in names), tuple(n.node_id for n in same)


def _cell(text: str) -> str:
    """One line of table text: pipes escaped, <Picture 1>-style placeholders kept visible."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _input_table(inputs) -> list[str]:
    rows = ["| input | type | default | range / options | when | what it does |", "|---|---|---|---|---|---|"]
    rows += [f"| `{i.name}` | {i.type} | {_cell(i.default)} | {_cell(i.range)} | {i.flags} | {_cell(i.tooltip)} |"
             for i in inputs]
    return rows


def render(nodes: list[NodeDoc], shared_names: tuple[str, ...]) -> str:
    shared, sharing = shared_controls(nodes, shared_names)
    by_id = {n.node_id: n for n in nodes}
    out = ["# Parameter reference", "",
           "Generated by `tools/gen_parameters.py` from each LongMedia node's `define_schema()`; do not edit by hand.",
           f"Regenerate with `{ENV_VAR}=/path/to/ComfyUI python -m tools.gen_parameters`;",
           "`tests/comfyui/test_parameters_live.py` fails when this file is stale.", "",
           "Advanced inputs are behind the node's *Show Advanced* toggle; the LongMedia web extension also shows the",
           "manual VRAM controls once `memory_mode` is not `auto`, and the `sol_*` schedule once `attention_mode` is",
           "`sol` or `scheduled_sol`. Optional inputs may be left out of API prompts (their default applies).", "",
           "Nodes: " + ", ".join(f"[{n.display_name}](#{n.node_id.lower()})" for n in nodes), ""]
    if shared:
        out += ["## Memory and attention controls", "",
                "Identical on " + ", ".join(f"{by_id[i].display_name} (`{i}`)" for i in sharing) + ".", ""]
        out += _input_table(shared) + [""]
    for n in nodes:
        own = [i for i in n.inputs if not (n.node_id in sharing and i.name in shared_names)]
        out += [f'<a id="{n.node_id.lower()}"></a>', f"## {n.display_name} (`{n.node_id}`)", "",
                f"Category `{n.category}`. {_cell(n.description)}", "", "### Inputs", ""]
        out += _input_table(own)
        if n.node_id in sharing:
            out += ["", "Plus the [memory and attention controls](#memory-and-attention-controls)."]
        out += ["", "### Outputs", "", "| output | type | what it is |", "|---|---|---|"]
        out += [f"| `{o.name}` | {o.type} | {_cell(o.tooltip)} |" for o in n.outputs]
        out.append("")
    return "\n".join(out)


def generate(root: Path) -> str:
    """The reference as it follows from the nodes' current schemas."""
    import_comfyui(root)
    pack = load_pack()
    controls = importlib.import_module(f"{PACK_MODULE}.nodes.controls")
    names = tuple(i.id for i in controls.memory_inputs())
    return render([node_doc(cls) for cls in node_classes(pack)], names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui-root", help=f"ComfyUI checkout (default ${ENV_VAR})")
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="where to write (default docs/PARAMETERS.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from a fresh generation")
    args = parser.parse_args(argv)
    try:
        root = comfyui_root(args.comfyui_root)
    except ComfyUIRootError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from bench.cards.comfy_process import rerun_with_comfy

    code = rerun_with_comfy("tools.gen_parameters", str(root), argv, CHILD_MARK)
    if code is not None:
        return code
    try:
        text = generate(root)
    except ComfyUIRootError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m tools.gen_parameters", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
