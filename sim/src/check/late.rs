//! After the long jump: late copies of events, weeks after the end, change nothing.

use super::Checker;
use crate::Stack;
use crate::world::lock;

/// A late copy of an event, weeks after every record ended, starts no execution: Step
/// Functions saw no start after the first `starts`.
pub(super) fn late_event_starts_nothing(c: &mut Checker<'_>, stack: &Stack, starts: usize) {
    let model = lock(&stack.sfn);
    c.check("late_event_starts_nothing", model.starts.len() == starts, || {
        format!("a late event weeks after the end started {:?}", &model.starts[starts..])
    });
}

/// A late copy of an event, weeks after every record ended, writes no record (each was
/// terminal): no write landed after the first `writes`.
pub(super) fn late_event_writes_nothing(c: &mut Checker<'_>, stack: &Stack, writes: usize) {
    let landed = lock(&stack.store.writes);
    c.check("late_event_writes_nothing", landed.len() == writes, || {
        let w = &landed[writes];
        format!("a late event weeks after the end moved {}/{} to {}", w.to.workflow, w.to.key, w.to.state)
    });
}
