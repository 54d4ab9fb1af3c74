// The trace page: a view of the `baton.trace/v1` document embedded in it (#trace), and of
// nothing else. It draws the header, the step graph, the timeline (a lane per source on one time
// axis, with what caused what) and the details of the entry selected (by click, or by the URL's
// #entry-<n>). It fetches nothing and changes nothing.
"use strict";

const doc = JSON.parse(document.getElementById("trace").textContent);
const LANES = ["record", "execution", "task", "receipt", "inbox", "ledger"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// `waiting{1}` -> `waiting`: the state's kind, for its badge.
const kindOf = (state) => (state || "none").replace(/\{.*\}$/, "");

function badge(state, label) {
  return el("span", { class: "badge k-" + kindOf(state), "data-state": state || "none" }, label || state || "no record");
}

// Times: the date once in the header, then the time of day to the millisecond.
const clock = (at) => (at ? at.replace(/^.*T/, "").replace(/(\.\d{3})\d*/, "$1") : "");

// ---- What caused what -------------------------------------------------------------------------

// For each timeline entry, the entries it is tied to and why. Derived from the document only:
// - an input (receipt, inbox, ledger) and the transition it caused (`cause_id`);
// - a transition that completed or failed a step, and the execution event where the resume
//   moved the execution on (the next TaskSucceeded or TaskFailed of that generation);
// - the execution entering a step's state, and the record's `step_ready` transition it caused;
// - an early callback (inbox, applied) and the `step_ready` transition that let it apply.
function relations(timeline) {
  const related = timeline.map(() => []);
  const link = (a, b, why) => {
    related[a].push({ to: b, why });
    related[b].push({ to: a, why });
  };
  // A Map, not an object: an input id is the sender's, and may be "constructor" or "__proto__".
  const byInput = new Map();
  timeline.forEach((e, i) => {
    if (e.input_id && e.source !== "record") {
      if (!byInput.has(e.input_id)) byInput.set(e.input_id, []);
      byInput.get(e.input_id).push(i);
    }
  });
  timeline.forEach((e, i) => {
    if (e.kind !== "transition") return;
    for (const j of (e.cause_id && byInput.get(e.cause_id)) || []) link(i, j, "input " + e.cause_id + " caused " + e.to);
    if (e.cause === "complete" || e.cause === "fail_step") {
      const j = timeline.findIndex((x, k) => k > i && x.kind === "execution_event" && x.generation === e.generation
        && /^Task(Succeeded|Failed)$/.test(x.event_type));
      if (j >= 0) link(i, j, "the resume moved the execution on");
    }
    if (e.cause === "step_ready") {
      let j = -1;
      for (let k = i - 1; k >= 0; k--) {
        const x = timeline[k];
        if (x.kind === "execution_event" && x.generation === e.generation && x.event_type === "TaskStateEntered") { j = k; break; }
      }
      if (j >= 0) link(j, i, "the execution reached the step");
    }
  });
  timeline.forEach((e, i) => {
    if (e.kind !== "buffered" || e.status !== "applied") return;
    const applying = timeline.findIndex((x) => x.kind === "transition" && x.cause_id === e.input_id);
    for (let k = applying; k >= 0; k--) {
      if (timeline[k].kind === "transition" && timeline[k].cause === "step_ready") {
        link(i, k, "early input applied when its step began waiting");
        break;
      }
    }
  });
  return related;
}

// ---- Header -----------------------------------------------------------------------------------

function header() {
  const r = doc.record;
  document.title = "baton trace: " + doc.workflow + " / " + doc.key;
  const facts = el("dl", { class: "facts" });
  const fact = (name, id, ...value) => facts.append(el("dt", {}, name), el("dd", { id }, ...value));
  if (r) {
    const label = r.state + (r.step_name ? " (step " + r.step_name + ")" : "") + (r.terminal ? ", ended" : "");
    fact("state", "state", badge(r.state, label));
    fact("generation", "generation", String(r.generation));
    fact("deadline", "deadline", r.deadline || "none");
    fact("token", "token", r.token_fingerprint || "none");
    fact("config version", "config-version", r.config_version || "none");
    fact("owed to Step Functions", "owed", r.owed || "nothing");
    // A retried step: each failed attempt with its error, then the one running or due.
    const attempts = attemptLines(r, r.terminal);
    if (attempts.length) fact("attempts", "attempts", ...attempts);
    // The compensation phase: what ended the run, then each step of the plan, last first.
    if (r.compensation) fact("compensation", "compensation", ...compensationLines(r.compensation));
    fact("created", "created", r.created_at);
    fact("updated", "updated", r.updated_at);
  } else {
    fact("state", "state", badge(null, "no record: only inputs that arrived before the start event"));
  }
  return el("header", { class: "top" }, el("h1", {}, "baton trace: " + doc.workflow + " / " + doc.key), facts);
}

// ---- The step graph ---------------------------------------------------------------------------

// Where each state stands: from the latest execution's history (the states it entered), and
// the record's own step when the execution has not said (or cannot be read).
function statuses(graph) {
  const r = doc.record;
  const latest = doc.executions[doc.executions.length - 1];
  const entered = new Set();
  let last = null;
  for (const ev of (latest && latest.history) || []) {
    if (ev.event_type.endsWith("StateEntered")) { entered.add(ev.detail); last = ev.detail; }
  }
  const status = new Map(); // by state name, which may be any step name
  for (const s of graph.states) {
    // Entered by the execution, or a step before the record's own.
    const byStep = r && s.step !== null && r.step !== null && s.step < r.step;
    status.set(s.name, entered.has(s.name) || byStep ? "passed" : "not-reached");
  }
  let current = null;
  if (r && !r.terminal && r.step_name) current = r.step_name;
  else if (r && !r.terminal && r.step !== null) current = (graph.states.find((s) => s.step === r.step) || {}).name;
  else if (last) current = last;
  if (current && status.has(current)) status.set(current, "current");
  return status;
}

const STATUS_LABEL = { current: "current", passed: "passed", "not-reached": "not reached" };

function graphView() {
  const graph = doc.graph;
  if (!graph) return el("p", { class: "empty" }, "The workflow's config is not at hand: its steps are not drawn.");
  const status = statuses(graph);
  const ended = doc.record && doc.record.terminal;
  const box = (s) => {
    const label = status.get(s.name) === "current" && ended ? "ended here" : STATUS_LABEL[status.get(s.name)];
    const meta = s.step !== null ? "step " + s.step + " · waits for its task token" : s.type;
    const catches = s.catches.map((c) => c.errors.join(", ").replace(/States\./g, "") + " → " + c.next);
    const branches = (s.branches || []).length
      ? [el("div", { class: "group-branches", "data-group": s.name }, s.branches.map((g) => branchBox(g, status.get(s.name))))]
      : [];
    const undo = undoOf(s.name);
    return el("div", { class: "graph-state", "data-name": s.name, "data-status": status.get(s.name), ...(undo ? { "data-undo": undo.state } : {}) },
      el("span", { class: "name" }, s.name), el("span", { class: "status-label" }, "(" + label + ")"),
      ...(undo ? [el("div", { class: "undo-state" }, "compensation of " + undo.name + ": " + undo.state.replace("_", " "))] : []),
      el("div", { class: "meta" }, (s.branches && s.branches.length ? "parallel group · " + s.branches.length + " branches side by side" : meta) +
        (catches.length ? " · on " + catches.join(", ") : "")),
      ...branches);
  };
  const nodes = [];
  graph.states.forEach((s, i) => {
    nodes.push(box(s));
    const next = graph.states[i + 1];
    if (s.next && next && s.next === next.name) nodes.push(el("div", { class: "arrow", "aria-hidden": "true" }, "↓"));
    else if (next) nodes.push(el("div", { class: "branch" }, s.next ? "then → " + s.next : "end"));
  });
  return el("div", { class: "graph", id: "graph" }, nodes);
}

// One branch of a parallel group, as the record has it: its state, deadline, inputs and owed
// resume. Once the record has moved past the group it keeps only the branches that did not
// succeed (`missed`): the others passed with their group.
function branchBox(g, groupStatus) {
  const r = doc.record;
  const name = g.start_at;
  const undo = undoOf(name);
  if (undo) {
    return el("div", { class: "graph-branch", "data-name": name, "data-state": undo.state },
      el("span", { class: "name" }, name), el("span", { class: "status-label" }, "(" + undo.state.replace("_", " ") + ")"),
      el("div", { class: "meta" }, "compensation of " + undo.name));
  }
  const b = ((r && r.branches) || []).find((x) => x.name === name);
  const missed = ((r && r.missed) || []).includes(name);
  const state = b ? b.state : missed ? "missed" : groupStatus === "passed" ? "passed" : "not_reached";
  const meta = [];
  if (b && b.deadline && b.state === "waiting") meta.push("deadline " + b.deadline);
  if (b && Object.keys(b.inputs).length) meta.push("inputs " + Object.keys(b.inputs).join(", "));
  if (b && b.owed) meta.push("owed a " + b.owed + " resume");
  if (missed) meta.push("optional: did not succeed");
  return el("div", { class: "graph-branch", "data-name": name, "data-state": state },
    el("span", { class: "name" }, name), el("span", { class: "status-label" }, "(" + state.replace("_", " ") + ")"),
    el("div", { class: "meta" }, meta.join(" · ") || "step " + ((g.states[0] || {}).step ?? "")),
    ...(b ? attemptLines(b, b.state !== "waiting") : []));
}

function compensationLines(c) {
  const began = el("div", { class: "undo-began" },
    "began " + c.began_at + " after the run " + c.trigger.replace("_", " ") + (c.detail ? " (" + c.detail + ")" : ""));
  const steps = c.steps.map((u) => el("div", { class: "undo", "data-step": u.name, "data-state": u.state },
    badge(u.state, (u.name || "step " + u.step) + ": " + u.state.replace("_", " ") + (u.skip_reason ? " (" + u.skip_reason.replace(/_/g, " ") + ")" : "") +
      (u.failed_attempts && u.failed_attempts.length ? " · " + u.failed_attempts.length + " failed attempt(s)" : ""))));
  return [began, ...steps];
}

// The compensation of the step a graph state undoes ("Undo <step>"), as the record has it.
function undoOf(stateName) {
  const c = doc.record && doc.record.compensation;
  if (!c || !stateName.startsWith("Undo ")) return null;
  return c.steps.find((u) => "Undo " + u.name === stateName) || null;
}

// A retried step's or branch's attempts (none before one failed): each failed attempt with its
// error, then the one running or due (`ended`: none runs any more).
function attemptLines(x, ended) {
  if (!(x.failed_attempts || []).length) return [];
  const failed = x.failed_attempts.map((a) => el("div", { class: "attempt", "data-attempt": String(a.attempt) },
    a.attempt + " failed " + a.error + (a.cause ? " (" + a.cause + ")" : "") + " at " + a.at + " by " + a.source + " " + a.input));
  const next = x.next_attempt_at ? "due " + x.next_attempt_at + " (after its backoff)" : ended ? "the last" : "running";
  return [...failed, el("div", { class: "attempt", "data-attempt": String(x.attempt) }, x.attempt + " " + next)];
}

// ---- The timeline -----------------------------------------------------------------------------

// An entry in two lines: what happened, and one line of detail (the details panel has it all).
function summary(e) {
  switch (e.kind) {
    case "transition":
      return [(e.from || "(created)") + " → " + e.to, "by " + e.cause + (e.cause_id ? " " + e.cause_id : "") + " · g" + e.generation];
    case "execution_event":
      return [e.event_type, e.detail + " · g" + e.generation];
    case "task_created":
      return [(e.task_kind === "compensation" ? "compensation task for " : "task for ") + e.step_name +
        (e.attempt > 1 ? " (attempt " + e.attempt + ")" : ""), e.published ? "published" : "not published yet"];
    case "receipt":
      return ["receipt " + e.input_id, (e.http_status ? "answered " + e.http_status + " " + (e.answer_status || "") : "status " + e.status) +
        (e.repeats ? ", sent again " + (e.repeats === 1 ? "once" : e.repeats + " times") : "")];
    case "buffered":
      return ["early input " + e.input_id, (e.step_name || "step " + e.step) + ": " + e.status];
    case "ignored":
      return ["ignored " + e.input_id, e.reason + (e.state ? " (record " + e.state + ")" : "")];
    default:
      return [e.kind, ""];
  }
}

function timelineView(related) {
  const grid = el("div", { class: "timeline", id: "timeline", role: "table", "aria-label": "timeline" });
  grid.append(el("div", { class: "lane-head time", role: "columnheader" }, "time"));
  for (const lane of LANES) grid.append(el("div", { class: "lane-head", "data-lane": lane, role: "columnheader" }, lane));
  doc.timeline.forEach((e, i) => {
    grid.append(el("div", { class: "time", role: "rowheader", title: e.at }, clock(e.at)));
    for (const lane of LANES) {
      const cell = el("div", { class: "lane-" + lane, role: "cell" });
      if (lane === e.source) {
        const [kind, detail] = summary(e);
        const links = related[i].length ? " · ↔ " + related[i].length + " related" : "";
        cell.append(el("div", { class: "entry", id: "entry-" + i, tabindex: "0", "data-index": i, "data-lane": e.source, "data-kind": e.kind, title: kind + "\n" + detail },
          el("span", { class: "kind" }, kind), el("span", { class: "detail" }, detail + links)));
      }
      grid.append(cell);
    }
  });
  return grid;
}

function showDetails(i, related) {
  const e = doc.timeline[i];
  const details = document.getElementById("details");
  details.replaceChildren();
  details.setAttribute("data-index", i);
  details.append(el("p", {}, el("strong", {}, summary(e)[0]), " at " + e.at + ", source " + e.source));
  if (e.kind === "receipt" && e.answer) details.append(el("p", {}, "The answer the sender got" + (e.http_status ? " (HTTP " + e.http_status + ")" : "") + ":"));
  details.append(el("pre", { class: "entry-json" }, JSON.stringify(e, null, 2)));
  if (related[i].length) {
    details.append(el("p", {}, "Related:"), el("ul", { class: "related-list" },
      related[i].map((r) => el("li", {}, el("a", { href: "#entry-" + r.to }, summary(doc.timeline[r.to])[0]), ": " + r.why))));
  }
  document.querySelectorAll(".entry").forEach((node) => {
    const j = Number(node.getAttribute("data-index"));
    node.classList.toggle("selected", j === i);
    node.classList.toggle("related", related[i].some((r) => r.to === j));
  });
}

// ---- Executions -------------------------------------------------------------------------------

function executionsView() {
  if (!doc.executions.length) return el("p", { class: "empty" }, "No execution was started.");
  return el("table", { id: "executions" },
    el("tr", {}, ["generation", "status", "started", "stopped", "error"].map((h) => el("th", {}, h))),
    doc.executions.map((x) => el("tr", { "data-generation": x.generation },
      el("td", {}, String(x.generation)), el("td", {}, x.status), el("td", {}, x.started_at),
      el("td", {}, x.stopped_at || ""), el("td", {}, [x.error, x.cause].filter(Boolean).join(": ")))));
}

// ---- The page ---------------------------------------------------------------------------------

const related = relations(doc.timeline);
document.body.prepend(header());
const main = document.querySelector("main");
main.append(
  el("h2", {}, "Steps"), graphView(),
  el("div", { class: "split" },
    el("section", {}, el("h2", {}, "Timeline (" + doc.timeline.length + " entries; click one for its details)"), timelineView(related)),
    el("aside", {}, el("h2", {}, "Details"),
      el("div", { id: "details", "aria-live": "polite" }, el("p", { class: "empty" }, "Click an entry of the timeline.")))),
  el("h2", {}, "Executions"), executionsView(),
);
const select = () => {
  const m = /^#entry-(\d+)$/.exec(location.hash);
  if (m && doc.timeline[Number(m[1])]) showDetails(Number(m[1]), related);
};
document.getElementById("timeline").addEventListener("click", (ev) => {
  const entry = ev.target.closest(".entry");
  if (entry) history.replaceState(null, "", "#entry-" + entry.getAttribute("data-index"));
  select();
});
document.getElementById("timeline").addEventListener("keydown", (ev) => {
  const entry = ev.target.closest(".entry");
  if (entry && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); entry.click(); }
});
window.addEventListener("hashchange", select);
select();
// Done: for the browser tests, that the script ran to the end and how wide the page came out.
document.body.setAttribute("data-scroll-width", String(document.documentElement.scrollWidth));
document.body.setAttribute("data-rendered", "true");
