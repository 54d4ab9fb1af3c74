// The trace page: a view of the `baton.trace/v1` document embedded in it (#trace), and of
// nothing else. It opens on the header and the overview (each step, branch and compensation as
// a bar over time, with its state, tasks, inputs and deadline); one click away are the step
// graph and the full timeline (a lane per source on one time axis, Step Functions' events folded
// under their state, with what caused what) and the details of the entry selected (by click, or
// by the URL's #entry-<n>). It fetches nothing and changes nothing.
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
    // A timer step, while it sleeps: when the sweeper wakes it.
    if (r.wakes_at) fact("timer wakes", "wakes-at", r.wakes_at);
    // A step with reminders or escalation levels: how many are behind it, and when the next is due.
    if (r.notices || r.next_notice_at) {
      fact("notices", "notices", r.notices + " behind" + (r.next_notice_at ? ", next " + r.next_notice_at : ""));
    }
    // Who was asked when: the task on its queue, then each reminder and escalation level behind it.
    if (r.asked && r.asked.again.length) {
      const row = (at, queue, what) => el("div", {}, at + "  " + queue + "  " + what);
      const again = r.asked.again.map((n) => row(n.at, n.queue, n.reminder ? "reminder " + n.reminder : "level " + n.level));
      fact("asked", "asked", row(r.asked.since, r.asked.queue, "the task"), ...again);
    }
    fact("token", "token", r.token_fingerprint || "none");
    fact("config version", "config-version", r.config_version);
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
  // The oldest ignored inputs are counted, not drawn (`baton trace --ledger all` shows them).
  if (doc.ledger_omitted) {
    fact("ledger", "ledger-omitted", doc.ledger_omitted + " older ignored input(s) not shown: baton trace " +
      doc.workflow + " " + doc.key + " --ledger all");
  }
  return el("header", { class: "top" }, el("h1", {}, "baton trace: " + doc.workflow + " / " + doc.key), facts);
}

// ---- The overview: each step, branch and compensation as a bar over time -----------------------

// The generation the overview draws: the record's, or the latest an input named.
function currentGeneration() {
  if (doc.record) return doc.record.generation;
  return Math.max(0, ...doc.timeline.map((e) => e.generation || 0));
}

const ms = (at) => Date.parse(at);

// How long, in words a person reads at a glance.
function duration(millis) {
  const s = millis / 1000;
  if (s < 1) return Math.round(millis) + " ms";
  if (s < 120) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

// When the execution entered the state `name` and when it left it (null while it is in it).
function stateSpan(events, name) {
  const entered = events.find((e) => /StateEntered$/.test(e.event_type) && e.detail === name);
  if (!entered) return null;
  const exited = events.find((e) => e.i > entered.i && /StateExited$/.test(e.event_type) && e.detail === name);
  return { from: entered.at, to: exited ? exited.at : null, entered: entered.i };
}

// Without the execution's history (expired, or unreadable): the record's own wait of step `i`.
function recordSpan(gen, i) {
  const moves = doc.timeline.map((e, k) => ({ ...e, i: k })).filter((e) => e.kind === "transition" && e.generation === gen);
  const start = moves.find((e) => e.to === "waiting{" + i + "}");
  if (!start) return null;
  const end = moves.find((e) => e.i > start.i && !(e.to || "").endsWith("{" + i + "}"));
  return { from: start.at, to: end ? end.at : null, entered: start.i };
}

const LEFT_BY = { complete: "succeeded", fail_step: "failed", report_failed: "failed", report_timed_out: "timed_out", cancel: "cancelled" };

// A forward step's (or group's) state: how the record left its wait, or where it stands.
function stepState(gen, i, span) {
  const r = doc.record;
  if (r && !r.terminal && r.step === i && r.generation === gen) return kindOf(r.state);
  const left = doc.timeline.find((e) => e.kind === "transition" && e.generation === gen &&
    e.from === "waiting{" + i + "}" && e.to !== e.from && LEFT_BY[e.cause]);
  if (left) return LEFT_BY[left.cause];
  if (span && span.to) return "passed";
  if (span) return r && r.terminal ? "ended" : "running";
  return "not_reached";
}

function branchState(name, groupState, span) {
  const r = doc.record;
  const b = ((r && r.branches) || []).find((x) => x.name === name);
  if (b) return b.state;
  if (((r && r.missed) || []).includes(name)) return "missed";
  if (groupState === "succeeded" || groupState === "passed") return "succeeded";
  if (span && span.to) return "passed";
  return span ? "running" : "not_reached";
}

// The rows of the overview, in the order of the graph: a step, a group then its branches, and
// the compensations of the chain.
function overviewRows() {
  const graph = doc.graph;
  if (!graph) return [];
  const gen = currentGeneration();
  const events = doc.timeline.map((e, i) => ({ ...e, i })).filter((e) => e.kind === "execution_event" && e.generation === gen);
  const spanOf = (name, step) => stateSpan(events, name) || (step !== null && !events.length ? recordSpan(gen, step) : null);
  const rows = [];
  for (const s of graph.states) {
    const undo = undoOf(s.name);
    if (undo) {
      rows.push({ name: s.name, kind: "compensation", state: undo.state, step: s.step, span: spanOf(s.name, null), undo });
    } else if ((s.branches || []).length) {
      const span = spanOf(s.name, s.step);
      const state = stepState(gen, s.step, span);
      rows.push({ name: s.name, kind: "group", state, step: s.step, span });
      for (const g of s.branches) {
        const bspan = spanOf(g.start_at, null);
        rows.push({ name: g.start_at, kind: "branch", state: branchState(g.start_at, state, bspan), step: (g.states[0] || {}).step, span: bspan });
      }
    } else if (s.step !== null && s.type === "Task") {
      const span = spanOf(s.name, s.step);
      rows.push({ name: s.name, kind: "step", state: stepState(gen, s.step, span), step: s.step, span });
    }
  }
  return rows;
}

// What a row's bar marks: its tasks going out, and the inputs that named it. `causeOf`: each
// input id's transition cause (an input acknowledging a compensation is `undo`).
function marksOf(row, causeOf) {
  const gen = currentGeneration();
  const compensation = row.kind === "compensation";
  const stepName = compensation ? row.name.replace(/^Undo /, "") : row.name;
  const marks = [];
  doc.timeline.forEach((e, i) => {
    if (e.generation !== undefined && e.generation !== null && e.generation !== gen) return;
    if (e.kind === "task_created" && e.step_name === stepName && (e.task_kind === "compensation") === compensation) {
      marks.push({ i, at: e.at, kind: "task", label: (compensation ? "compensation task" : "task") + (e.attempt > 1 ? " (attempt " + e.attempt + ")" : "") + " out" });
    }
    const named = (e.kind === "receipt" && e.answer && e.answer.step === stepName) || (e.kind === "buffered" && e.step_name === stepName);
    if (named && (causeOf.get(e.input_id) === "undo") === compensation) {
      marks.push({ i, at: e.at, kind: "input", label: (e.kind === "buffered" ? "early input " : "input ") + e.input_id });
    }
  });
  return marks;
}

// The deadline of a row that still waits, or of the compensation it names.
function deadlineOf(row) {
  const r = doc.record;
  if (!r) return null;
  if (row.kind === "compensation") return row.undo.state === "waiting" ? row.undo.deadline : null;
  if (row.kind === "branch") {
    const b = (r.branches || []).find((x) => x.name === row.name);
    return b && b.state === "waiting" ? b.deadline : null;
  }
  return !r.terminal && r.step === row.step && row.state === "waiting" ? r.deadline : null;
}

// The attempt a retried step, branch or compensation is on (1 when never retried).
function attemptOf(row) {
  const r = doc.record;
  if (!r) return 1;
  if (row.kind === "compensation") return row.undo.attempt || 1;
  if (row.kind === "branch") return ((r.branches || []).find((x) => x.name === row.name) || {}).attempt || 1;
  return !r.terminal && r.step === row.step ? r.attempt || 1 : 1;
}

const OPEN = new Set(["waiting", "advancing", "running", "pending"]);

function overviewView() {
  const rows = overviewRows();
  if (!rows.length) return el("p", { class: "empty", id: "overview" }, "The workflow's config is not at hand: its steps are not drawn.");
  const times = doc.timeline.map((e) => ms(e.at)).filter((t) => !Number.isNaN(t));
  const t0 = Math.min(...times), t1 = Math.max(t0 + 1, ...times);
  const pct = (at) => (100 * (ms(at) - t0)) / (t1 - t0);
  const box = el("div", { class: "overview", id: "overview", role: "list", "aria-label": "steps over time" });
  box.append(el("div", { class: "ov-axis", "aria-hidden": "true" }, el("span", {}, clock(new Date(t0).toISOString())),
    el("span", {}, duration(t1 - t0) + " in all"), el("span", {}, clock(new Date(t1).toISOString()))),
  el("p", { class: "ov-legend" }, "A bar is the time the execution spent in the state (dashed end: still there); ",
    el("span", { class: "task" }, "▲"), " a task went out, ", el("span", { class: "input" }, "●"), " an input named it. Click one for its entry in the timeline."));
  const causeOf = new Map();
  for (const e of doc.timeline) if (e.kind === "transition" && e.cause_id) causeOf.set(e.cause_id, e.cause);
  for (const row of rows) {
    const marks = marksOf(row, causeOf);
    const deadline = deadlineOf(row);
    const meta = [];
    if (row.span) meta.push((row.span.to ? "took " : "so far ") + duration((row.span.to ? ms(row.span.to) : t1) - ms(row.span.from)));
    const inputs = marks.filter((m) => m.kind === "input").length;
    if (inputs) meta.push(inputs + " input" + (inputs > 1 ? "s" : ""));
    const attempt = attemptOf(row);
    if (attempt > 1) meta.push("attempt " + attempt);
    if (deadline) meta.push("deadline " + deadline.replace("T", " ").replace(/\.\d+/, ""));
    const label = row.state.replace(/_/g, " ");
    const track = el("div", { class: "ov-track" });
    if (row.span) {
      const bar = el("a", { class: "ov-bar", href: "#entry-" + row.span.entered, "data-state": row.state, title: row.name + ": " + label });
      const from = pct(row.span.from);
      bar.style.left = from + "%";
      bar.style.width = "max(3px, " + ((row.span.to ? pct(row.span.to) : 100) - from) + "%)";
      if (!row.span.to && OPEN.has(row.state)) bar.classList.add("open");
      track.append(bar);
    }
    if (deadline) {
      // Inside the axis, a mark where it falls; past it (the usual case), its distance at the end.
      const at = pct(deadline);
      const mark = el("span", { class: at <= 100 ? "ov-mark deadline" : "ov-deadline", title: "deadline " + deadline },
        at <= 100 ? "" : "deadline in " + duration(ms(deadline) - t1));
      if (at <= 100) mark.style.left = at + "%";
      track.append(mark);
    }
    for (const m of marks) {
      const mark = el("a", { class: "ov-mark " + m.kind, href: "#entry-" + m.i, "data-index": m.i, title: m.label + " at " + clock(m.at) });
      mark.style.left = pct(m.at) + "%";
      track.append(mark);
    }
    box.append(el("div", { class: "ov-row", role: "listitem", "data-row": row.name, "data-kind": row.kind, "data-state": row.state,
      "data-inputs": String(inputs), "data-tasks": String(marks.length - inputs), ...(deadline ? { "data-deadline": deadline } : {}) },
    el("div", { class: "ov-label" },
      el("div", { class: "name", title: row.name }, row.name),
      el("div", { class: "ov-meta", title: meta.join(" · ") }, badge(row.state, label), " ", meta.join(" · "))),
    track));
  }
  return box;
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

// Step Functions' per-state events, folded under the state they belong to: each event from a
// state's `…StateEntered` to its `…StateExited` (of the same generation) goes under the entered
// one; an event between states (ExecutionStarted, ExecutionSucceeded) stands alone. Inside a
// parallel group an event goes to the state entered last, which is a guess: the history does
// not say which branch an event is of. Returns, per entry, the entries folded under it, and the
// set of entries folded under another.
function folds(timeline) {
  const under = timeline.map(() => []);
  const folded = new Set();
  const open = []; // [{ name, generation, at: index }], the states entered and not yet left
  timeline.forEach((e, i) => {
    if (e.kind !== "execution_event") return;
    if (/StateEntered$/.test(e.event_type)) { open.push({ name: e.detail, generation: e.generation, at: i }); return; }
    const exited = /StateExited$/.test(e.event_type);
    let k = open.length - 1;
    while (k >= 0 && (open[k].generation !== e.generation || (exited && open[k].name !== e.detail))) k--;
    if (k < 0) return;
    under[open[k].at].push(i);
    folded.add(i);
    if (exited) open.splice(k, 1);
  });
  return { under, folded };
}

function entryNode(e, i, related) {
  const [kind, detail] = summary(e);
  const links = related[i].length ? " · ↔ " + related[i].length + " related" : "";
  return el("div", { class: "entry", id: "entry-" + i, tabindex: "0", "data-index": i, "data-lane": e.source, "data-kind": e.kind, title: kind + "\n" + detail },
    el("span", { class: "kind" }, kind), el("span", { class: "detail" }, detail + links));
}

function timelineView(related) {
  const { under, folded } = folds(doc.timeline);
  const grid = el("div", { class: "timeline", id: "timeline", role: "table", "aria-label": "timeline" });
  grid.append(el("div", { class: "lane-head time", role: "columnheader" }, "time"));
  for (const lane of LANES) grid.append(el("div", { class: "lane-head", "data-lane": lane, role: "columnheader" }, lane));
  doc.timeline.forEach((e, i) => {
    if (folded.has(i)) return;
    grid.append(el("div", { class: "time", role: "rowheader", title: e.at }, clock(e.at)));
    for (const lane of LANES) {
      const cell = el("div", { class: "lane-" + lane, role: "cell" });
      if (lane === e.source) {
        cell.append(entryNode(e, i, related));
        if (under[i].length) {
          cell.append(el("details", { class: "fold", "data-state": e.detail },
            el("summary", {}, under[i].length + " more event" + (under[i].length > 1 ? "s" : "") + " of this state"),
            under[i].map((j) => el("div", { class: "folded" }, el("span", { class: "at" }, clock(doc.timeline[j].at)), entryNode(doc.timeline[j], j, related)))));
        }
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

// A time to the millisecond, its date and time of day apart (a line may break between them).
const shortTime = (at) => (at ? at.replace("T", " ").replace(/(\.\d{3})\d*/, "$1") : "");

// ---- Executions -------------------------------------------------------------------------------

function executionsView() {
  if (!doc.executions.length) return el("p", { class: "empty" }, "No execution was started.");
  return el("table", { id: "executions" },
    el("tr", {}, ["generation", "status", "started", "stopped", "error"].map((h) => el("th", {}, h))),
    doc.executions.map((x) => el("tr", { "data-generation": x.generation },
      el("td", {}, String(x.generation)), el("td", {}, x.status), el("td", { title: x.started_at }, shortTime(x.started_at)),
      el("td", { title: x.stopped_at }, shortTime(x.stopped_at)), el("td", {}, [x.error, x.cause].filter(Boolean).join(": ")))));
}

// ---- The page ---------------------------------------------------------------------------------

const related = relations(doc.timeline);
document.body.prepend(header());
const main = document.querySelector("main");
const rows = doc.timeline.length - folds(doc.timeline).folded.size;
main.append(
  el("h2", {}, "Overview"), overviewView(),
  el("details", { class: "more", id: "graph-more" }, el("summary", {}, "The state machine: every state and where the run stands"), graphView()),
  el("details", { class: "more", id: "timeline-more" },
    el("summary", {}, "The full timeline: " + doc.timeline.length + " entries in " + rows + " rows, Step Functions' events folded under their state"),
    el("div", { class: "split" },
      el("section", {}, timelineView(related)),
      el("aside", {}, el("h2", {}, "Details"),
        el("div", { id: "details", "aria-live": "polite" }, el("p", { class: "empty" }, "Click an entry of the timeline."))))),
  el("h2", {}, "Executions"), executionsView(),
);
const select = () => {
  const m = /^#entry-(\d+)$/.exec(location.hash);
  if (!m || !doc.timeline[Number(m[1])]) return;
  // The entry's timeline (and its fold) open, and the entry in view.
  const entry = document.getElementById("entry-" + m[1]);
  document.getElementById("timeline-more").open = true;
  const fold = entry.closest("details.fold");
  if (fold) fold.open = true;
  showDetails(Number(m[1]), related);
  entry.scrollIntoView({ block: "nearest" });
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
// For the browser tests: the words the layout broke across two lines (there should be none).
// Every word of every text the page shows, outside the JSON of the details panel; a break right
// after a hyphen ("reserve-" / "stock") is a line break between parts, not a broken word.
function brokenWords() {
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("script, style, pre")) continue;
    for (const m of node.data.matchAll(/[^\s-]+-?/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push(m[0]);
    }
  }
  return broken;
}

// Done: for the browser tests, that the script ran to the end, how wide the page came out, and
// which words broke.
document.body.setAttribute("data-scroll-width", String(document.documentElement.scrollWidth));
document.body.setAttribute("data-broken-words", JSON.stringify(brokenWords()));
document.body.setAttribute("data-rendered", "true");
