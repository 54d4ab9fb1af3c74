//! Step Functions' limits: baton never asks for what AWS refuses, and no execution runs into a
//! limit of its own.

use super::{Checker, Seen};

/// Baton never asks Step Functions for what it refuses (an error or cause too long, a payload
/// over 256 KiB): refused, the call can never succeed, however often it is retried.
pub(super) fn step_functions_refuses_no_call(c: &mut Checker<'_>, s: &Seen<'_>) {
    c.check("step_functions_refuses_no_call", s.model.refused.is_empty(), || {
        format!("Step Functions would refuse calls baton made: {}", s.model.refused.join("; "))
    });
}

/// No execution failed on a limit of its own (States.DataLimitExceeded, States.Runtime), which
/// it never reports to baton.
pub(super) fn no_execution_stopped_by_its_limits(c: &mut Checker<'_>, s: &Seen<'_>) {
    for e in s.model.executions.values() {
        let failure = e.failure.as_ref().map(|f| f.0.as_str());
        c.check(
            "no_execution_stopped_by_its_limits",
            !matches!(failure, Some("States.DataLimitExceeded" | "States.Runtime")),
            || format!("execution {} failed with {:?}: Step Functions' limits stopped it", e.arn, e.failure),
        );
    }
}

/// The engine's cheap bound of a record's size (`record_size_bound`) is at least its size as
/// DynamoDB measures it, for every record written: the engine measures exactly, and trims,
/// only a record the bound says may come near 400 KB, so a bound below the size lets a record
/// past the limit go unmeasured until DynamoDB refuses it. (Told once per schedule: the write
/// it fell shortest of.)
pub(super) fn record_size_bound_bounds_the_record(c: &mut Checker<'_>, s: &Seen<'_>) {
    let under = crate::world::lock(&s.stack.store.underbound).clone();
    c.check("record_size_bound_bounds_the_record", under.is_none(), || {
        let (record, version, size, bound) = under.clone().unwrap_or_default();
        format!("record {record} at version {version} is {size} bytes, but its cheap bound says {bound}")
    });
}
