//! The invariants, checked after every schedule from the outside: from the simulated services'
//! own logs (Step Functions' starts and resumes, the outbound queue, the store's landed writes,
//! the dead-letter queues) and from what senders and operators were told, not from baton's
//! account of itself.

use std::collections::{BTreeMap, BTreeSet};

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{
    Cause, IgnoreReason, Input, RESEND_RESUME_AFTER, State, payload_fingerprint,
};
use baton_core::ports::orchestrator::ExecutionStatus;
use baton_core::ports::store::{InboxStatus, WorkflowStore};
use serde_json::Value;

use crate::sqs::QueueId;
use crate::workload::{Plan, block_on, event_id};
use crate::world::lock;
use crate::{Outcome, Stack};

/// Failures of token calls baton makes to end an execution rather than to answer its step.
const ENDING_ERRORS: &[&str] =
    &["baton.Cancelled", "baton.Terminal", "baton.StaleGeneration", "baton.NoRecord", "baton.UnknownStep"];

struct Checker<'a> {
    outcome: &'a mut Outcome,
}

impl Checker<'_> {
    fn check(&mut self, ok: bool, violation: impl FnOnce() -> String) {
        self.outcome.checks += 1;
        if !ok {
            self.outcome.violations.push(violation());
        }
    }
}

/// After the long jump: late copies of events, weeks on, changed nothing. No execution
/// started, no record was written (every record was terminal), and nothing broke a rule the
/// store enforces.
pub fn after_long_jump(
    stack: &Stack,
    (starts, writes, violations): (usize, usize, usize),
    outcome: &mut Outcome,
) {
    outcome.violations.extend(lock(&stack.violations).iter().skip(violations).cloned());
    let mut c = Checker { outcome };
    let model = lock(&stack.sfn);
    c.check(model.starts.len() == starts, || {
        format!("a late event weeks after the end started {:?}", &model.starts[starts..])
    });
    let landed = lock(&stack.store.writes);
    c.check(landed.len() == writes, || {
        let w = &landed[writes];
        format!("a late event weeks after the end moved {}/{} to {}", w.to.workflow, w.to.key, w.to.state)
    });
}

#[expect(clippy::too_many_lines, reason = "split into one checker per invariant next")]
pub fn all(
    stack: &Stack,
    plan: &Plan,
    (settled_by, waiting_at_calm): (time::OffsetDateTime, &[baton_core::domain::lifecycle::Record]),
    outcome: &mut Outcome,
) {
    outcome.violations.extend(lock(&stack.violations).iter().cloned());
    let mut c = Checker { outcome };
    let cursed = plan.cursed.as_deref();
    let writes = lock(&stack.store.writes).clone();
    let model = lock(&stack.sfn);
    let published = lock(&stack.publisher.log).clone();
    let evidence = lock(&stack.evidence);
    let sqs = lock(&stack.sqs);
    let records = stack.memory.records();
    let settles = lock(&stack.store.settles).clone();
    let version_of = |v: Option<&String>| stack.store.deployed(v);

    // Step Functions' limits: baton never asks for what AWS refuses (an error or cause too
    // long, a payload over 256 KiB). Refused, the call can never succeed, however often it is
    // retried.
    c.check(model.refused.is_empty(), || {
        format!("Step Functions would refuse calls baton made: {}", model.refused.join("; "))
    });
    // Executions that failed on a limit of their own (States.DataLimitExceeded, States.Runtime)
    // never reported to baton.
    for e in model.executions.values() {
        let failure = e.failure.as_ref().map(|f| f.0.as_str());
        c.check(!matches!(failure, Some("States.DataLimitExceeded" | "States.Runtime")), || {
            format!("execution {} failed with {:?}: Step Functions' limits stopped it", e.arn, e.failure)
        });
    }

    // The inbox handshake: an entry put while its step already waited is followed by its
    // invocation reading the record (and draining if the step still waits), or, if that
    // invocation failed or died, by a read of that inbox (the sender's retry, a redelivery).
    // Otherwise the progress side may have drained before the entry landed: the lost wake-up.
    for late in lock(&stack.store.late_puts).iter() {
        if cursed == Some(late.key.as_str()) {
            continue;
        }
        // Not stranded: a redelivery of the input was applied straight to its step, or another
        // input completed the step (the late one was then not needed; it expires, ledgered).
        let applied = records.iter().any(|r| {
            r.workflow.as_str() == late.workflow
                && r.key.as_str() == late.key
                && r.applied.iter().any(|a| a.id.as_str() == late.id && a.step == Some(late.step))
        });
        let completed = writes.iter().any(|w| {
            w.to.workflow.as_str() == late.workflow
                && w.to.key.as_str() == late.key
                && Some(w.to.generation) == late.generation
                && w.from == Some(State::Waiting { step: late.step })
                && w.to.state == State::Advancing { step: late.step }
        });
        c.check(applied || completed, || {
            format!(
                "{} buffered an input for {} step {} while the step waited, and nothing read the record or that inbox after",
                late.actor, late.key, late.step
            )
        });
    }

    // A terminal record never changes: the only write from a terminal state opens the next
    // generation.
    for w in &writes {
        if let (Some(from), Some(g)) = (w.from, w.from_generation) {
            c.check(!from.is_terminal() || w.to.generation == g + 1, || {
                format!(
                    "terminal record {}/{} (generation {g}, {from}) changed to {} in the same generation",
                    w.to.workflow, w.to.key, w.to.state
                )
            });
        }
    }

    // A start event seen again never opens another generation: each generation was opened (a
    // landed start or restart write) by an event of its own.
    let mut opened_by: BTreeMap<(String, String, String), BTreeSet<u32>> = BTreeMap::new();
    for w in &writes {
        if let Some(a) = w.to.history.last().filter(|a| matches!(a.cause, Cause::Start | Cause::Restart))
            && let Some(id) = &a.cause_id
        {
            let at = (w.to.workflow.to_string(), w.to.key.to_string(), id.to_string());
            opened_by.entry(at).or_default().insert(w.to.generation);
        }
    }
    for ((workflow, key, id), generations) in &opened_by {
        c.check(generations.len() == 1, || {
            format!("{workflow}/{key}: start event {id} opened generations {generations:?}")
        });
    }

    // At most one execution per (workflow, key, generation), and no generation without a start
    // event of its own.
    for wf in &stack.config.workflows {
        for key in &plan.keys {
            let prefix = format!("{PREFIX_EXEC}{}:{}-{key}-g", wf.name, wf.name);
            let generations: BTreeSet<u32> = model
                .starts
                .iter()
                .filter_map(|(arn, _)| arn.strip_prefix(&prefix).and_then(|g| g.parse().ok()))
                .collect();
            let starts = model.starts.iter().filter(|(arn, _)| arn.starts_with(&prefix)).count();
            c.check(starts == generations.len(), || {
                format!("{}/{key}: {starts} starts for {} generations", wf.name, generations.len())
            });
            let distinct_start_events = plan
                .events
                .iter()
                .filter(|e| {
                    e.body.contains("\"order.placed\"") && e.body.contains(&format!("\"subject\":\"{key}\""))
                })
                .filter_map(|e| event_id(&e.body))
                .collect::<BTreeSet<_>>()
                .len();
            let max = generations.iter().max().copied().unwrap_or(0) as usize;
            c.check(max <= distinct_start_events, || {
                format!("{}/{key}: generation {max} started, but only {distinct_start_events} distinct start event(s) were sent", wf.name)
            });
        }
    }

    // One task per (workflow, key, generation, step), published at least once, always the same.
    let mut tasks: BTreeMap<String, Vec<&crate::store::Published>> = BTreeMap::new();
    for p in &published {
        tasks.entry(p.task.id.clone()).or_default().push(p);
    }
    for (id, copies) in &tasks {
        let first = &copies[0].task;
        c.check(
            copies.iter().all(|p| {
                p.task.title == first.title && p.task.queue == first.queue && p.task.step == first.step
            }),
            || format!("task {id} was published with different contents"),
        );
    }
    // Pinning: a record is decided on the config version its generation runs, whatever was
    // deployed since. Every landed write's step is a step of its version, a generation changes
    // version only at its first step (to the one its execution runs), and every task published
    // is its version's task for that step, named and titled as that version defines it.
    let mut generation_version: BTreeMap<(String, String, u32), String> = BTreeMap::new();
    for w in &writes {
        let r = &w.to;
        let Some(config) = version_of(r.config_version.as_ref()) else {
            c.check(false, || {
                format!(
                    "{}/{} was written with config version {:?}, never deployed",
                    r.workflow, r.key, r.config_version
                )
            });
            continue;
        };
        let steps = config.workflow(r.workflow.as_str()).map_or(0, |wf| wf.steps.len());
        c.check(r.state.step().is_none_or(|s| (s as usize) < steps), || {
            format!(
                "{}/{} moved to {}, past the {steps} step(s) of its config version {}",
                r.workflow, r.key, r.state, config.version
            )
        });
        let first = generation_version
            .entry((r.workflow.to_string(), r.key.to_string(), r.generation))
            .or_insert_with(|| config.version.clone());
        // The one change allowed: the first step's report confirms the version the execution
        // runs (a start that crossed a deploy), before any step happened.
        if w.from == Some(State::Pending) && r.state == (State::Waiting { step: 0 }) {
            *first = config.version.clone();
        }
        c.check(*first == config.version, || {
            format!(
                "{}/{} generation {} changed config version {first} -> {}",
                r.workflow, r.key, r.generation, config.version
            )
        });
    }
    for p in &published {
        let t = &p.task;
        let at = (t.workflow.to_string(), t.key.to_string(), t.generation);
        let Some(config) = generation_version.get(&at).and_then(|v| version_of(Some(v))) else { continue };
        let Some(wf) = config.workflow(t.workflow.as_str()) else { continue };
        let spec = wf.steps.get(t.step as usize);
        let expected = spec.and_then(|s| {
            let title =
                s.task.as_ref()?.render(t.workflow.as_str(), t.key.as_str(), s.name.as_str(), t.generation);
            Some((s.name.to_string(), title))
        });
        c.check(expected.as_ref() == Some(&(t.step_name.clone(), t.title.clone())), || {
            format!(
                "task {} ({} {:?}) is not step {} of config version {}: {expected:?}",
                t.id, t.step_name, t.title, t.step, wf.config_version
            )
        });
    }

    // Once the faults stop and the operator has replayed the DLQs, every step that still waits
    // gets its task within one visibility timeout (when whatever left it owed has come round
    // again): nothing a crash, a dead letter or a removed noop line left owed is lost. A step answered or ended before then needs no task: its
    // work is over.
    for r in waiting_at_calm {
        let State::Waiting { step } = r.state else { continue };
        if cursed == Some(r.key.as_str()) {
            continue;
        }
        let left_at = writes
            .iter()
            .filter(|w| {
                w.to.workflow == r.workflow
                    && w.to.key == r.key
                    && w.from == Some(r.state)
                    && w.from_generation == Some(r.generation)
            })
            .find(|w| w.to.state != r.state)
            .map(|w| w.at);
        if left_at.is_some_and(|t| t <= settled_by) {
            continue;
        }
        let Some(config) = version_of(r.config_version.as_ref()) else { continue };
        let Some(wf) = config.workflow(r.workflow.as_str()) else { continue };
        let Some(spec) = wf.steps.get(step as usize) else { continue };
        if spec.task.is_none() {
            continue;
        }
        let id =
            baton_core::ports::store::Task::task_id(&r.workflow, &r.key, r.generation, spec.name.as_str());
        c.check(tasks.contains_key(&id), || {
            format!("{id}: the step was waiting when the faults stopped, and its task was never published")
        });
    }

    // Each step of a generation advances at most once, whatever was delivered twice, retried or
    // replayed.
    for violation in steps_advanced_twice(&writes) {
        c.check(false, || violation);
    }

    // Each owed resume: one payload per token, re-sent only after the grace period, accepted at
    // most once.
    let mut by_token: BTreeMap<&str, Vec<&crate::sfn::ResumeCall>> = BTreeMap::new();
    for r in &model.resumes {
        if r.sdk_retry || ENDING_ERRORS.iter().any(|e| r.payload == format!("failure {e}")) {
            continue;
        }
        by_token.entry(r.token.as_str()).or_default().push(r);
    }
    // When each resume became owed: the `updated_at` of the item that moved its record to
    // `advancing` (the write lands a call's latency later, bounded by the SDK's timeouts).
    let mut owed_since: BTreeMap<&str, time::OffsetDateTime> = BTreeMap::new();
    for w in &writes {
        if let (State::Advancing { .. }, Some(token)) = (w.to.state, &w.to.token) {
            owed_since.entry(token.expose()).or_insert(w.to.updated_at);
        }
    }
    for (token, calls) in &by_token {
        let first = &calls[0].payload;
        c.check(calls.iter().all(|r| &r.payload == first), || {
            format!(
                "token {token} was resumed with different payloads: {:?}",
                calls.iter().map(|r| &r.payload).collect::<Vec<_>>()
            )
        });
        // The first send may come whenever its sender gets to it; any further send only once
        // the resume has been owed for the grace period (the first sender may still be at work).
        if let Some(since) = owed_since.get(token) {
            for again in calls.iter().skip(1) {
                c.check(again.at - *since >= RESEND_RESUME_AFTER, || {
                    format!("token {token}: a resume re-sent {} after it became owed, inside the {RESEND_RESUME_AFTER} grace period", again.at - *since)
                });
            }
        }
        c.check(calls.iter().filter(|r| r.accepted).count() <= 1, || {
            format!("token {token} accepted more than one resume")
        });
    }

    // What a sender was told is true, and the same every time once done.
    let mut finals: BTreeMap<(&str, &str), Vec<&Value>> = BTreeMap::new();
    for a in &evidence.attempts {
        let Some((status, body)) = &a.answer else { continue };
        let what = body["status"].as_str().unwrap_or("");
        let f = &a.facts;
        match (*status, what) {
            (200, "applied") => c.check(f.in_record, || {
                format!("{} was answered applied, but the record does not have it", a.id)
            }),
            (202, "buffered") => {
                c.check(f.inbox, || format!("{} was answered buffered, but no inbox entry holds it", a.id))
            }
            (200, "ignored") => c.check(f.ledger && !f.in_record && !f.inbox, || {
                format!(
                    "{} was answered ignored, but the ledger does not have it, or it changed the record or an inbox: {f:?}",
                    a.id
                )
            }),
            (409, _) => c.check(f.other_receipt, || {
                format!("{} was answered 409 without an earlier receipt of another payload", a.id)
            }),
            // (What the store holds under this id may be another payload's: a refused conflict.)
            (503, _) if body["maybe_applied"] == false => c
                .check((!f.in_record && !f.inbox) || f.other_receipt, || {
                    format!("{} was answered 503 \"nothing was applied\", but the store has it", a.id)
                }),
            _ => {}
        }
        // A final answer about the input: not a refusal of the request itself (signature, body
        // size, shape), which says nothing about what was applied. A merge refused as too large
        // (413 `inputs_too_large`) is about the input, kept on its receipt.
        let about_the_request =
            [400, 401, 404].contains(status) || (*status == 413 && body["error"] != "inputs_too_large");
        if *status < 500 && !about_the_request {
            finals.entry((a.id.as_str(), a.hash.as_str())).or_default().push(body);
        }
    }
    for ((id, _), bodies) in &finals {
        let strip = |b: &Value| {
            let mut b = b.clone();
            if let Some(o) = b.as_object_mut() {
                o.remove("duplicate");
            }
            b
        };
        let first = strip(bodies[0]);
        c.check(bodies.iter().all(|b| strip(b) == first), || {
            format!("{id} got different answers: {bodies:?}")
        });
    }

    // Nothing is lost: every input ends with a classification an operator can see.
    let traces: BTreeMap<(String, String), baton_core::ports::store::Trace> = stack
        .config
        .workflows
        .iter()
        .flat_map(|wf| plan.keys.iter().map(move |k| (wf.name.clone(), k.clone())))
        .map(|(w, k)| {
            let key = CorrelationKey::parse(k.as_str()).expect("a key");
            let trace = block_on(stack.memory.trace(&w, &key)).unwrap_or_default();
            ((w.to_string(), k), trace)
        })
        .collect();
    let dead: Vec<&crate::sqs::Message> =
        sqs.messages(QueueId::IntakeDlq).iter().chain(sqs.messages(QueueId::ProgressDlq)).collect();
    let classified = |workflow: &str, key: &str, id: &str| -> bool {
        let Some(t) = traces.get(&(workflow.to_owned(), key.to_owned())) else { return false };
        t.record.as_ref().is_some_and(|r| {
            r.history.iter().any(|a| a.cause_id.as_deref() == Some(id))
                || r.applied.iter().any(|a| a.id.as_str() == id)
                || r.start_events.iter().any(|e| e.as_str() == id)
        }) || t.inbox.iter().any(|e| e.id.as_str() == id && e.status != InboxStatus::Buffered)
            || t.ledger.iter().any(|l| l.input_id == id)
            || writes.iter().any(|w| {
                w.to.workflow.as_str() == workflow
                    && w.to.key.as_str() == key
                    && w.to.history.last().is_some_and(|a| a.cause_id.as_deref() == Some(id))
            })
    };
    for a in &evidence.attempts {
        if cursed == Some(a.key.as_str()) || a.answer.is_none() {
            continue;
        }
        let rejected_traced = a.answer.as_ref().is_some_and(|(s, _)| *s == 409) && a.facts.ledger;
        c.check(
            classified(&a.workflow, &a.key, &a.id)
                || rejected_traced
                || a.answer.as_ref().is_some_and(|(s, _)| *s >= 400 && *s != 409),
            || {
                format!(
                    "callback {} to {}/{} ({}) ends with no classification an operator can see",
                    a.id, a.workflow, a.key, a.step
                )
            },
        );
    }
    // An input for a step is classified for that step, by name (indices are resolved in the
    // config version each was written under): an event that two steps accept is applied,
    // buffered or ledgered for each, never dropped for one as a duplicate of the other.
    let step_name = |version: Option<&String>, workflow: &str, index: u64| -> Option<String> {
        let config = version_of(version)?;
        Some(config.workflow(workflow)?.steps.get(usize::try_from(index).ok()?)?.name.to_string())
    };
    let classified_for_step = |workflow: &str, key: &str, id: &str, name: &str| -> bool {
        let Some(t) = traces.get(&(workflow.to_owned(), key.to_owned())) else { return false };
        let settled =
            t.inbox.iter().any(|e| e.id.as_str() == id && e.step_name == name && e.status.is_final());
        // A ledger line is kept per (reason, input id), as the product keys it: the copies for
        // two steps ignored for one reason share it.
        let ledgered = t.ledger.iter().any(|l| l.input_id == id);
        let applied = writes
            .iter()
            .filter(|w| w.to.workflow.as_str() == workflow && w.to.key.as_str() == key)
            .any(|w| {
                w.to.applied.iter().any(|a| {
                    let g = a.generation.unwrap_or(w.to.generation);
                    let version = generation_version.get(&(workflow.to_owned(), key.to_owned(), g));
                    a.id.as_str() == id
                        && a.step.is_some_and(|s| {
                            step_name(version, workflow, u64::from(s)).as_deref() == Some(name)
                        })
                })
            });
        // Applied under its id in a generation before the record's last: a copy delivered in a
        // later run is a duplicate of that event (steps may be numbered otherwise there), never
        // applied to the new run.
        let earlier_run = t.record.as_ref().is_some_and(|r| {
            r.applied.iter().any(|a| a.id.as_str() == id && a.generation.is_some_and(|g| g < r.generation))
        });
        settled || ledgered || applied || earlier_run
    };
    for e in &plan.events {
        let Ok(parsed) = baton_core::use_cases::intake::plan_event(&stack.config, &e.body) else { continue };
        for (wf, key, input) in &parsed.inputs {
            if cursed == Some(key.as_str()) {
                continue;
            }
            let id = input.id().map(ToString::to_string).unwrap_or_default();
            let in_dlq = dead.iter().any(|m| {
                m.body == e.body
                    && m.attributes.contains_key(baton_core::ports::dead_letters::REASON_ATTRIBUTE)
            });
            let for_its_step = match input {
                Input::StepInput { step, .. } => wf.steps.get(*step as usize).is_none_or(|s| {
                    classified_for_step(wf.name.as_str(), key.as_str(), &id, s.name.as_str())
                }),
                _ => true,
            };
            c.check((classified(wf.name.as_str(), key.as_str(), &id) && for_its_step) || in_dlq, || {
                let step = match input {
                    Input::StepInput { step, .. } => format!("step {step}"),
                    _ => "start".into(),
                };
                format!(
                    "event {id} for {}/{key} ({step}) ends with no classification an operator can see",
                    wf.name
                )
            });
        }
    }

    // An input buffered for one generation is never applied to another, and ends with exactly
    // one classification: an entry marked applied was applied to its step, one marked expired
    // or ignored never was (an input both applied and ledgered expired was found by review).
    for t in traces.values() {
        let Some(record) = &t.record else { continue };
        let mine = writes.iter().filter(|w| w.to.key == record.key && w.to.workflow == record.workflow);
        for entry in &t.inbox {
            let applied_in: BTreeSet<u32> = mine
                .clone()
                .filter(|w| matches!(w.to.history.last(), Some(a) if a.cause_id.as_deref() == Some(entry.id.as_str()) && matches!(a.cause, Cause::Merge | Cause::Complete | Cause::FailStep)))
                .filter(|w| w.to.state.step() == Some(entry.step))
                .map(|w| w.to.generation)
                .collect();
            c.check(applied_in.len() <= 1, || {
                format!(
                    "{}/{} input {} (step {}) was applied in generations {applied_in:?}",
                    record.workflow, record.key, entry.id, entry.step
                )
            });
            // This very input (the same payload, not another one reusing its id) applied to
            // its step: in which generations, first by which landed write (its index).
            let hash = entry.input.get("hash").and_then(Value::as_str).map(payload_fingerprint);
            let mut first_applied: BTreeMap<u32, usize> = BTreeMap::new();
            for (i, w) in writes.iter().enumerate() {
                if w.to.key != record.key || w.to.workflow != record.workflow {
                    continue;
                }
                for a in &w.to.applied {
                    if a.id == entry.id
                        && a.step == Some(entry.step)
                        && Some(payload_fingerprint(&a.hash)) == hash
                    {
                        first_applied.entry(a.generation.unwrap_or(w.to.generation)).or_insert(i);
                    }
                }
            }
            let this_applied_in: BTreeSet<u32> = first_applied.keys().copied().collect();
            // Settled expired or ignored, it was never applied before its fate was decided (its
            // ledger line, or its settle): a delivery of the same id after that (a redelivered
            // event finding its step waiting) is applied on its own merits; the trace shows both.
            let settled_at = settles
                .iter()
                .filter(|s| s.key == record.key.as_str() && s.id == entry.id.as_str())
                .filter(|s| s.step_name.as_ref().is_none_or(|n| *n == entry.step_name))
                .map(|s| s.after_writes)
                .min()
                .unwrap_or(usize::MAX);
            let applied_before_settle = |g: Option<u32>| {
                first_applied.iter().any(|(ag, i)| g.is_none_or(|g| g == *ag) && *i < settled_at)
            };
            let consistent = match entry.status {
                InboxStatus::Buffered => true,
                // Held by a drain or a sweep that never finished: nothing finished it after the
                // faults stopped, the sweeps ran and every deadline passed.
                InboxStatus::Draining | InboxStatus::Expiring => cursed == Some(record.key.as_str()),
                // Applied in the generation it waited for, not merely somewhere.
                InboxStatus::Applied => {
                    entry.generation.map_or(!this_applied_in.is_empty(), |g| this_applied_in.contains(&g))
                }
                InboxStatus::Expired | InboxStatus::Ignored => !applied_before_settle(entry.generation),
            };
            // Applied, it has no ledger line saying it expired (a step that began waiting
            // inside the sweep's expiry, found by review).
            let ledgered_expired = t.ledger.iter().any(|l| {
                l.input_id == entry.id.as_str()
                    && l.reason == IgnoreReason::BufferExpired
                    && l.generation == entry.generation
                    && l.detail.get("step") == entry.input.get("step")
            });
            c.check(!(entry.status == InboxStatus::Applied && ledgered_expired), || {
                format!(
                    "{}/{} input {} (step {}, generation {:?}) is applied, and ledgered buffer_expired",
                    record.workflow, record.key, entry.id, entry.step, entry.generation
                )
            });
            c.check(consistent, || {
                format!(
                    "{}/{} input {} (step {}, generation {:?}) is {} in the inbox, and was applied in generations {this_applied_in:?}",
                    record.workflow,
                    record.key,
                    entry.id,
                    entry.step,
                    entry.generation,
                    entry.status.as_str()
                )
            });
        }
    }

    // A cancel an operator saw succeed had ended its execution by then.
    for cancel in &evidence.cancels {
        c.check(cancel.execution_ended, || {
            format!(
                "{}/{} generation {} was cancelled, but its execution was still running",
                cancel.workflow, cancel.key, cancel.generation
            )
        });
    }

    // A rejected input leaves a trace an operator can find: an event reusing an id with another
    // payload is dead-lettered with its reason, or ledgered.
    let mut bodies: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for e in &plan.events {
        if let Some(id) = event_id(&e.body) {
            bodies.entry(id.to_string()).or_default().push(&e.body);
        }
    }
    for (id, list) in &bodies {
        let distinct: BTreeSet<&&str> = list.iter().collect();
        if distinct.len() < 2 {
            continue;
        }
        // Refused (`idempotency_key_reused`), or ignored for another reason (the record had ended):
        // either way in the ledger, or dead-lettered with a reason.
        let traced = dead.iter().any(|m| {
            list.contains(&m.body.as_str())
                && m.attributes.contains_key(baton_core::ports::dead_letters::REASON_ATTRIBUTE)
        }) || traces.values().any(|t| t.ledger.iter().any(|l| l.input_id == *id));
        let applied_everywhere =
            plan.cursed.as_ref().is_some_and(|k| list[0].contains(&format!("\"subject\":\"{k}\"")));
        c.check(traced || applied_everywhere || !evidence_reached(&writes, id), || {
            let ledger: Vec<String> = traces.values().flat_map(|t| t.ledger.iter().map(|l| format!("{}:{}", l.input_id, l.reason.as_str()))).collect();
            let inbox: Vec<String> = traces.values().flat_map(|t| t.inbox.iter().map(|e| format!("{}:{}", e.id, e.status.as_str()))).collect();
            format!("event {id} was sent with {} different payloads, and the refused one left no trace (ledger {ledger:?}, inbox {inbox:?})", distinct.len())
        });
    }

    // Liveness: after the last fault and every deadline, everything has ended.
    for r in &records {
        if cursed == Some(r.key.as_str()) {
            continue;
        }
        c.check(r.state.is_terminal(), || {
            format!(
                "record {}/{} is still {} (generation {}) after every deadline",
                r.workflow, r.key, r.state, r.generation
            )
        });
    }
    for e in model.executions.values() {
        if cursed.is_some_and(|k| e.arn.contains(&format!("-{k}-g"))) {
            continue;
        }
        c.check(e.status != ExecutionStatus::Running, || {
            format!("execution {} is still running after every deadline", e.arn)
        });
    }
    for queue in [QueueId::Intake, QueueId::Progress] {
        let left = sqs.messages(queue).len();
        c.check(left == 0, || format!("{left} message(s) still in the {queue:?} queue"));
    }
    for m in &dead {
        // The cursed key fails every call for good; if the dead-letter send also failed on its
        // last receive, SQS's redrive moved it without a reason. So it does when the function
        // died on the last receive, or its own dead-letter send failed: baton could not say why
        // (RUNBOOK.md says so).
        if cursed.is_some_and(|k| m.body.contains(&format!("\"{k}\"")))
            || m.attributes.contains_key(crate::sqs::DIED_ATTRIBUTE)
            || m.attributes.contains_key(crate::sqs::SEND_FAILED_ATTRIBUTE)
        {
            continue;
        }
        // baton's own dead-letter send landed but its answer was lost: the function failed the
        // receive and SQS moved the message too. The reasoned copy names this one as its source.
        let reasoned_twin = dead.iter().any(|d| {
            d.attributes.get(baton_core::ports::dead_letters::SOURCE_ATTRIBUTE) == Some(&m.id)
                && d.attributes.contains_key(baton_core::ports::dead_letters::REASON_ATTRIBUTE)
        });
        if reasoned_twin {
            continue;
        }
        // A throttle says nothing about the message: it is requeued, never dead-lettered.
        let detail = m
            .attributes
            .get(baton_core::ports::dead_letters::DETAIL_ATTRIBUTE)
            .map(String::as_str)
            .unwrap_or("");
        let throttled = detail.split_whitespace().next().unwrap_or("").ends_with("_throttled");
        c.check(!throttled || detail.contains(baton_core::ports::dead_letters::REQUEUE_FAILED), || {
            format!("a throttled message was dead-lettered: {} ({detail})", m.id)
        });
        c.check(m.attributes.contains_key(baton_core::ports::dead_letters::REASON_ATTRIBUTE), || {
            format!(
                "dead-lettered message {} has no reason: {}",
                m.id,
                m.body.chars().take(120).collect::<String>()
            )
        });
    }
}

/// Each step of a generation advances at most once: one landed write from waiting on it to
/// advancing past it. The violations, if any.
fn steps_advanced_twice(writes: &[crate::store::Landed]) -> Vec<String> {
    let mut advanced: BTreeMap<(String, String, u32, u32), usize> = BTreeMap::new();
    for w in writes {
        if let (Some(State::Waiting { step: from }), State::Advancing { step }) = (w.from, w.to.state)
            && from == step
            && w.from_generation == Some(w.to.generation)
        {
            let at = (w.to.workflow.to_string(), w.to.key.to_string(), w.to.generation, step);
            *advanced.entry(at).or_default() += 1;
        }
    }
    advanced
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((workflow, key, generation, step), n)| {
            format!("{workflow}/{key} generation {generation}: step {step} advanced {n} times")
        })
        .collect()
}

/// Did any input with this id reach a record?
fn evidence_reached(writes: &[crate::store::Landed], id: &str) -> bool {
    writes.iter().any(|w| w.to.history.last().is_some_and(|a| a.cause_id.as_deref() == Some(id)))
}

/// Execution ARNs of the simulated stack: this, then `<machine>:<name>`.
const PREFIX_EXEC: &str = "arn:aws:states:us-east-1:123456789012:execution:sim-";

#[cfg(test)]
mod tests {
    use baton_core::domain::ids::{CorrelationKey, EventId, WorkflowName};
    use baton_core::domain::lifecycle::{Input, OnRestart, Plan, decide};

    use super::*;
    use crate::store::Landed;

    #[test]
    fn a_step_advanced_twice_is_a_violation_and_once_is_not() {
        let plan = Plan { steps: vec![vec![], vec![]], on_restart: OnRestart::AfterTerminal, version: None };
        let (w, k) = (WorkflowName::parse("wf").unwrap(), CorrelationKey::parse("k").unwrap());
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let start = Input::Start { event: EventId::parse("e").unwrap() };
        let mut record = decide(&plan, (&w, &k), None, &start, now).write.unwrap().to;
        record.state = State::Advancing { step: 0 };
        let advance =
            Landed { at: now, from: Some(State::Waiting { step: 0 }), from_generation: Some(1), to: record };
        assert!(steps_advanced_twice(std::slice::from_ref(&advance)).is_empty());
        let twice = steps_advanced_twice(&[advance.clone(), advance]);
        assert_eq!(twice, vec!["wf/k generation 1: step 0 advanced 2 times".to_owned()]);
    }
}
