//! Every answer tells the truth (DESIGN §4.8): what a sender or an operator was told is true,
//! and a sender is told the same every time once the input is done.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Checker, Seen};

/// Every answer tells the truth: `applied` means the record has it, `buffered` that an inbox
/// entry holds it, `ignored` that only the ledger has it, a 409 that another payload's receipt
/// came first, and a 503 "nothing was applied" that nothing was.
pub(super) fn every_answer_tells_the_truth(c: &mut Checker<'_>, s: &Seen<'_>) {
    for a in &s.evidence.attempts {
        let Some((status, body)) = &a.answer else { continue };
        let what = body["status"].as_str().unwrap_or("");
        let f = &a.facts;
        match (*status, what) {
            (200, "applied") => c.check("every_answer_tells_the_truth", f.in_record, || {
                format!("{} was answered applied, but the record does not have it", a.id)
            }),
            (202, "buffered") => c.check("every_answer_tells_the_truth", f.inbox, || {
                format!("{} was answered buffered, but no inbox entry holds it", a.id)
            }),
            (200, "ignored") => c.check("every_answer_tells_the_truth", f.ledger && !f.in_record && !f.inbox, || {
                format!(
                    "{} was answered ignored, but the ledger does not have it, or it changed the record or an inbox: {f:?}",
                    a.id
                )
            }),
            (409, _) => c.check("every_answer_tells_the_truth", f.other_receipt, || {
                format!("{} was answered 409 without an earlier receipt of another payload", a.id)
            }),
            // (What the store holds under this id may be another payload's: a refused conflict.)
            (503, _) if body["maybe_applied"] == false => {
                c.check("every_answer_tells_the_truth", (!f.in_record && !f.inbox) || f.other_receipt, || {
                    format!("{} was answered 503 \"nothing was applied\", but the store has it", a.id)
                });
            }
            _ => {}
        }
    }
}

/// A retry with the same id and payload gets the answer the first attempt earned: every final
/// answer about one input is the same (but for saying it is a duplicate).
pub(super) fn a_retry_gets_the_same_answer(c: &mut Checker<'_>, s: &Seen<'_>) {
    let mut finals: BTreeMap<(&str, &str), Vec<&Value>> = BTreeMap::new();
    for a in &s.evidence.attempts {
        let Some((status, body)) = &a.answer else { continue };
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
        c.check("a_retry_gets_the_same_answer", bodies.iter().all(|b| strip(b) == first), || {
            format!("{id} got different answers: {bodies:?}")
        });
    }
}

/// A cancel an operator saw succeed had ended its execution by then.
pub(super) fn a_cancel_ends_its_execution(c: &mut Checker<'_>, s: &Seen<'_>) {
    for cancel in &s.evidence.cancels {
        c.check("a_cancel_ends_its_execution", cancel.execution_ended, || {
            format!(
                "{}/{} generation {} was cancelled, but its execution was still running",
                cancel.workflow, cancel.key, cancel.generation
            )
        });
    }
}

/// A worker's answer to a task that went out, for the attempt still running when it arrives,
/// is taken for that attempt: never answered `ignored` as out of order, as if its task were not
/// out yet (the worker's final answer: it does not send it again, and the step waits for an
/// answer that came).
pub(super) fn an_answer_to_a_published_task_is_never_out_of_order(c: &mut Checker<'_>, s: &Seen<'_>) {
    for a in &s.evidence.attempts {
        let (Some(task), Some((status, body))) = (&a.task, &a.answer) else { continue };
        if a.facts.running != Some((task.generation, task.attempt)) {
            continue;
        }
        let out_of_order = *status == 200 && body["status"] == "ignored" && body["reason"] == "out_of_order";
        c.check("an_answer_to_a_published_task_is_never_out_of_order", !out_of_order, || {
            format!(
                "{} answering task {} (attempt {}, out at {}) was answered ignored (out_of_order): its task was out",
                a.id, task.id, task.attempt, task.published_at
            )
        });
    }
}
