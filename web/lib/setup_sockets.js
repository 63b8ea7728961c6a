// Setup's sockets by family, and its prompt boxes while `positive` is connected.
//
// Where ComfyUI has the V3 schema's dynamic inputs, Setup's `family` is a DynamicCombo (COMFY_DYNAMICCOMBO_V3)
// and the frontend itself adds the family's sockets: family.first_frame / family.last_frame for fl2va, and for
// ref2va one Autogrow group per reference kind (family.pictures.ref_image_1, family.videos.ref_video_1 ...),
// a free slot past the last connected. A workflow saved with the flat names (ref_image_1, first_frame) has its
// links moved onto those sockets when it loads (Setup also accepts the flat names, so one that cannot move
// still runs). On older ComfyUI the schema is flat and this module shows the family's sockets itself.

import { fitHeight, inputLinkAt, linkedNames, setState, widgetByName } from "./nodes.js";

const DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3";
const FRAME_INPUTS = ["first_frame", "last_frame"];
// kind -> [prefixes of one slot] (flat schema); flat prefix -> Autogrow group under `family` (dynamic schema)
const REFERENCE_KINDS = { picture: ["ref_image_"], video: ["ref_video_", "ref_video_audio_"], audio: ["ref_audio_"] };
const REFERENCE_GROUPS = { ref_image_: "pictures", ref_video_: "videos", ref_video_audio_: "video_audios",
                           ref_audio_: "audios" };

/** Setup's family is the V3 DynamicCombo: the frontend adds and removes its sockets. */
export function hasDynamicFamily(nodeData) {
  const spec = nodeData?.input?.required?.family ?? nodeData?.input?.optional?.family;
  return Array.isArray(spec) && spec[0] === DYNAMIC_COMBO;
}

/** The dynamic schema's name for a flat Setup input (first_frame -> family.first_frame, ref_image_2 ->
 *  family.pictures.ref_image_2), or null for any other input. */
export function dynamicName(name) {
  if (FRAME_INPUTS.includes(name)) return `family.${name}`;
  for (const [prefix, group] of Object.entries(REFERENCE_GROUPS)) {
    if (name.startsWith(prefix) && /^\d+$/.test(name.slice(prefix.length))) return `family.${group}.${name}`;
  }
  return null;
}

/** A workflow saved with the flat names, loaded where `family` is dynamic: each flat link moves onto its
 *  family.* socket (lowest number first, so each Autogrow group has grown its next slot), and the flat sockets
 *  left empty go. A link whose socket the family does not have stays where it is (Setup reads both names). */
export function migrateFlatSockets(node) {
  if (!node.graph || !node.inputs || !hasDynamicFamily(node.constructor?.nodeData)) return [];
  const flat = node.inputs.filter((slot) => dynamicName(slot.name))
    .sort((a, b) => a.name.localeCompare(b.name, "en", { numeric: true }));
  const moved = [];
  for (const slot of flat) {
    const index = node.inputs.indexOf(slot);
    const link = inputLinkAt(node, index);
    const target = node.findInputSlot(dynamicName(slot.name));
    const origin = link && node.graph.getNodeById(link.origin_id);
    if (!origin || target === -1 || inputLinkAt(node, target)) continue;
    const originSlot = link.origin_slot;
    node.disconnectInput(index);
    origin.connect(originSlot, node, node.findInputSlot(dynamicName(slot.name)));
    moved.push(slot.name);
  }
  for (let i = node.inputs.length - 1; i >= 0; i--) {
    if (dynamicName(node.inputs[i].name) && !inputLinkAt(node, i)) node.removeInput(i);
  }
  if (flat.length) fitHeight(node);
  return moved;
}

/** The Setup sockets `family` uses: frame inputs, or the reference slots up to one past the last connected. */
export function setupSockets(family, linked, slotCounts) {
  const wanted = new Set();
  if (family === "fl2va") FRAME_INPUTS.forEach((n) => wanted.add(n));
  if (family === "ref2va") {
    for (const [kind, prefixes] of Object.entries(REFERENCE_KINDS)) {
      let last = 0;
      for (const name of linked) {
        const prefix = prefixes.find((p) => name.startsWith(p) && /^\d+$/.test(name.slice(p.length)));
        if (prefix) last = Math.max(last, Number(name.slice(prefix.length)));
      }
      const shown = Math.min(slotCounts[kind] ?? 0, last + 1);
      for (let i = 1; i <= shown; i++) prefixes.forEach((p) => wanted.add(`${p}${i}`));
    }
  }
  return wanted;
}

// Setup's frame and reference sockets in the flat schema, in schema order, with their types: name -> type.
function managedSockets(nodeData) {
  const optional = nodeData?.input?.optional ?? {};
  const order = nodeData?.input_order?.optional ?? Object.keys(optional);
  const prefixes = Object.values(REFERENCE_KINDS).flat();
  const out = new Map();
  for (const name of order) {
    const isRef = prefixes.some((p) => name.startsWith(p) && /^\d+$/.test(name.slice(p.length)));
    if (FRAME_INPUTS.includes(name) || isRef) out.set(name, optional[name][0]);
  }
  return out;
}

function slotCounts(managed) {
  const counts = {};
  for (const [kind, prefixes] of Object.entries(REFERENCE_KINDS)) {
    counts[kind] = [...managed.keys()].filter((n) => n.startsWith(prefixes[0]) &&
      /^\d+$/.test(n.slice(prefixes[0].length))).length;
  }
  return counts;
}

// Puts `slots` (node.inputs' slot objects in a new order, unlinked ones dropped or added) in place of node.inputs
// and moves every link to its slot's new index. Setting link.target_slot is what moves a link on every frontend
// (1.53 re-keys its topology store; older ones read the index from it). Links keep their relative order, so
// moving those that go down lowest first, then those that go up highest first, never lands one on an occupied slot.
function relayoutInputs(node, slots) {
  const moves = [];
  node.inputs.forEach((slot, from) => {
    const link = inputLinkAt(node, from);
    if (!link) return;
    const to = slots.indexOf(slot);
    if (to === -1) throw new Error(`LongMedia: input ${slot.name} of node ${node.id} is connected and must stay`);
    if (to !== from) moves.push({ link, from, to });
  });
  node.inputs.splice(0, node.inputs.length, ...slots);
  const down = moves.filter((m) => m.to < m.from).sort((a, b) => a.from - b.from);
  const up = moves.filter((m) => m.to > m.from).sort((a, b) => b.from - a.from);
  for (const { link, to } of [...down, ...up]) link.target_slot = to;
}

// The prompt boxes (prompt, segment_prompts: Setup encodes them with its clip) are not used while positive
// conditioning is connected: hidden on the classic canvas, and disabled, which Nodes 2.0 reads from the widget's
// state (it does not re-read the hidden flag).
const PROMPT_BOXES = ["prompt", "segment_prompts"];

function applyPromptBox(node, linked) {
  const positive = linked.includes("positive");
  let changed = false;
  for (const name of PROMPT_BOXES) {
    const box = widgetByName(node, name);
    if (!box || (!!box.hidden === positive && !!box.disabled === positive)) continue;
    setState(box, positive, false);
    box.disabled = positive;
    changed = true;
  }
  return changed;
}

/** Setup: add and remove its frame/reference sockets to match the family (a connected socket always stays),
 *  unless the frontend does (dynamic family); the prompt box follows `positive`.
 *  `savedLinked`: the input names a workflow being loaded connects. While a graph configures, a newer frontend
 *  (1.53) holds each link at the slot index the file saved and moves it to its input by name only after every
 *  node is configured: until then the file, not the slots, says which sockets are connected. */
export function applySetupSockets(node, savedLinked = []) {
  if (!node.inputs || !widgetByName(node, "family")) return;
  const linked = [...new Set([...linkedNames(node), ...savedLinked])];
  const managed = hasDynamicFamily(node.constructor?.nodeData) ? new Map() : managedSockets(node.constructor?.nodeData);
  let same = true;
  if (managed.size) {
    const wanted = setupSockets(widgetByName(node, "family").value, linked, slotCounts(managed));
    linked.filter((n) => managed.has(n)).forEach((n) => wanted.add(n));
    const present = new Set(node.inputs.filter((s) => managed.has(s.name)).map((s) => s.name));
    same = present.size === wanted.size && [...wanted].every((n) => present.has(n));
    if (!same) {
      const hollow = globalThis.LiteGraph?.SlotShape?.HollowCircle ?? 7;
      // new sockets through the frontend's own addInput (its slot class, its hooks), then all put in schema order
      for (const name of [...managed.keys()].filter((n) => wanted.has(n) && !present.has(n))) {
        node.addInput(name, managed.get(name), { localized_name: name, label: name, shape: hollow });
      }
      const byName = new Map(node.inputs.filter((s) => managed.has(s.name)).map((s) => [s.name, s]));
      const keep = node.inputs.filter((s) => !managed.has(s.name));
      relayoutInputs(node, [...keep, ...[...managed.keys()].filter((n) => wanted.has(n)).map((n) => byName.get(n))]);
    }
  }
  if (applyPromptBox(node, linked) || !same) fitHeight(node);
}
