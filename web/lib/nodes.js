// Small helpers over one LiteGraph node, shared by the other modules: widgets by name, links by slot index,
// the classic/Nodes 2.0 visibility flags, and fitting the node's height to its content.

export const SLACK_PX = 8;   // a loaded node taller than its content by more than this shrinks

export function widgetByName(node, name) {
  return node.widgets?.find((w) => w.name === name);
}

// The link into input slot `index`, or null. node.getInputLink reads it on every frontend: 1.53 keeps links in
// a topology store keyed by (node, slot index), where input.link is a deprecated view of that store.
export function inputLinkAt(node, index) {
  return node.graph && typeof node.getInputLink === "function" ? node.getInputLink(index) ?? null : null;
}

export function linkedNames(node) {
  return (node.inputs ?? []).filter((_, index) => inputLinkAt(node, index)).map((slot) => slot.name);
}

export function isLinked(node, name) {
  return node.inputs?.some((slot, index) => slot.widget?.name === name && inputLinkAt(node, index)) ?? false;
}

// The classic canvas reads widget.hidden / widget.advanced, Nodes 2.0 reads widget.options.hidden / .advanced.
// A relevant control is neither; an irrelevant one is advanced (so the node offers its "Show Advanced"
// toggle, which the classic canvas only offers when a widget has widget.advanced) and hidden unless shown.
export function setState(widget, hidden, advanced) {
  widget.hidden = hidden;
  widget.advanced = advanced;
  widget.options = widget.options ?? {};
  widget.options.hidden = hidden;
  widget.options.advanced = advanced;
}

export function fitHeight(node) {
  if (globalThis.LiteGraph?.vueNodesMode) return;  // Nodes 2.0 sizes nodes from the DOM
  const wanted = node.computeSize?.();
  if (!wanted || !node.size) return;
  node.setSize([Math.max(node.size[0], wanted[0]), wanted[1]]);
  node.setDirtyCanvas?.(true, true);
}

/** A node (loaded from a workflow) taller than its content shrinks to it; a shorter one is left alone. */
export function shrinkToContent(node) {
  if (globalThis.LiteGraph?.vueNodesMode) return;
  const wanted = node.computeSize?.();
  if (wanted && node.size && node.size[1] > wanted[1] + SLACK_PX) fitHeight(node);
}
