//! Task workers: the systems that read the outbound queue and answer each task baton publishes,
//! as a real worker does. An answer names the attempt and the generation of the task it answers
//! (the task's `attempt` and `generation`, as published), never a guess; it comes when the
//! worker is done: at once (in the same millisecond, while the sweep that published the task is
//! still at work, or within a second: inside the functions' clock skew), some minutes on, or,
//! for a step with a `heartbeat`, late in its heartbeat window (with `in_progress`
//! beats first when it takes longer). Some fail their attempt, a few never answer, some answer
//! twice with the same webhook-id, and some answer an attempt again after it failed.
//!
//! A worker reads the queue through [`crate::store::SimPublisher`]'s reader: told of each task as
//! it lands, it spawns the senders of its answers. Which workflows' tasks it answers is the
//! schedule's choice ([`Workers::answering`]); the others' tasks are answered by the plan's
//! senders, who know no task.

use std::collections::BTreeMap;

use baton_core::ports::store::{Task, TaskKind};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

use crate::rng::Rng;
use crate::store::Published;
use crate::workload::{CallbackSend, Parts, TaskRef, send_callback};
use crate::world::{ActorKind, lock};

/// How a schedule's workers answer a workflow's tasks.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How often an attempt of a step is failed (`retryable: false` in one failure in twenty).
    pub fail: f64,
    /// How often a compensation's attempt is failed.
    pub fail_undo: f64,
    /// The `error` and `cause` of most failures, in characters (`None`: short texts).
    pub long_errors: Option<(usize, usize)>,
    /// The longest a worker takes to answer (the usual: some minutes).
    pub within: Duration,
    /// The bytes of data a worker reports with `in_progress` before its answer (0: it beats
    /// only when a heartbeat asks it to).
    pub progress_bytes: usize,
}

impl Policy {
    pub const USUAL: Policy = Policy {
        fail: 0.5,
        fail_undo: 0.25,
        long_errors: None,
        within: Duration::minutes(12),
        progress_bytes: 0,
    };
    /// The wide workflow's: most attempts failed, within seconds (so that the branches' answers
    /// come together), with Step Functions' longest texts, after progress reports of 6 KB.
    pub const WIDE: Policy = Policy {
        fail: 0.7,
        fail_undo: 0.25,
        long_errors: Some((256, 32_768)),
        within: Duration::seconds(6),
        progress_bytes: 6 * 1024,
    };
}

/// The task workers of a schedule.
pub struct Workers {
    parts: Parts,
    rng: Rng,
    /// The workflows whose tasks they answer, and how.
    answering: BTreeMap<String, Policy>,
    /// The tasks answered, by id, with their final answer (`None`: none): a copy published
    /// again is answered again in one case in four (the same answer, under the same
    /// webhook-id), else left.
    answered: BTreeMap<String, Option<(String, Value)>>,
}

impl Workers {
    pub fn new(parts: Parts, rng: Rng) -> Workers {
        Workers { parts, rng, answering: BTreeMap::new(), answered: BTreeMap::new() }
    }

    /// Has the workers answer `workflow`'s tasks as `policy` says.
    pub fn answering(mut self, workflow: &str, policy: Policy) -> Workers {
        self.answering.insert(workflow.to_owned(), policy);
        self
    }

    /// Whether they answer any workflow's tasks.
    pub fn any(&self) -> bool {
        !self.answering.is_empty()
    }

    /// A task landed on the outbound queue.
    pub fn read(&mut self, p: &Published) {
        let t = &p.task;
        let Some(policy) = self.answering.get(t.workflow.as_str()).copied() else { return };
        let task =
            TaskRef { id: t.id.clone(), attempt: t.attempt, generation: t.generation, published_at: p.at };
        if let Some(first) = self.answered.get(&t.id).cloned() {
            if let Some((what, body)) = first.filter(|_| self.rng.chance(0.25)) {
                let after = Duration::seconds(self.rng.range(0, 3 * 60));
                self.send(t, &task, &what, body, after);
            }
            return;
        }
        let answer = match t.kind {
            TaskKind::Step => self.answer_step(t, &task, policy),
            TaskKind::Compensation => self.answer_undo(t, &task, policy),
            // (The workflows whose tasks these workers take declare no reminders nor escalation.)
            TaskKind::Reminder | TaskKind::Escalation => return,
        };
        self.answered.insert(t.id.clone(), answer);
    }

    /// The step's heartbeat, in the config deployed now.
    fn heartbeat(&self, t: &Task) -> Option<Duration> {
        let live = self.parts.live();
        let step = live
            .config
            .workflow(t.workflow.as_str())?
            .steps
            .iter()
            .find(|s| s.name.as_str() == t.step_name)?;
        step.heartbeat.and_then(|h| Duration::try_from(h).ok())
    }

    /// The answers to a step's task: a success or a failure of its attempt (or none), perhaps
    /// beats before, perhaps a copy after, perhaps another answer for the attempt once it failed.
    fn answer_step(&mut self, t: &Task, task: &TaskRef, policy: Policy) -> Option<(String, Value)> {
        let rng = &mut self.rng;
        if rng.chance(0.05) {
            return None;
        }
        let fail = rng.chance(policy.fail);
        let heartbeat = self.heartbeat(t);
        let rng = &mut self.rng;
        let after = match heartbeat {
            // Late in the heartbeat window, where a failure's backoff may outlast what is left.
            Some(h) if rng.chance(0.5) => h * (rng.range(60, 90) as f64 / 100.0),
            // At once: an automated worker long-polling the queue answers in milliseconds,
            // while the sweep that published the task is still at work.
            _ if rng.chance(0.2) => Duration::ZERO,
            _ if rng.chance(0.2) => Duration::milliseconds(rng.range(1, 300)),
            _ => {
                Duration::seconds(rng.range(policy.within.whole_seconds() / 6, policy.within.whole_seconds()))
            }
        };
        // A worker that takes longer than its heartbeat beats while it works.
        if let Some(h) = heartbeat {
            let mut beat = Duration::ZERO;
            let mut n = 0;
            while beat + h * 0.9 < after {
                beat += h * (self.rng.range(30, 70) as f64 / 100.0);
                let body = step_body(t, task, "in_progress", policy, &mut self.rng);
                self.send(t, task, &format!("beat{n}"), body, beat);
                n += 1;
            }
        }
        if policy.progress_bytes > 0 {
            let mut body = step_body(t, task, "in_progress", policy, &mut self.rng);
            body["data"] = json!({ format!("log{}", task.attempt): "p".repeat(policy.progress_bytes) });
            self.send(t, task, "progress", body, after / 2);
        }
        let outcome = if fail { "failed" } else { "succeeded" };
        let body = step_body(t, task, outcome, policy, &mut self.rng);
        self.send(t, task, outcome, body.clone(), after);
        if self.rng.chance(0.15) {
            let again = after + Duration::seconds(self.rng.range(0, 3 * 60));
            self.send(t, task, outcome, body.clone(), again);
        }
        // The attempt answered again once it failed (a second worker, a late success): the
        // failed attempt's, ignored (`earlier_attempt`) if the next one runs by then.
        if fail && self.rng.chance(0.15) {
            let late = after + Duration::seconds(self.rng.range(30, 5 * 60));
            let body = step_body(t, task, "succeeded", policy, &mut self.rng);
            self.send(t, task, "late", body, late);
        }
        Some((outcome.to_owned(), body))
    }

    /// The acknowledgement of a compensation's task: its attempt done or failed (or none), some
    /// at once, some minutes on, some twice.
    fn answer_undo(&mut self, t: &Task, task: &TaskRef, policy: Policy) -> Option<(String, Value)> {
        let rng = &mut self.rng;
        if rng.chance(0.05) {
            return None;
        }
        let outcome = if rng.chance(policy.fail_undo) { "failed" } else { "succeeded" };
        let after = if rng.chance(0.2) {
            Duration::ZERO
        } else if rng.chance(0.2) {
            Duration::milliseconds(rng.range(1, 1000))
        } else {
            Duration::seconds(rng.range(20, 4 * 60))
        };
        let mut body = json!({"workflow": t.workflow.as_str(), "key": t.key.as_str(), "step": t.step_name,
            "outcome": outcome, "compensation": true, "generation": task.generation, "attempt": task.attempt});
        if outcome == "failed" {
            let (error, cause) = texts(policy, &mut self.rng, "UndoFailed", task);
            body["error"] = json!(error);
            body["cause"] = json!(cause);
        }
        self.send(t, task, outcome, body.clone(), after);
        if self.rng.chance(0.2) {
            let again = after + Duration::seconds(self.rng.range(0, 3 * 60));
            self.send(t, task, outcome, body.clone(), again);
        }
        Some((outcome.to_owned(), body))
    }

    /// Spawns the sender of `body`, `after` the task landed, under a webhook-id of the task and
    /// `what` (the same `what` again is the same callback, sent again).
    fn send(&mut self, t: &Task, task: &TaskRef, what: &str, body: Value, after: Duration) {
        let world = &self.parts.world;
        let at = task.published_at + after;
        let epoch = OffsetDateTime::from_unix_timestamp(crate::EPOCH).expect("a time");
        let c = CallbackSend {
            at: at - epoch,
            id: format!("wk:{}:{what}", t.id),
            key: t.key.to_string(),
            step: t.step_name.clone(),
            body,
            task: Some(task.clone()),
        };
        lock(&self.parts.stack.evidence).callbacks.push(c.clone());
        let name = format!("worker:{}", c.id);
        world.spawn(name, ActorKind::External, Box::pin(send_callback(self.parts.clone(), at, c)));
    }
}

/// A step's answer `outcome` for the task `task`: its attempt and generation named, with the
/// data its step requires (`verdict`), or the failure's error and cause.
fn step_body(t: &Task, task: &TaskRef, outcome: &str, policy: Policy, rng: &mut Rng) -> Value {
    let data = if outcome == "succeeded" { json!({"verdict": "ok"}) } else { json!({}) };
    let mut body = json!({"workflow": t.workflow.as_str(), "key": t.key.as_str(), "step": t.step_name,
        "outcome": outcome, "data": data, "generation": task.generation, "attempt": task.attempt});
    if outcome == "failed" {
        let (error, cause) = texts(policy, rng, "WorkerDown", task);
        body["error"] = json!(error);
        body["cause"] = json!(cause);
        if rng.chance(0.05) {
            body["retryable"] = json!(false);
        }
    }
    body
}

/// A failure's `error` and `cause`: short, or as long as the policy says (up to Step Functions'
/// limits).
fn texts(policy: Policy, rng: &mut Rng, error: &str, task: &TaskRef) -> (String, String) {
    match policy.long_errors {
        Some((e, c)) if rng.chance(0.8) => {
            let cause = format!("attempt {} ", task.attempt);
            let pad = c.saturating_sub(cause.len());
            ("E".repeat(e), cause + &"c".repeat(pad))
        }
        _ => (error.to_owned(), format!("attempt {} failed", task.attempt)),
    }
}
