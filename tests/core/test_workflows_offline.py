"""The example workflows validate offline: every UI graph and API prompt in workflows/ against the node schemas.

Schemas: the stock nodes' /object_info from a real ComfyUI (`tests/data/stock_object_info_h3.json`, copied from the
snapshot's `GET /object_info` for the nodes an H3 workflow uses) and
ours (`tests/data/longmedia_object_info.json`, checked against a live server by
tests/comfyui/test_workflows_api.py). Checked: class names, input names, required inputs, link targets
and types, INT/FLOAT ranges, combo values (file lists are free), widget counts of UI nodes, that each UI
graph converts to its API twin, and that Setup's values make a valid job (`plan_setup`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from longmedia.job.setup_plan import SetupRequest, plan_setup

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / "workflows"
STOCK_SCHEMAS = REPO / "tests" / "data" / "stock_object_info_h3.json"
OUR_SCHEMAS = REPO / "tests" / "data" / "longmedia_object_info.json"
EXAMPLES = ("t2va_10s", "ref2va_hires_refiner", "t2va_30s_segmented", "t2va_60s_long", "t2va_story_retake",
            "t2va_10s_turbo", "t2va_60s_long_turbo")
LONG_EXAMPLES = ("t2va_30s_segmented", "t2va_60s_long", "t2va_60s_long_turbo")
TURBO_EXAMPLES = ("t2va_10s_turbo", "t2va_60s_long_turbo")
TURBO_LORA = "minimax_h3_turbo_lora.safetensors"   # stands for the turbo LoRA file the user downloads (README)
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "COMFY_DYNAMICCOMBO_V3"}
FRONTEND_ONLY = {"Note", "MarkdownNote"}    # UI-only nodes: no backend class, dropped from API prompts
FREE_COMBOS = ("image_upload", "audio_upload", "video_upload")
MODEL_FILE_INPUTS = ("unet_name", "clip_name", "vae_name", "ckpt_name", "model_name", "lora_name")
MODEL_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth", ".gguf", ".sft")


@pytest.fixture(scope="module")
def schemas() -> dict:
    return {**json.loads(STOCK_SCHEMAS.read_text()), **json.loads(OUR_SCHEMAS.read_text())}


def load(name: str) -> dict:
    return json.loads((WORKFLOWS / name).read_text())


# --- schema helpers ---------------------------------------------------------------------------------------------

def input_spec(schema: dict, name: str, values: dict | None = None):
    """(type, options dict, section) of one input, or None. A dotted name (family.pictures.ref_image_1) is a V3
    dynamic input: it exists when `values` selects the DynamicCombo option that holds it (ComfyUI's
    get_finalized_class_inputs); an Autogrow group's inputs are its template's names."""
    if "." in name:
        return dynamic_spec(schema["input"], name.split("."), values or {}, "")
    for section in ("required", "optional"):
        entry = schema["input"].get(section, {}).get(name)
        if entry is not None:
            kind = "COMBO" if isinstance(entry[0], list) else entry[0]
            opts = dict(entry[1]) if len(entry) > 1 else {}
            if isinstance(entry[0], list):
                opts["options"] = entry[0]
            return kind, opts, section
    return None


def dynamic_spec(inputs: dict, parts: list[str], values: dict, prefix: str):
    for section in ("required", "optional"):
        entry = inputs.get(section, {}).get(parts[0])
        if entry is None or len(parts) < 2:
            continue
        path = f"{prefix}{parts[0]}"
        if entry[0] == "COMFY_DYNAMICCOMBO_V3":
            option = next((o for o in entry[1]["options"] if o["key"] == values.get(path)), None)
            if option is not None:
                return input_spec({"input": option["inputs"]}, parts[1]) if len(parts) == 2 else \
                    dynamic_spec(option["inputs"], parts[1:], values, f"{path}.")
        if entry[0] == "COMFY_AUTOGROW_V3" and len(parts) == 2 and parts[1] in entry[1]["template"]["names"]:
            (kind, opts), = [v for sec in entry[1]["template"]["input"].values() for v in sec.values()]
            return kind, dict(opts), "optional"
    return None


def ordered_inputs(schema: dict) -> list[tuple[str, str, dict, str]]:
    order = schema.get("input_order") or {s: list(schema["input"].get(s, {})) for s in ("required", "optional")}
    return [(n, *input_spec(schema, n)) for s in ("required", "optional") for n in order.get(s, [])]


def is_widget(kind: str, opts: dict) -> bool:
    return kind in WIDGET_TYPES and not opts.get("forceInput")


def combo_options(kind: str, opts: dict) -> list:
    if kind == "COMFY_DYNAMICCOMBO_V3":
        return [o["key"] for o in opts["options"]]
    return list(opts.get("options", []))


def value_errors(where: str, kind: str, opts: dict, value, name: str = "") -> list[str]:
    if kind in ("INT", "FLOAT"):
        ok = isinstance(value, int) if kind == "INT" else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            return [f"{where}: {value!r} is not {kind}"]
        low, high = opts.get("min", float("-inf")), opts.get("max", float("inf"))
        return [] if low <= value <= high else [f"{where}: {value!r} outside [{low}, {high}]"]
    if kind == "STRING":
        return [] if isinstance(value, str) else [f"{where}: {value!r} is not a string"]
    if kind == "BOOLEAN":
        return [] if isinstance(value, bool) else [f"{where}: {value!r} is not a boolean"]
    options = combo_options(kind, opts)
    if name in MODEL_FILE_INPUTS and value not in options:                # model lists: what the user downloaded
        return [] if isinstance(value, str) and value.endswith(MODEL_SUFFIXES) else \
            [f"{where}: {value!r} is not a model file name"]
    if not options or any(opts.get(k) for k in FREE_COMBOS):             # upload lists: whatever the user has

        return [] if isinstance(value, str) and value else [f"{where}: {value!r} is not a file name"]
    return [] if value in options else [f"{where}: {value!r} not in {options[:8]}..."]


def validate_api(prompt: dict, schemas: dict) -> list[str]:
    """Everything ComfyUI's /prompt validation would refuse, without a server."""
    errors = []
    for nid, node in prompt.items():
        ctype, inputs = node.get("class_type"), node.get("inputs", {})
        schema = schemas.get(ctype)
        if schema is None:
            errors.append(f"node {nid}: unknown class_type {ctype!r}")
            continue
        for name, _, _, section in ordered_inputs(schema):
            if section == "required" and name not in inputs:
                errors.append(f"node {nid} {ctype}: required input {name!r} missing")
        for name, value in inputs.items():
            spec = input_spec(schema, name, inputs)
            where = f"node {nid} {ctype}.{name}"
            if spec is None:
                errors.append(f"{where}: no such input")
                continue
            kind, opts, _ = spec
            if isinstance(value, list):
                errors += link_errors(where, kind, value, prompt, schemas)
            elif not is_widget(kind, opts):
                errors.append(f"{where}: a {kind} input needs a link, got {value!r}")
            else:
                errors += value_errors(where, kind, opts, value, name)
    if not any(schemas.get(n.get("class_type"), {}).get("output_node") for n in prompt.values()):
        errors.append("no output node")
    return errors + cycle_errors(prompt)


def link_errors(where: str, kind: str, link: list, prompt: dict, schemas: dict) -> list[str]:
    if len(link) != 2 or not isinstance(link[0], str) or not isinstance(link[1], int):
        return [f"{where}: malformed link {link!r}"]
    source = prompt.get(link[0])
    if source is None:
        return [f"{where}: links to missing node {link[0]}"]
    outputs = schemas.get(source["class_type"], {}).get("output", [])
    if not 0 <= link[1] < len(outputs):
        return [f"{where}: output {link[1]} of {source['class_type']} does not exist"]
    out_kind = outputs[link[1]]
    if kind != out_kind and "*" not in (kind, out_kind) and out_kind not in kind.split(","):
        return [f"{where}: expects {kind}, gets {out_kind} from node {link[0]}"]
    return []


def cycle_errors(prompt: dict) -> list[str]:
    state: dict[str, int] = {}

    def visit(nid: str) -> bool:
        if state.get(nid) == 1:
            return True
        if state.get(nid) == 2 or nid not in prompt:
            return False
        state[nid] = 1
        found = any(visit(v[0]) for v in prompt[nid].get("inputs", {}).values() if isinstance(v, list) and v)
        state[nid] = 2
        return found

    return ["the graph has a cycle"] if any(visit(n) for n in list(prompt)) else []


def ui_widget_slots(schema: dict) -> list[tuple[str | None, str, dict]]:
    """The UI's widgets_values layout: widget inputs in order, plus the frontend's extra control values."""
    slots = []
    for name, kind, opts, _ in ordered_inputs(schema):
        if is_widget(kind, opts):
            slots.append((name, kind, opts))
            if opts.get("control_after_generate"):
                slots.append((None, "control_after_generate", {}))
            if any(opts.get(k) for k in FREE_COMBOS):
                slots.append((None, "upload", {}))
    return slots


def ui_to_api(workflow: dict, schemas: dict) -> dict:
    """The API prompt the UI graph queues (frontend-only notes dropped, bypassed/muted nodes refused)."""
    links = {lk[0]: lk for lk in workflow["links"]}
    prompt = {}
    for node in workflow["nodes"]:
        if node["type"] in FRONTEND_ONLY:
            continue
        assert node.get("mode", 0) == 0, f"node {node['id']} is muted or bypassed"
        schema = schemas[node["type"]]
        inputs = {}
        values = iter(node.get("widgets_values", []))
        for name, _, _ in ui_widget_slots(schema):
            value = next(values)
            if name is not None:
                inputs[name] = value
        for slot in node.get("inputs", []):
            if slot.get("link") is not None:
                _, src, out, *_ = links[slot["link"]]
                inputs[slot["name"]] = [str(src), out]
        order = [n for n, *_ in ordered_inputs(schema)]
        inputs = {k: inputs[k] for k in sorted(inputs, key=lambda k: order.index(k) if k in order else len(order))}
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs,
                                   "_meta": {"title": node.get("title") or schema["display_name"]}}
    return prompt


def validate_ui(workflow: dict, schemas: dict) -> list[str]:
    errors = []
    nodes = {n["id"]: n for n in workflow["nodes"]}
    if len(nodes) != len(workflow["nodes"]):
        errors.append("duplicate node ids")
    if workflow.get("last_node_id", 0) < max(nodes):
        errors.append("last_node_id below a node id")
    if workflow["links"] and workflow.get("last_link_id", 0) < max(lk[0] for lk in workflow["links"]):
        errors.append("last_link_id below a link id")
    for lid, src, out, dst, slot, kind in workflow["links"]:
        if src not in nodes or dst not in nodes:
            errors.append(f"link {lid}: missing node")
            continue
        target = nodes[dst]["inputs"]
        if slot >= len(target) or target[slot].get("link") != lid:
            errors.append(f"link {lid}: node {dst} input {slot} does not point back")
        outputs = nodes[src]["outputs"]
        if out >= len(outputs) or lid not in (outputs[out].get("links") or []):
            errors.append(f"link {lid}: node {src} output {out} does not list it")
        elif outputs[out]["type"] != kind or (slot < len(target) and target[slot]["type"] != kind):
            errors.append(f"link {lid}: type {kind} differs from its ends")
    for node in workflow["nodes"]:
        if node["type"] in FRONTEND_ONLY:
            continue
        schema = schemas.get(node["type"])
        if schema is None:
            errors.append(f"node {node['id']}: unknown type {node['type']!r}")
            continue
        expected = len(ui_widget_slots(schema))
        if len(node.get("widgets_values", [])) != expected:
            errors.append(f"node {node['id']} {node['type']}: {len(node['widgets_values'])} widget values, "
                          f"expected {expected}")
        if [o["type"] for o in node["outputs"]] != schema["output"]:
            errors.append(f"node {node['id']} {node['type']}: outputs differ from the schema")
        values = dict(zip([n for n, *_ in ui_widget_slots(schema)], node.get("widgets_values", [])))
        for slot in node.get("inputs", []):
            spec = input_spec(schema, slot["name"], values)
            if spec is None or (spec[0] != slot["type"] and not is_widget(spec[0], spec[1])):
                errors.append(f"node {node['id']} {node['type']}: input {slot['name']!r} not in the schema")
    return errors


# --- the examples -----------------------------------------------------------------------------------------------

def test_every_example_has_a_ui_graph_and_an_api_prompt():
    names = sorted(p.name for p in WORKFLOWS.glob("*.json"))
    assert names == sorted([f"{e}.json" for e in EXAMPLES] + [f"{e}.api.json" for e in EXAMPLES])


@pytest.mark.parametrize("example", EXAMPLES)
def test_api_prompt_validates(schemas, example):
    assert validate_api(load(f"{example}.api.json"), schemas) == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_ui_graph_validates_and_queues_its_api_prompt(schemas, example):
    ui = load(f"{example}.json")
    assert validate_ui(ui, schemas) == []
    assert ui_to_api(ui, schemas) == load(f"{example}.api.json")


def nodes_of(prompt: dict, ctype: str) -> list[dict]:
    return [n["inputs"] for n in prompt.values() if n["class_type"] == ctype]


def setup_plan(prompt: dict):
    (setup,) = nodes_of(prompt, "LongMediaSetup")
    refs = {k.rsplit(".", 1)[-1]: v for k, v in setup.items() if k.startswith("family.") and isinstance(v, list)}
    from longmedia.job.setup_plan import MediaInput

    media = tuple(MediaInput(k, "picture", 1024, 1024) for k in refs)
    return plan_setup(SetupRequest(
        setup["width"], setup["height"], setup["seconds"], family=setup["family"],
        reference_budget=setup["reference_budget"], segment_seconds=setup["segment_seconds"],
        context_frames=setup["context_frames"], ref_image_size=setup.get("ref_image_size", "match"),
        prompt_tokens=80, conditioning="clip" if "clip" in setup else "positive", references=media,
        have_vae="vae" in setup, have_audio_vae="audio_vae" in setup))


@pytest.mark.parametrize("example", EXAMPLES)
def test_examples_use_stock_loaders_and_our_nodes(example):
    prompt = load(f"{example}.api.json")
    (unet,) = nodes_of(prompt, "UNETLoader")
    (clip,) = nodes_of(prompt, "CLIPLoader")
    assert unet["unet_name"].startswith("minimax_h3_") and clip["type"] == "minimax"
    assert len(nodes_of(prompt, "VAELoader")) == 2 and not nodes_of(prompt, "SamplerCustomAdvanced")
    (sampler,) = nodes_of(prompt, "LongMediaSampler")
    setup_id = next(k for k, n in prompt.items() if n["class_type"] == "LongMediaSetup")
    assert sampler["latent"] == [setup_id, 2] and sampler["job"] == [setup_id, 3]
    assert nodes_of(prompt, "SaveVideo") or nodes_of(prompt, "LongMediaDecodeSave")


@pytest.mark.parametrize("example", LONG_EXAMPLES)
def test_the_long_examples_run_every_stage_on_the_job_and_save_through_bounded_decode(example):
    """A long job: Sampler -> Hi-Res -> Refiner, each given Setup's job (segment by segment), ending in LongMedia
    Decode & Save (RAM of one chunk) fed by the Refiner and both H3 VAEs."""
    prompt = load(f"{example}.api.json")
    setup_id = next(k for k, n in prompt.items() if n["class_type"] == "LongMediaSetup")
    (sampler,), (hires,), (refiner,) = (nodes_of(prompt, t) for t in ("LongMediaSampler", "LongMediaHiRes",
                                                                       "LongMediaRefiner"))
    assert sampler["job"] == hires["job"] == refiner["job"] == [setup_id, 3]
    assert prompt[hires["latent"][0]]["class_type"] == "LongMediaSampler"
    assert prompt[refiner["latent"][0]]["class_type"] == "LongMediaHiRes" and hires["scale"] == 1.25
    (save,) = nodes_of(prompt, "LongMediaDecodeSave")
    loaders = {k: n["inputs"]["vae_name"] for k, n in prompt.items() if n["class_type"] == "VAELoader"}
    assert "video_vae" in loaders[save["video_vae"][0]] and "audio_vae" in loaders[save["audio_vae"][0]]
    assert prompt[save["latent"][0]]["class_type"] == "LongMediaRefiner" and save["fps"] == 24.0
    assert not nodes_of(prompt, "VAEDecode") and not nodes_of(prompt, "SaveVideo")
    assert example in save["filename_prefix"]


@pytest.mark.parametrize("example", TURBO_EXAMPLES)
def test_turbo_examples_are_their_base_with_a_lora_8_steps_and_cfg_1(example):
    """The turbo twin of an example: stock LoraLoaderModelOnly between the model loader and everything that used it,
    8 steps, cfg 1 (one model call a step), its LoRA named with its folder in the loader's properties; nothing else
    changed but the output's prefix."""
    base = example.removesuffix("_turbo")
    prompt, before = load(f"{example}.api.json"), load(f"{base}.api.json")
    (lora_id,) = [k for k, n in prompt.items() if n["class_type"] == "LoraLoaderModelOnly"]
    unet_id = next(k for k, n in prompt.items() if n["class_type"] == "UNETLoader")
    assert prompt[lora_id]["inputs"] == {"model": [unet_id, 0], "lora_name": TURBO_LORA, "strength_model": 1.0}
    users = [n for n in prompt.values() for v in n["inputs"].values() if v == [unet_id, 0]]
    assert users == [prompt[lora_id]]
    (sched,), (guider,) = nodes_of(prompt, "BasicScheduler"), nodes_of(prompt, "CFGGuider")
    assert sched["steps"] == 8 and guider["cfg"] == 1.0 and guider["model"] == [lora_id, 0]
    assert sched["model"] == [lora_id, 0]
    for key, node in before.items():
        changed = {k for k, v in node["inputs"].items() if prompt[key]["inputs"][k] != v}
        assert changed <= {"model", "steps", "cfg", "filename_prefix"}, (key, changed)
    (ui_lora,) = [n for n in load(f"{example}.json")["nodes"] if n["type"] == "LoraLoaderModelOnly"]
    assert ui_lora["properties"]["models"] == [{"name": TURBO_LORA, "directory": "loras"}]


def test_example_jobs_are_valid_setups():
    ten = setup_plan(load("t2va_10s.api.json"))
    assert ten.total_frames == 243 and not ten.segmented
    thirty = setup_plan(load("t2va_30s_segmented.api.json"))
    assert thirty.segmented and thirty.segments.count >= 3 and thirty.total_frames == 736
    sixty = setup_plan(load("t2va_60s_long.api.json"))
    assert sixty.segmented and sixty.segments.count == 7 and sixty.total_frames == 1450     # the 60 s job
    assert sixty.geometry.frames == thirty.geometry.frames                                  # the same longest pass
    refs = load("ref2va_hires_refiner.api.json")
    plan = setup_plan(refs)
    assert plan.request.family == "ref2va" and len(plan.geometry.references) == 2
    (hires,) = nodes_of(refs, "LongMediaHiRes")
    (refiner,) = nodes_of(refs, "LongMediaRefiner")
    from longmedia.h3.latent_resample import target_latent_size

    h, w = target_latent_size(plan.geometry.latent_height, plan.geometry.latent_width, hires["scale"])
    assert (w * 16, h * 16) == (1344, 768)            # 960x544 x1.4 lands on 1344x768
    assert hires["keep_audio"] is True and refiner["denoise"] < 0.5


def test_validator_catches_mistakes(schemas):
    prompt = load("t2va_10s.api.json")
    setup_id = next(k for k, n in prompt.items() if n["class_type"] == "LongMediaSetup")
    cases = {
        "unknown class_type": lambda p: p["1"].update(class_type="UNETLoaderX"),
        "no such input": lambda p: p[setup_id]["inputs"].update(frames=10),
        # a ref2va socket on a t2va job: the DynamicCombo's t2va option has no such input
        "family.pictures.ref_image_1: no such input": lambda p: p[setup_id]["inputs"].update(
            {"family.pictures.ref_image_1": ["1", 0]}),
        "outside [32, 16384]": lambda p: p[setup_id]["inputs"].update(width=16),
        "not in": lambda p: p[setup_id]["inputs"].update(family="i2v"),
        "links to missing node": lambda p: p[setup_id]["inputs"].update(negative=["777", 0]),
        "expects CONDITIONING, gets MODEL": lambda p: p[setup_id]["inputs"].update(negative=["1", 0]),
        "required input 'seconds' missing": lambda p: p[setup_id]["inputs"].pop("seconds"),
        "is not INT": lambda p: p[setup_id]["inputs"].update(width=True),
        "needs a link": lambda p: p[setup_id]["inputs"].update(negative="text"),
    }
    for expected, mutate in cases.items():
        broken = copy.deepcopy(prompt)
        mutate(broken)
        errors = validate_api(broken, schemas)
        assert any(expected in e for e in errors), (expected, errors)
    ui = load("t2va_10s.json")
    broken = copy.deepcopy(ui)
    next(n for n in broken["nodes"] if n["type"] == "LongMediaSetup")["widgets_values"].pop()
    assert any("widget values" in e for e in validate_ui(broken, schemas))
    broken = copy.deepcopy(ui)
    broken["links"][0][5] = "IMAGE"
    assert any("differs" in e for e in validate_ui(broken, schemas))


def test_snapshot_holds_our_four_nodes():
    ours = json.loads(OUR_SCHEMAS.read_text())
    assert {"LongMediaSetup", "LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner"} <= set(ours)
    assert all(v["category"] == "LongMedia" for v in ours.values())


def test_widget_layout_matches_the_stock_h3_templates(schemas):
    """The widgets_values rule (controls after seeds, upload slots) on ComfyUI's own H3 template, when installed."""
    templates = pytest.importorskip("comfyui_workflow_templates_json", reason="ComfyUI's workflow templates "
                                    "package is not installed here")
    path = Path(templates.__file__).parent / "templates" / "video_minimax_h3_r2v.json"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this templates version")
    checked = 0
    for node in json.loads(path.read_text())["nodes"]:
        schema = schemas.get(node["type"])
        if schema is None or node["type"] in FRONTEND_ONLY:
            continue
        assert len(node.get("widgets_values") or []) == len(ui_widget_slots(schema)), node["type"]
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("example", LONG_EXAMPLES)
def test_an_api_prompt_without_decode_and_save_s_crf_validates(schemas, example):
    """crf has a default (the encoder's own), so a prompt may leave it out (issue 47: it was required, and such a
    prompt got HTTP 400, or its Decode & Save output was dropped and no file written)."""
    prompt = load(f"{example}.api.json")
    for inputs in nodes_of(prompt, "LongMediaDecodeSave"):
        inputs.pop("crf")
    assert validate_api(prompt, schemas) == []
