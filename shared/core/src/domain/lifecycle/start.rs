//! A start event: it creates the record, is a duplicate of one seen, or opens the next
//! generation of a record that ended (as the workflow's `on_restart` allows).

use time::OffsetDateTime;

use super::effect::{Decision, Effect};
use super::input::{IgnoreReason, Outcome};
use super::plan::{OnRestart, Plan};
use super::record::{REMEMBERED_START_EVENTS, Record, State, Until};
use super::table::Cause;
use crate::domain::ids::{CorrelationKey, EventId, WorkflowName};

pub(super) fn on_start(
    plan: &Plan,
    (workflow, key): (&WorkflowName, &CorrelationKey),
    record: Option<&Record>,
    (event, untils): (&EventId, &[Until]),
    now: OffsetDateTime,
) -> Decision {
    let Some(r) = record else {
        let to = Record {
            workflow: workflow.clone(),
            key: key.clone(),
            generation: 1,
            state: State::Pending,
            version: 1,
            waits: Vec::new(),
            applied: Vec::new(),
            start_events: vec![event.clone()],
            history: Vec::new(),
            created_at: now,
            updated_at: now,
            write_id: None,
            config_version: plan.version.clone(),
            missed: Vec::new(),
            confirmed: Vec::new(),
            succeeded: Vec::new(),
            compensation: None,
            untils: untils.to_vec(),
        };
        return Decision::new(Outcome::Applied)
            .with_write(Cause::Start, None, to)
            .effect(Effect::StartExecution { generation: 1 });
    };
    if r.start_events.contains(event) {
        // Redelivery. While pending, the execution may not have started (a crash after the
        // create): starting again is safe because the execution name is deterministic.
        let d = Decision::new(Outcome::Duplicate);
        return if r.state == State::Pending {
            d.effect(Effect::StartExecution { generation: r.generation })
        } else {
            d
        };
    }
    if !r.state.is_terminal() {
        return Decision::ignored(IgnoreReason::AlreadyRunning);
    }
    if plan.on_restart == OnRestart::Never {
        return Decision::ignored(IgnoreReason::RestartNotAllowed);
    }
    let mut start_events = r.start_events.clone();
    start_events.push(event.clone());
    let excess = start_events.len().saturating_sub(REMEMBERED_START_EVENTS);
    start_events.drain(..excess);
    let generation = r.generation + 1;
    let to = Record {
        generation,
        waits: Vec::new(),
        start_events,
        created_at: now,
        config_version: plan.version.clone(),
        missed: Vec::new(),
        confirmed: Vec::new(),
        succeeded: Vec::new(),
        compensation: None,
        untils: untils.to_vec(),
        ..r.next(State::Pending, now)
    };
    Decision::new(Outcome::Applied)
        .with_write(Cause::Restart, Some(r), to)
        .effect(Effect::StartExecution { generation })
}
