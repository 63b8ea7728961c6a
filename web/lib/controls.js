// The advanced controls of Sampler / Hi-Res / Refiner: the ten manual VRAM controls (INT inputs whose default
// and minimum are -1 = auto) stay hidden until memory_mode is not auto, the Sol schedule inputs (sol_*) until
// attention_mode is sol or scheduled_sol; the node's own "Show Advanced" toggle shows them all. A manual
// control at -1 reads "auto" in both renderers.

import { app } from "../../../scripts/app.js";
import { fitHeight, isLinked, setState, widgetByName } from "./nodes.js";

const SOL_MODES = new Set(["sol", "scheduled_sol"]);
const AUTO = -1;

/** Names of the manual VRAM controls and of the Sol schedule inputs in a V1 node definition. */
export function classifyInputs(nodeData) {
  const inputs = { ...(nodeData?.input?.required ?? {}), ...(nodeData?.input?.optional ?? {}) };
  const manual = [];
  const sol = [];
  for (const [name, spec] of Object.entries(inputs)) {
    const [type, opts] = Array.isArray(spec) ? spec : [spec, {}];
    if (type === "INT" && opts?.default === AUTO && opts?.min === AUTO) manual.push(name);
    else if (name.startsWith("sol_")) sol.push(name);
  }
  return { manual, sol };
}

/** Which control groups the node's current modes make relevant (a linked mode input counts as relevant). */
export function relevantGroups(node) {
  const memory = widgetByName(node, "memory_mode");
  const attention = widgetByName(node, "attention_mode");
  return {
    manual: !!memory && (isLinked(node, "memory_mode") || memory.value !== "auto"),
    sol: !!attention && (isLinked(node, "attention_mode") || SOL_MODES.has(attention.value)),
  };
}

function alwaysShowAdvanced() {
  try {
    return !!app.extensionManager?.setting?.get?.("Comfy.Node.AlwaysShowAdvancedWidgets");
  } catch (error) {
    // Settings not ready yet (node created while the app boots): the node's own toggle still applies.
    if (error instanceof TypeError || error instanceof ReferenceError) return false;
    throw error;
  }
}

/** Hides a group's widgets unless its mode makes them relevant or the node's "Show Advanced" toggle is on. */
export function applyVisibility(node, groups) {
  if (!node.widgets) return;
  const relevant = relevantGroups(node);
  const showAll = !!node.showAdvanced || alwaysShowAdvanced();
  let changed = false;
  for (const key of ["manual", "sol"]) {
    const advanced = !relevant[key];
    const hidden = advanced && !showAll;
    for (const name of groups[key]) {
      const widget = widgetByName(node, name);
      if (widget && (!!widget.hidden !== hidden || !!widget.advanced !== advanced)) {
        setState(widget, hidden, advanced);
        changed = true;
      }
    }
  }
  if (changed) fitHeight(node);
}

// Nodes 2.0 draws a number widget's value itself, with no display hook; it reads the widget's label from the
// widget's state, so there the label says "auto" while the value is -1. The classic canvas shows the value
// as "auto" (showAuto) and keeps the plain label.
export function autoLabel(widget) {
  widget.longmediaLabel ??= widget.label || widget.name;
  const label = globalThis.LiteGraph?.vueNodesMode && widget.value === AUTO
    ? `${widget.longmediaLabel}: auto` : widget.longmediaLabel;
  if (widget.label !== label) widget.label = label;
}

// The manual controls keep -1 as their value (workflows and API prompts use it); the canvas shows "auto".
// The frontend's own _displayValue getter sits on the widget's prototype (1.49) or on the widget itself (1.53).
export function showAuto(node, names) {
  for (const name of names) {
    const widget = widgetByName(node, name);
    if (!widget) continue;
    autoLabel(widget);
    if (widget.longmediaAuto) continue;
    const own = propertyDescriptor(widget, "_displayValue");
    if (!own?.get || (Object.hasOwn(widget, "_displayValue") && !own.configurable)) continue;   // not a canvas number widget
    Object.defineProperty(widget, "_displayValue", {
      configurable: true,
      get() { return this.value === AUTO && !this.computedDisabled ? "auto" : own.get.call(this); },
    });
    widget.longmediaAuto = true;
  }
}

// The descriptor of `key` on `obj` or up its prototype chain (newer frontends, 1.53, keep showAdvanced as
// a class accessor over the node's tracked state: the Nodes 2.0 view reads that state, not a field).
function propertyDescriptor(obj, key) {
  for (let o = obj; o; o = Object.getPrototypeOf(o)) {
    const d = Object.getOwnPropertyDescriptor(o, key);
    if (d) return d;
  }
  return undefined;
}

// The node's own "Show Advanced" toggle (context menu on the canvas, footer button in Nodes 2.0) sets
// node.showAdvanced; re-apply visibility after it, keeping the frontend's own accessor in the chain.
export function watchShowAdvanced(node, groups) {
  const own = propertyDescriptor(node, "showAdvanced");
  if (own && Object.hasOwn(node, "showAdvanced") && !own.configurable) return;
  let stored = node.showAdvanced;
  const get = own?.get ? () => own.get.call(node) : () => stored;
  const set = own?.set ? (v) => own.set.call(node, v) : (v) => { stored = v; };
  Object.defineProperty(node, "showAdvanced", {
    configurable: true,
    enumerable: own?.enumerable ?? true,
    get,
    set(value) {
      set(value);
      applyVisibility(node, groups);
    },
  });
}
