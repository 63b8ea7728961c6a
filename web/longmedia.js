// LongMedia frontend extension (the entry: the only file that registers one; ComfyUI also serves lib/*.js,
// which only export). Any node whose class name starts with "LongMedia" is handled:
// - lib/report_panel.js: an executed output carrying `longmedia_report` (a list of report dicts, see
//   longmedia/report/) is drawn as a compact panel under the node's widgets (lib/report_format.js says what);
// - lib/controls.js: the manual VRAM controls and the Sol schedule inputs fold away until their mode uses them;
//   a manual control at -1 reads "auto";
// - lib/setup_sockets.js: Setup shows only the sockets its family uses, and not the prompt box while
//   `positive` is connected;
// - lib/nodes.js: a node loaded taller than its content shrinks to it.
// Only our node types' prototypes and widgets are touched; nothing global is patched.

import { app } from "../../scripts/app.js";
import { applyVisibility, autoLabel, classifyInputs, showAuto, watchShowAdvanced } from "./lib/controls.js";
import { shrinkToContent } from "./lib/nodes.js";
import { formatReport, segmentRuns, splitSummary } from "./lib/report_format.js";
import { markStale, REPORT_WIDGET, reportOf, showReport } from "./lib/report_panel.js";
import { applySetupSockets, dynamicName, hasDynamicFamily, migrateFlatSockets, setupSockets }
  from "./lib/setup_sockets.js";

const EXTENSION_NAME = "LongMedia.Nodes";
const NODE_PREFIX = "LongMedia";

// After a segmented Sampler run, the Setup whose job it ran shows each segment's seed and "sampled" / "reused"
// in its segment table (its own summary is kept as `longmediaSetupSummary`, so a later run replaces the columns).
function showRunsOnSetup(node, report) {
  const runs = segmentRuns((Array.isArray(report) ? report : [report])[0]);
  const slot = (node.inputs ?? []).findIndex((i) => i?.name === "job");
  const setup = runs && slot >= 0 ? node.getInputNode?.(slot) : null;
  if (setup?.type !== "LongMediaSetup" || !setup.longmediaSetupSummary) return;
  showReport(setup, [{ ...setup.longmediaSetupSummary, segment_runs: runs }]);
}

// Every control's callback: the mode controls re-apply visibility, Setup's family its sockets, a manual
// control its "auto" label, and any change after a run marks the plan panel stale.
function watchWidgets(node, groups) {
  for (const widget of node.widgets ?? []) {
    if (widget.name === REPORT_WIDGET || widget.longmediaWatched) continue;
    const callback = widget.callback;
    widget.callback = function (...args) {
      const result = callback?.apply(this, args);
      if (widget.name === "memory_mode" || widget.name === "attention_mode") applyVisibility(node, groups);
      if (widget.name === "family") applySetupSockets(node);
      if (groups.manual.includes(widget.name)) autoLabel(widget);
      if (node.longmediaReport) markStale(node);
      return result;
    };
    widget.longmediaWatched = true;
  }
}

app.registerExtension({
  name: EXTENSION_NAME,
  classifyInputs,
  dynamicName,
  formatReport,
  hasDynamicFamily,
  segmentRuns,
  setupSockets,
  splitSummary,

  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (typeof nodeData?.name !== "string" || !nodeData.name.startsWith(NODE_PREFIX)) return;
    const groups = classifyInputs(nodeData);
    const proto = nodeType.prototype;

    const onNodeCreated = proto.onNodeCreated;
    proto.onNodeCreated = function (...args) {
      const result = onNodeCreated?.apply(this, args);
      watchWidgets(this, groups);
      watchShowAdvanced(this, groups);
      applyVisibility(this, groups);
      showAuto(this, groups.manual);
      applySetupSockets(this);
      return result;
    };

    const onConfigure = proto.onConfigure;
    proto.onConfigure = function (info, ...rest) {
      const result = onConfigure?.apply(this, [info, ...rest]);
      applyVisibility(this, groups);
      showAuto(this, groups.manual);
      applySetupSockets(this, (info?.inputs ?? []).filter((s) => s?.link != null).map((s) => s.name));
      shrinkToContent(this);
      return result;
    };

    const onConnectionsChange = proto.onConnectionsChange;
    proto.onConnectionsChange = function (...args) {
      const result = onConnectionsChange?.apply(this, args);
      applyVisibility(this, groups);
      if (!app.configuringGraph) {
        // after the connection settles: a new reference slot appears, an emptied one goes
        requestAnimationFrame(() => applySetupSockets(this));
        if (this.longmediaReport) markStale(this);
      }
      return result;
    };

    const onWidgetChanged = proto.onWidgetChanged;
    proto.onWidgetChanged = function (...args) {
      const result = onWidgetChanged?.apply(this, args);
      if (this.longmediaReport && args[0] !== REPORT_WIDGET) markStale(this);
      return result;
    };

    const onExecuted = proto.onExecuted;
    proto.onExecuted = function (output, ...rest) {
      const result = onExecuted?.apply(this, [output, ...rest]);
      const report = reportOf(output);
      if (report) {
        if (this.type === "LongMediaSetup") this.longmediaSetupSummary = report[0];
        showReport(this, report);
        showRunsOnSetup(this, report);
      }
      return result;
    };
  },

  // After the whole graph is configured (links settled at their inputs): a Setup saved with the flat socket
  // names moves its links onto the dynamic ones; Setup's sockets from its real links.
  loadedGraphNode(node) {
    if (!String(node?.type).startsWith(NODE_PREFIX)) return;
    migrateFlatSockets(node);
    applySetupSockets(node);
    shrinkToContent(node);
  },

  // Outputs restored from the queue/history (not a live run) arrive here instead of onExecuted.
  onNodeOutputsUpdated(nodeOutputs) {
    const graph = app.rootGraph ?? app.graph;
    for (const [locator, output] of Object.entries(nodeOutputs ?? {})) {
      const report = reportOf(output);
      if (!report || locator.includes(":")) continue;
      const node = graph?.getNodeById?.(Number(locator)) ?? graph?.getNodeById?.(locator);
      if (!node?.type?.startsWith(NODE_PREFIX)) continue;
      if (node.type === "LongMediaSetup") node.longmediaSetupSummary = report[0];
      showReport(node, report);
      showRunsOnSetup(node, report);
    }
  },
});
