//! The callback use case: `POST /v1/callbacks`, as docs/CALLBACK_API.md answers it.
//!
//! Order of checks, each with its own answer: size (413), signature (401), body (400), workflow
//! and step (404), then the idempotency receipt and the lifecycle.
//!
//! **Exactly once.** The receipt (`webhook-id`, payload hash, `pending`) is written before the
//! effect and completed with the answer after it:
//!
//! ```text
//!  put receipt (pending) ──► engine.submit (record write, resume) ──► receipt done + answer
//!        │ exists, done: the first answer again, duplicate: true
//!        │ exists, other hash: 409 idempotency_key_reused
//!        │ exists, pending: a crash (or a twin in flight) — run the apply again; the record's
//!        │                  conditions make it idempotent
//! ```
//!
//! **Every answer is true.** Once the input has reached the record, the answer says so (200
//! `applied`), even if an effect after the write failed: the record owes that effect (a resume),
//! and the sweeper or any retry delivers it. A 503 says either that nothing was applied, or,
//! when a write's outcome is unknown or only part of the work is done, that it may have been
//! (`maybe_applied: true`). Either way the receipt stays `pending` and a retry with the same
//! `webhook-id` finishes the work, applies the input at most once, and answers how it ended.

use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};
use time::{Duration, OffsetDateTime};
use tracing::{error, info, instrument, warn};

use crate::domain::config::Workflow;
use crate::domain::error::Classified;
use crate::domain::error::error_chain;
use crate::domain::ids::payload_hash;
use crate::domain::ids::{CorrelationKey, EventId};
use crate::domain::lifecycle::{
    Effect, Input, MAX_FAILURE_CAUSE_CHARS, MAX_FAILURE_ERROR_CHARS, Outcome, RejectReason, Source,
    StepOutcome, failure_text_fits,
};
use crate::domain::webhook::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::ports::secrets::RotatingSecrets;
use crate::ports::store::{Claim, Hold, Receipt, ReceiptStatus};
use crate::use_cases::engine::{Definition, Engine, EngineError, Submitted};

/// The largest body accepted. Inputs live in the workflow record, whose DynamoDB item is
/// limited to 400 KB, so a callback's data is kept well below that.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a receipt answers duplicates: longer than any sender's retry schedule.
pub const RECEIPT_TTL: Duration = Duration::days(7);
/// What a 503 asks the caller to wait.
pub const RETRY_AFTER_SECONDS: u32 = 5;
/// What a 503 `task_not_out` asks: the task's mark follows its publish within milliseconds.
pub const TASK_NOT_OUT_RETRY_SECONDS: u32 = 1;
use crate::limits::RECEIPT_LEASE;

/// Every `error` code a callback answer can carry (RUNBOOK.md explains each).
pub const ERROR_CODES: &[&str] = &[
    "body_too_large",
    "missing_signature_header",
    "invalid_timestamp",
    "stale_timestamp",
    "invalid_signature",
    "out_of_scope",
    "callbacks_refused",
    "invalid_webhook_id",
    "invalid_body",
    "unknown_workflow",
    "unknown_step",
    "idempotency_key_reused",
    "inputs_too_large",
    "in_progress",
    "unavailable",
    "internal",
];

/// An HTTP answer: status, JSON body, and `Retry-After` on 503.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    pub retry_after: Option<u32>,
}

impl Answer {
    fn new(status: StatusCode, body: Value) -> Answer {
        Answer { status, body, retry_after: None }
    }

    fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Answer {
        Answer::new(status, json!({"error": code, "message": message.into()}))
    }

    fn field(code: &str, field: &str, message: impl Into<String>) -> Answer {
        Answer::new(
            StatusCode::BAD_REQUEST,
            json!({"error": code, "field": field, "message": message.into()}),
        )
    }

    /// The answer as an `http` response.
    pub fn into_response(self) -> http::Response<String> {
        let mut builder =
            http::Response::builder().status(self.status).header("content-type", "application/json");
        if let Some(seconds) = self.retry_after {
            builder = builder.header("retry-after", seconds.to_string());
        }
        builder.body(self.body.to_string()).unwrap_or_else(|_| http::Response::new(String::new()))
    }
}

/// A callback body, validated.
struct Callback {
    workflow: String,
    key: CorrelationKey,
    step: String,
    outcome: StepOutcome,
    data: Map<String, Value>,
    /// The generation the callback answers (its task's), when the sender says.
    generation: Option<u32>,
    /// The attempt the callback answers (its task's), when the sender says.
    attempt: Option<u32>,
    /// It acknowledges (or fails an attempt of) the step's compensation, not the step.
    compensation: bool,
    /// The escalation level whose task it answers (`None`: the step's own task, or unsaid).
    level: Option<u32>,
}

/// The callback handler.
pub struct Callbacks {
    engine: Arc<Engine>,
    secrets: RotatingSecrets,
}

impl Callbacks {
    pub fn new(engine: Arc<Engine>, secrets: RotatingSecrets) -> Self {
        Callbacks { engine, secrets }
    }

    /// Answers one `POST /v1/callbacks`: exactly once per `webhook-id`, whatever the retries.
    ///
    /// The receipt protocol, in three steps:
    /// 1. `claim`: the receipt for the id is written, or the one there read. A finished
    ///    one is answered again as the first time; a pending one is waited for, or taken over
    ///    once its holder surely died, and answered from what the earlier attempt left.
    /// 2. `apply`: the input goes to the engine; a failure is answered by how far it got.
    /// 3. `keep`: the answer earned is kept on the receipt, so a repeat gets the same one.
    #[instrument(skip_all, fields(input = header(headers, ID_HEADER).unwrap_or("")))]
    pub async fn handle(&self, headers: &HeaderMap, body: &[u8]) -> Answer {
        let now = self.engine.now();
        let (id, mut callback, definition) = match self.admit(headers, body, now).await {
            Ok(admitted) => admitted,
            Err(answer) => return answer,
        };
        let workflow = &*definition;
        let receipt = Receipt {
            workflow: workflow.name.clone(),
            key: callback.key.clone(),
            target: Receipt::target_of(&callback.step, callback.compensation),
            id,
            hash: payload_hash(body),
            status: ReceiptStatus::Pending,
            answer: None,
            created_at: now,
            expires_at: now + RECEIPT_TTL,
            repeats: 0,
            last_repeat_at: None,
            lease: None,
        };
        if let Some(answer) = self.not_out_yet(workflow, &callback, &receipt).await {
            return answer;
        }
        let maybe = match self.claim(workflow, &callback, &receipt, body, now).await {
            Claimed::First => MaybeApplied::No,
            Claimed::Again => MaybeApplied::Yes,
            Claimed::Answered(answer) => return answer,
        };
        if crate::mutants::active(crate::mutants::Mutation::ReceiptBeforeEffect) {
            let early = json!({"http_status": 200, "body": {"status": "applied", "workflow": workflow.name.as_str(),
                "key": callback.key.as_str(), "step": callback.step, "state": null, "duplicate": false}});
            let _ = self.engine.store.complete_receipt(&receipt, early).await;
        }
        let submitted = match self.apply(workflow, &mut callback, &receipt, maybe, now).await {
            Ok(submitted) => submitted,
            Err(answer) => return answer,
        };
        // A refusal (409, 413) is the answer this request earned too: kept, so the same request
        // sent again is refused the same way, not answered from what the ledger says (found by
        // review).
        let decided = (submitted.outcome(), submitted.record());
        let answer = answer((workflow.name.as_str(), &callback.key, &callback.step), &receipt.id, decided)
            .unwrap_or_else(|refused| refused);
        self.keep(&receipt, to_store(&answer)).await;
        answer
    }

    /// Step 3 of the receipt protocol: the answer earned, kept on the receipt. A failure is only
    /// logged: the effect is done and only the kept answer is missing, and a retry re-applies
    /// idempotently and answers the same.
    async fn keep(&self, receipt: &Receipt, answer: Value) {
        if let Err(e) = self.engine.store.complete_receipt(receipt, answer).await {
            warn!(error = %error_chain(&e), "cannot complete the receipt");
        }
    }

    /// An answer sent while its attempt's task is still going out (a compensation's, or a
    /// retried step's next attempt; the task published, its mark not yet written: a worker that
    /// answers within milliseconds of the publish) gets its 503 before its receipt is written.
    /// A receipt written would be held for [`RECEIPT_LEASE`], and the sender's retry a second
    /// later answered `in_progress` until the lease ran out (found by the task workers in
    /// `examples/`). The engine checks again under its write. An answer applied before is in the
    /// record (`applied`, or the compensation's `acks`), so its repeat is answered from its
    /// receipt as ever; the repeat of one that was ignored gets this 503 until the mark, then
    /// its first answer.
    async fn not_out_yet(
        &self,
        workflow: &Workflow,
        callback: &Callback,
        receipt: &Receipt,
    ) -> Option<Answer> {
        // Only a compensation's attempt, or a step's later attempt, is published by a write
        // apart from its wait's (the first attempt of a step goes out with its step_ready): the
        // common callback pays no extra read.
        if !(callback.compensation || callback.attempt.is_some_and(|a| a > 1)) {
            return None;
        }
        // Unreadable: the usual path decides. Answered here, "nothing was applied" could be
        // untrue of an earlier attempt with this id (found by the simulation).
        let record = self.engine.store.load(&workflow.name, &callback.key).await.ok()?;
        let input = callback_input(workflow, callback, receipt, Map::new());
        // The step as the record's own config version numbers it, as the engine will decide it
        // (found by review: after a deploy that renumbered steps, another compensation's task
        // was asked about).
        let (_, input) = self.engine.pinned(workflow, record.as_deref(), &input).await.ok()?;
        crate::domain::lifecycle::task_not_out(record.as_deref(), &input).then(|| {
            info!("the attempt's task is not marked out yet: the sender retries in a moment");
            let mut answer = self.failed(&EngineError::TaskNotOut, MaybeApplied::No);
            answer.retry_after = Some(TASK_NOT_OUT_RETRY_SECONDS);
            answer
        })
    }

    /// Step 1 of the receipt protocol: writes the receipt, or answers from the one there.
    async fn claim(
        &self,
        workflow: &Workflow,
        callback: &Callback,
        receipt: &Receipt,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Claimed {
        match self.engine.store.put_receipt(receipt).await {
            Ok(Claim::Acquired) => Claimed::First,
            Ok(Claim::Exists(stored)) if stored.hash != receipt.hash => {
                Claimed::Answered(self.refuse_reused(workflow, &callback.key, &receipt.id, body, now).await)
            }
            Ok(Claim::Exists(stored)) => {
                if let (ReceiptStatus::Done, Some(first)) = (stored.status, &stored.answer) {
                    info!("duplicate callback: answering as the first time");
                    // Counted on the receipt, so the trace shows the repeat. The answer is true
                    // whether or not the count lands: a failure only leaves the count short.
                    if let Err(e) = self.engine.store.note_repeat(&stored, now).await {
                        warn!(error = %error_chain(&e), "cannot count the repeat on its receipt; answered all the same");
                    }
                    return Claimed::Answered(stored_answer(first));
                }
                if let Err(answer) = self.take_over(&stored, now).await {
                    return Claimed::Answered(answer);
                }
                self.resume(workflow, callback, receipt, stored.created_at, now).await
            }
            Err(e) => Claimed::Answered(self.failed_holding(&e, MaybeApplied::Yes, now)),
        }
    }

    /// A pending receipt: a twin still running (a sender's retry, or a duplicate send, while
    /// the first attempt works) would race an attempt applied again now, and could answer
    /// otherwise. So it is waited for until it has finished or, past the function's timeout
    /// ([`RECEIPT_LEASE`]), surely died (found by the simulation); then taken over by one
    /// attempt: two retries that both find it stale would each apply again and could answer
    /// otherwise (found by the simulation, seed 10262). `Err` is the answer to give instead.
    async fn take_over(&self, stored: &Receipt, now: OffsetDateTime) -> Result<(), Answer> {
        let held = RECEIPT_LEASE - (now - stored.held_since());
        if held > Duration::ZERO {
            info!("receipt pending and recent: another attempt may still be at work");
            return Err(in_progress(held));
        }
        let hold = Hold { by: (self.engine.write_ids)(), at: now };
        match self.engine.store.take_over_receipt(stored, &hold).await {
            Ok(Claim::Acquired) => Ok(()),
            Ok(Claim::Exists(r)) if r.lease.as_ref().is_some_and(|l| l.by == hold.by) => Ok(()),
            Ok(Claim::Exists(r)) => {
                if let (ReceiptStatus::Done, Some(first)) = (r.status, &r.answer) {
                    return Err(stored_answer(first));
                }
                info!("receipt pending and just taken over by another attempt");
                Err(in_progress(RECEIPT_LEASE))
            }
            Err(e) => Err(self.failed_holding(&e, MaybeApplied::Yes, now)),
        }
    }

    /// A receipt taken over: an earlier attempt did not finish. It may have taken effect and
    /// lost its answer; the answer it earned is in the store. Only if it left nothing is the
    /// input applied again ([`Claimed::Again`]).
    async fn resume(
        &self,
        workflow: &Workflow,
        callback: &Callback,
        receipt: &Receipt,
        since: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Claimed {
        match self.earlier(workflow, callback, &receipt.id, since).await {
            Ok(Some(answer)) => {
                info!("receipt pending: an earlier attempt took effect; answering as it earned");
                // A progress report's heartbeat is what the earlier attempt may have missed, and
                // nothing else owes it: sent again while its step waits (found by review). So is
                // the heartbeat of a failed attempt whose step waits out its backoff.
                let beats = matches!(callback.outcome, StepOutcome::InProgress | StepOutcome::Failed { .. });
                if beats
                    && !callback.compensation
                    && let Err(e) = self.beat_again(workflow, &callback.key, &callback.step).await
                {
                    return Claimed::Answered(self.failed_holding(&e, MaybeApplied::Yes, now));
                }
                let stored = to_store(&answer);
                let answer = stored_answer(&stored);
                self.keep(receipt, stored).await;
                Claimed::Answered(answer)
            }
            Ok(None) => {
                info!("receipt pending: applying again (an earlier attempt did not finish)");
                Claimed::Again
            }
            Err(e) => Claimed::Answered(self.failed_holding(&e, MaybeApplied::Yes, now)),
        }
    }

    /// Step 2 of the receipt protocol: submits the callback as its step's input (its data moved
    /// into the input). `Err` is the answer to a failure, by how far the input got: `maybe` says
    /// whether an earlier attempt may have applied it.
    async fn apply(
        &self,
        workflow: &Workflow,
        callback: &mut Callback,
        receipt: &Receipt,
        maybe: MaybeApplied,
        now: OffsetDateTime,
    ) -> Result<Submitted, Answer> {
        let data = std::mem::take(&mut callback.data);
        let input = callback_input(workflow, callback, receipt, data);
        match self.engine.submit(workflow, &callback.key, &input, now).await {
            Ok(s) => Ok(s),
            // A heartbeat that failed is owed by nobody: the sender retries, and the retry sends
            // it again (found by review).
            Err(EngineError::Unfinished { submitted, source })
                if submitted
                    .decision
                    .effects
                    .iter()
                    .any(|e| matches!(e, Effect::SendTaskHeartbeat { .. })) =>
            {
                let e = EngineError::Unfinished { submitted, source };
                Err(self.failed_holding(&e, MaybeApplied::Yes, now))
            }
            // The input reached the record; what failed after it is owed by the record.
            Err(EngineError::Unfinished { submitted, source })
                if matches!(submitted.outcome(), Outcome::Applied | Outcome::Duplicate) =>
            {
                warn!(error_type = source.error_type(), error = %error_chain(&*source),
                    "callback applied; an effect after the write failed and is owed by the record");
                Ok(*submitted)
            }
            Err(EngineError::Unfinished { submitted, source })
                if matches!(submitted.outcome(), Outcome::Ignored(_) | Outcome::Rejected(_)) =>
            {
                // Nothing applies an ignored or refused input; its ledger entry is what failed.
                Err(self.failed_holding(&EngineError::Unfinished { submitted, source }, maybe, now))
            }
            // The attempt's task is not out (the early check could not read the record): nothing
            // was applied, so the receipt this attempt wrote goes, and the retry a second later
            // starts afresh rather than waiting out its lease (found by an attack test).
            Err(e @ EngineError::TaskNotOut) if maybe == MaybeApplied::No => {
                match self.engine.store.release_receipt(receipt).await {
                    Ok(()) => {
                        let mut answer = self.failed(&e, MaybeApplied::No);
                        answer.retry_after = Some(TASK_NOT_OUT_RETRY_SECONDS);
                        Err(answer)
                    }
                    Err(release) => {
                        warn!(error = %error_chain(&release), "cannot release the receipt; its retry waits out the lease");
                        Err(self.failed_holding(&e, maybe, now))
                    }
                }
            }
            Err(e @ (EngineError::Uncertain { .. } | EngineError::Unfinished { .. })) => {
                Err(self.failed_holding(&e, MaybeApplied::Yes, now))
            }
            Err(e) => Err(self.failed_holding(&e, maybe, now)),
        }
    }

    /// The checks before anything is written, each with its own answer: size (413), signature
    /// (401), body (400), the signing secret's scope (403), workflow and step (404), and whether
    /// the step takes callbacks at all (403). A sender learns nothing of the workflows outside
    /// its secret's scope.
    async fn admit(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<(EventId, Callback, Definition), Answer> {
        if body.len() > MAX_BODY_BYTES {
            return Err(Answer::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the body is {} bytes; the limit is {MAX_BODY_BYTES}", body.len()),
            ));
        }
        let id = header(headers, ID_HEADER);
        let secrets = self
            .secrets
            .current(now, &self.engine.metrics)
            .await
            .map_err(|e| self.failed(&e, MaybeApplied::No))?;
        let signature = (header(headers, TIMESTAMP_HEADER), header(headers, SIGNATURE_HEADER));
        let authority = secrets.verify(id, signature.0, signature.1, body, now).map_err(|e| {
            warn!(reason = e.code(), "callback refused: {e}");
            Answer::error(StatusCode::UNAUTHORIZED, e.code(), e.to_string())
        })?;
        let id = EventId::parse(id.unwrap_or_default())
            .map_err(|e| Answer::error(StatusCode::BAD_REQUEST, "invalid_webhook_id", e.to_string()))?;
        let callback = parse_body(body)?;
        if !authority.allows(&callback.workflow, &callback.step) {
            warn!(workflow = %callback.workflow, step = %callback.step, "callback refused: outside its secret's scope");
            return Err(Answer::error(
                StatusCode::FORBIDDEN,
                "out_of_scope",
                format!(
                    "the secret that signed this callback may not call back step {:?} of workflow {:?}",
                    callback.step, callback.workflow
                ),
            ));
        }
        let definition = self.step_of(&callback).await?;
        // A compensation is acknowledged by callback only, whatever feeds its step.
        let refuses = |s: &crate::domain::config::Step| !s.accepts_callbacks && !callback.compensation;
        let step = definition.steps.iter().find(|s| s.name.as_str() == callback.step);
        if step.is_some_and(|s| s.timer.is_some()) {
            return Err(Answer::error(
                StatusCode::FORBIDDEN,
                "callbacks_refused",
                format!(
                    "step {:?} of workflow {} is a timer: it takes no input, and the workflow goes on when its \
                     time has come",
                    callback.step, callback.workflow
                ),
            ));
        }
        if let (Some(level), Some(step)) = (callback.level, step) {
            answers_level(&callback, step, level)?;
        }
        if step.is_some_and(refuses) {
            return Err(Answer::error(
                StatusCode::FORBIDDEN,
                "callbacks_refused",
                format!(
                    "step {:?} of workflow {} takes its inputs from domain events only (accepts_callbacks: false)",
                    callback.step, callback.workflow
                ),
            ));
        }
        Ok((id, callback, definition))
    }

    /// The callback's workflow, in the config version that defines its step (404 otherwise).
    async fn step_of(&self, callback: &Callback) -> Result<Definition, Answer> {
        if self.engine.config.workflow(&callback.workflow).is_none() {
            return Err(Answer::error(
                StatusCode::NOT_FOUND,
                "unknown_workflow",
                format!("no workflow named {:?}", callback.workflow),
            ));
        }
        // The step by name, in this config or, for a record pinned to an earlier version, in
        // that one: the engine finds it again in the record's own version.
        match self.engine.definition_with_step(&callback.workflow, &callback.step).await {
            Ok(Some(definition)) => Ok(definition),
            Ok(None) => Err(Answer::error(
                StatusCode::NOT_FOUND,
                "unknown_step",
                format!("workflow {} has no step named {:?}", callback.workflow, callback.step),
            )),
            Err(e) => Err(self.failed(&e, MaybeApplied::No)),
        }
    }

    /// Sends the step's heartbeat if the record still waits at the step named `step` (in its
    /// own config version).
    async fn beat_again(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        step: &str,
    ) -> Result<(), EngineError> {
        let record = self.engine.store.load(&workflow.name, key).await?;
        if let Some(r) = record
            && let Some(pinned) =
                self.engine.definition(workflow.name.as_str(), Some(r.config_version.as_str())).await?
            && let Some(step) = pinned.step_index(step)
            && let Some(token) = r.token_at(step)
        {
            match self.engine.orchestrator.send_task_heartbeat(token).await {
                Ok(()) | Err(crate::ports::orchestrator::OrchestratorError::TokenGone { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// What an earlier attempt of this callback did, from the store: applied (the record's
    /// history names it as a transition's cause), buffered (an inbox entry holds it) or ignored
    /// (the ledger has it). `None`: it left nothing, so it never took effect.
    ///
    /// Only what was written since its receipt (`since`, the receipt's creation, less a lease
    /// for clocks): the same id may have left traces under an earlier receipt, long reaped (an
    /// input expired, applied, or refused then), which say nothing of what this receipt's
    /// attempt did, and answered as if they did, a retry got another answer than the first
    /// attempt's (found by review: `sim/tests/inbox_claims_and_pending_receipts.rs`).
    async fn earlier(
        &self,
        workflow: &Workflow,
        callback: &Callback,
        id: &EventId,
        since: OffsetDateTime,
    ) -> Result<Option<Answer>, EngineError> {
        let since = since - RECEIPT_LEASE;
        let trace = self.engine.store.trace(&workflow.name, &callback.key).await?;
        let names = (workflow.name.as_str(), &callback.key, callback.step.as_str());
        let body = |status: &str, state: Option<String>| {
            json!({"status": status, "workflow": names.0, "key": names.1.as_str(), "step": names.2,
                "state": state, "duplicate": false})
        };
        // An inbox entry first: the earlier attempt buffered the input (even if it was applied
        // from the inbox since), and "buffered" is what it answered. If that attempt failed
        // before its handshake read, the input may sit beside its waiting step with nobody to
        // drain it: finish the handshake here.
        // The same id sent to another step is another callback (receipts are kept per target).
        if let Some(entry) = trace.inbox.iter().find(|e| {
            &e.id == id
                && e.source() == Some(Source::Callback)
                && e.arrived_at >= since
                && e.step_name == callback.step
                && !callback.compensation
        }) {
            // Its step, by name, in the record's own config version.
            if matches!(
                entry.status,
                crate::ports::store::InboxStatus::Buffered | crate::ports::store::InboxStatus::Draining
            ) && let Some(r) = &trace.record
                && entry.generation == r.generation
                && let Some(pinned) =
                    self.engine.definition(workflow.name.as_str(), Some(r.config_version.as_str())).await?
                && let Some(step) = pinned.step_index(&entry.step_name)
                && r.waits_at(step)
            {
                self.engine.drain(&pinned, &callback.key, r.generation, step, self.engine.now()).await?;
            }
            return Ok(Some(Answer::new(StatusCode::ACCEPTED, body("buffered", None))));
        }
        let elsewhere = match &trace.record {
            Some(r) => self.applied_elsewhere(workflow, callback, r, id).await?,
            None => false,
        };
        // A compensation's acknowledgement is an `undo`; a step's input is anything else (found
        // by an attack test: a step's callback retried after its compensation was acknowledged
        // under the same id was answered as the acknowledgement).
        let ours = |a: &&crate::domain::lifecycle::AuditEntry| {
            (a.cause == crate::domain::lifecycle::Cause::Undo) == callback.compensation
        };
        if let Some(entry) = trace.record.as_ref().filter(|_| !elsewhere).and_then(|r| {
            r.history
                .iter()
                .rev()
                .filter(ours)
                .find(|a| a.cause_id.as_deref() == Some(id.as_str()) && a.at >= since)
        }) {
            return Ok(Some(Answer::new(StatusCode::OK, body("applied", Some(entry.to.to_string())))));
        }
        // (A ledgered conflict is another payload's, refused: not this one's answer.)
        let refused = crate::domain::lifecycle::IgnoreReason::IdempotencyKeyReused;
        if let Some(entry) =
            trace.ledger.iter().find(|l| l.input_id == id.as_str() && l.reason != refused && l.at >= since)
        {
            // Refused as too large, it was answered 413, not ignored (found by the simulation,
            // seed 3195).
            if entry.reason == crate::domain::lifecycle::IgnoreReason::InputsTooLarge {
                return Ok(Some(inputs_too_large()));
            }
            let mut b = body("ignored", entry.state.clone());
            b["reason"] = json!(entry.reason.as_str());
            return Ok(Some(Answer::new(StatusCode::OK, b)));
        }
        Ok(None)
    }

    /// Whether the record shows `id` applied to another target than the callback's, and not to
    /// its own: then a transition the id caused was another callback's (a sender scoped to
    /// another step, reusing this step's predictable task id), not an earlier attempt of this
    /// one. Inputs the record no longer remembers say nothing either way.
    async fn applied_elsewhere(
        &self,
        workflow: &Workflow,
        callback: &Callback,
        r: &crate::domain::lifecycle::Record,
        id: &EventId,
    ) -> Result<bool, EngineError> {
        let Some(pinned) =
            self.engine.definition(workflow.name.as_str(), Some(r.config_version.as_str())).await?
        else {
            return Ok(false);
        };
        let step = pinned.step_index(&callback.step);
        let acked = |s: Option<u32>| {
            r.compensation
                .iter()
                .flat_map(|c| &c.undos)
                .any(|u| Some(u.step()) == s && u.acks.iter().any(|a| &a.id == id))
        };
        let applied = |s: Option<u32>| {
            r.applied
                .iter()
                .any(|a| &a.id == id && a.source != Source::Event && s.is_none_or(|s| a.step == s))
        };
        let here = if callback.compensation { acked(step) } else { applied(step) };
        let anywhere =
            applied(None) || r.compensation.iter().flat_map(|c| &c.undos).any(|u| acked(Some(u.step())));
        Ok(anywhere && !here)
    }

    /// A `webhook-id` used before with another payload: 409, and the refused payload goes to
    /// the ledger (`idempotency_key_reused`), so the conflict is not only a log line. If the
    /// ledger cannot be written, the sender is asked to retry instead.
    async fn refuse_reused(
        &self,
        workflow: &Workflow,
        key: &CorrelationKey,
        id: &EventId,
        body: &[u8],
        now: time::OffsetDateTime,
    ) -> Answer {
        let entry = crate::ports::store::LedgerEntry {
            workflow: workflow.name.clone(),
            key: key.clone(),
            input_id: id.to_string(),
            reason: crate::domain::lifecycle::IgnoreReason::IdempotencyKeyReused,
            generation: None,
            state: None,
            detail: serde_json::from_slice(body).unwrap_or(Value::Null),
            config_version: None,
            at: now,
            expires_at: now + crate::use_cases::engine::LEDGER_RETENTION,
        };
        match self.engine.store.put_ledger(&entry).await {
            Ok(()) => reused(id),
            Err(e) => self.failed(&e, MaybeApplied::No),
        }
    }

    /// [`Self::failed`] for an attempt that put (or found) its receipt at `started`: the
    /// receipt stays pending, and a retry inside its lease would only get `in_progress`, so the
    /// answer asks the sender to come back once the lease has passed.
    fn failed_holding<E: Classified + std::error::Error>(
        &self,
        e: &E,
        maybe: MaybeApplied,
        started: OffsetDateTime,
    ) -> Answer {
        let mut answer = self.failed(e, maybe);
        if answer.retry_after.is_some() {
            let held = RECEIPT_LEASE - (self.engine.now() - started);
            answer.retry_after = Some(ceil_seconds(held).max(RETRY_AFTER_SECONDS));
        }
        answer
    }

    fn failed<E: Classified + std::error::Error>(&self, e: &E, maybe: MaybeApplied) -> Answer {
        if e.retryable() {
            warn!(error_type = e.error_type(), error = %error_chain(e), maybe_applied = maybe == MaybeApplied::Yes,
                "dependency unavailable; asking the caller to retry");
            let message = match maybe {
                // Nothing is down: the acknowledged attempt's task is still going out.
                MaybeApplied::No if e.error_type() == "task_not_out" => {
                    "the attempt's task is not marked out yet; nothing was applied; retry in a moment with the \
                     same webhook-id"
                }
                MaybeApplied::No => {
                    "a dependency is unavailable; nothing was applied; retry later with the same webhook-id"
                }
                MaybeApplied::Yes => {
                    "a dependency is unavailable; the callback may have been applied in part; retry with the \
                     same webhook-id: the retry finishes it, applies it at most once, and answers how it ended"
                }
            };
            Answer {
                status: StatusCode::SERVICE_UNAVAILABLE,
                body: json!({"error": "unavailable", "maybe_applied": maybe == MaybeApplied::Yes, "message": message}),
                retry_after: Some(RETRY_AFTER_SECONDS),
            }
        } else {
            error!(error_type = e.error_type(), error = %error_chain(e), "callback failed");
            Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the callback could not be processed",
            )
        }
    }
}

/// What step 1 of the receipt protocol found.
enum Claimed {
    /// The receipt is new: nothing was applied for this id before.
    First,
    /// An earlier attempt left the receipt pending and nothing it applied: apply again.
    Again,
    /// The request is answered without applying: the first answer again, a wait, a refusal.
    Answered(Answer),
}

/// Whether a failed attempt may have changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MaybeApplied {
    /// Nothing was written: the failure came before any write.
    No,
    /// A write's outcome is unknown, or the input is stored but its work unfinished.
    Yes,
}

/// The answer to a callback the engine has decided, or the refusal to send instead.
///
/// A duplicate (the record has this input already: an earlier attempt applied it, then its
/// answer or receipt was lost) is answered as the attempt that applied it earned: `applied`,
/// with the state its own transition produced, marked `duplicate: true`.
fn answer(
    (workflow, key, step): (&str, &CorrelationKey, &str),
    id: &EventId,
    (outcome, record): (Outcome, Option<&crate::domain::lifecycle::Record>),
) -> Result<Answer, Answer> {
    let state = match outcome {
        // The state the input's own write left, in whichever generation applied it (found by the
        // simulation: a retry after a restart answered with the new generation's state).
        Outcome::Duplicate => record.and_then(|r| {
            r.history
                .iter()
                .rev()
                .find(|a| a.cause_id.as_deref() == Some(id.as_str()))
                .map(|a| a.to.to_string())
                .or_else(|| Some(r.state.to_string()))
        }),
        _ => record.map(|r| r.state.to_string()),
    };
    let mut body = json!({
        "status": "applied", "workflow": workflow, "key": key.as_str(),
        "step": step, "state": state, "duplicate": false,
    });
    Ok(match outcome {
        Outcome::Applied => Answer::new(StatusCode::OK, body),
        Outcome::Duplicate => {
            body["duplicate"] = json!(true);
            Answer::new(StatusCode::OK, body)
        }
        // A buffered input waits for its step; the answer names no state, so that a retry
        // rebuilt from the inbox entry says exactly the same.
        Outcome::Buffered => {
            body["status"] = json!("buffered");
            body["state"] = Value::Null;
            Answer::new(StatusCode::ACCEPTED, body)
        }
        Outcome::Ignored(reason) => {
            body["status"] = json!("ignored");
            body["reason"] = json!(reason.as_str());
            Answer::new(StatusCode::OK, body)
        }
        Outcome::Rejected(RejectReason::IdempotencyKeyReused) => return Err(reused(id)),
        Outcome::Rejected(RejectReason::InputsTooLarge) => return Err(inputs_too_large()),
        Outcome::Rejected(RejectReason::UnknownStep) => {
            return Err(Answer::error(
                StatusCode::NOT_FOUND,
                "unknown_step",
                "the step is not in the workflow as the record's config version defines it (see `baton trace`)",
            ));
        }
    })
}

/// 413: merged with what its step already has, the callback's data would make the step's inputs
/// too large. Ledgered (`inputs_too_large`), and answered the same to every retry.
fn inputs_too_large() -> Answer {
    Answer::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "inputs_too_large",
        format!(
            "with this callback's data, the step's inputs would pass {} bytes; send less data",
            crate::domain::lifecycle::MAX_STEP_INPUT_BYTES
        ),
    )
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Another attempt with this `webhook-id` may still be at work: retry once it surely is not.
/// Whole seconds, rounded up (at least 1): a sender that waits a Retry-After must find the
/// wait over, not a fraction of a second short.
fn ceil_seconds(d: Duration) -> u32 {
    let whole = d.whole_seconds() + i64::from(d.subsec_nanoseconds() > 0);
    u32::try_from(whole.max(1)).unwrap_or(u32::MAX)
}

/// The input of a compensation's acknowledgement.
/// The callback as its lifecycle input, its step by index in `workflow`'s version: a
/// compensation's acknowledgement, or a step's input carrying `data`.
fn callback_input(
    workflow: &Workflow,
    callback: &Callback,
    receipt: &Receipt,
    data: Map<String, Value>,
) -> Input {
    let step = workflow.step_index(&callback.step).unwrap_or(u32::MAX);
    let (id, hash, outcome) = (receipt.id.clone(), receipt.hash.clone(), callback.outcome.clone());
    let (generation, attempt) = (callback.generation, callback.attempt);
    if callback.compensation {
        return Input::UndoInput { id, hash, source: Source::Callback, step, outcome, generation, attempt };
    }
    Input::StepInput { id, hash, source: Source::Callback, step, outcome, data, generation, attempt }
}

fn in_progress(held: Duration) -> Answer {
    let seconds = ceil_seconds(held);
    Answer {
        status: StatusCode::SERVICE_UNAVAILABLE,
        body: json!({"error": "in_progress", "maybe_applied": true,
            "message": format!("a request with this webhook-id is still being processed; retry in {seconds}s with the same webhook-id")}),
        retry_after: Some(seconds),
    }
}

fn reused(id: &EventId) -> Answer {
    Answer::error(
        StatusCode::CONFLICT,
        "idempotency_key_reused",
        format!("webhook-id {id} was used before with a different payload"),
    )
}

/// The answer as its receipt keeps it. The body is cloned, not serialized again through
/// `json!` (which turned it into a new value field by field: 5 % of a workflow's CPU in the
/// bench).
fn to_store(answer: &Answer) -> Value {
    let mut stored = serde_json::Map::with_capacity(2);
    stored.insert("http_status".into(), answer.status.as_u16().into());
    stored.insert("body".into(), answer.body.clone());
    Value::Object(stored)
}

/// A repeated `webhook-id`: 200 with the first answer's body, marked as a duplicate
/// (docs/CALLBACK_API.md), whatever status the first answer had.
fn stored_answer(first: &Value) -> Answer {
    let mut body = first["body"].clone();
    body["duplicate"] = json!(true);
    // A refusal stays a refusal; any success is a 200, as the API documents for duplicates.
    let status = first["http_status"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .filter(|s| s.is_client_error())
        .unwrap_or(StatusCode::OK);
    Answer::new(status, body)
}

/// The body's fields: infra/openapi.yaml's `Callback` schema lists the same (a test checks).
const FIELDS: [&str; 12] = [
    "workflow",
    "key",
    "step",
    "outcome",
    "data",
    "error",
    "cause",
    "retryable",
    "generation",
    "attempt",
    "compensation",
    "level",
];

/// Validates the JSON body, naming the first bad field.
fn parse_body(body: &[u8]) -> Result<Callback, Answer> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Answer::field("invalid_body", "", format!("the body is not JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(Answer::field("invalid_body", "", "the body must be a JSON object"));
    };
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Answer::field(
            "invalid_body",
            unknown,
            format!("unknown field {unknown:?}; expected: {}", FIELDS.join(", ")),
        ));
    }
    let mut text = |name: &'static str, required: bool| -> Result<Option<String>, Answer> {
        match map.remove(name) {
            None | Some(Value::Null) if required => {
                Err(Answer::field("invalid_body", name, format!("{name} is required")))
            }
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
            Some(_) => Err(Answer::field("invalid_body", name, format!("{name} must be a non-empty string"))),
        }
    };
    let workflow = text("workflow", true)?.unwrap_or_default();
    let key_text = text("key", true)?.unwrap_or_default();
    let step = text("step", true)?.unwrap_or_default();
    let outcome = text("outcome", true)?.unwrap_or_default();
    let error = text("error", false)?;
    let cause = text("cause", false)?;
    failure_text(error.as_deref(), cause.as_deref())?;
    let key =
        CorrelationKey::parse(key_text).map_err(|e| Answer::field("invalid_body", "key", e.to_string()))?;
    let retryable = parse_retryable(map.remove("retryable"), &outcome)?;
    let outcome = parse_outcome(&outcome, error, cause, retryable)?;
    let data = match map.remove("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(data)) => data,
        Some(_) => return Err(Answer::field("invalid_body", "data", "data must be a JSON object")),
    };
    let mut counter = |name: &'static str| match map.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0).map(Some).ok_or_else(|| {
                Answer::field(
                    "invalid_body",
                    name,
                    format!("{name} must be a whole number above 0 (the task's)"),
                )
            })
        }
    };
    let generation = counter("generation")?;
    let attempt = counter("attempt")?;
    let level = counter("level")?;
    let compensation = parse_compensation(map.remove("compensation"), &outcome, &data)?;
    // After `generation` and `attempt`, which name themselves when past 64 bits; what is left
    // is data.
    if let Some(number) = integer_past_64_bits(body) {
        return Err(Answer::field(
            "invalid_body",
            "data",
            format!(
                "{number} is an integer past 64 bits, which JSON numbers here cannot keep exact; send it as a string"
            ),
        ));
    }
    Ok(Callback { workflow, key, step, outcome, data, generation, attempt, compensation, level })
}

/// A callback that names the escalation `level` it answers: one `step` declares, of the step's
/// own task (a compensation's task is not escalated). Whoever holds the task may answer it, so
/// the level is not needed; named, it goes into the log beside the answer, for the audit of who
/// acted.
fn answers_level(callback: &Callback, step: &crate::domain::config::Step, level: u32) -> Result<(), Answer> {
    let levels = step.escalate.len();
    if callback.compensation || level as usize > levels {
        let what = if callback.compensation {
            "a compensation's task is not escalated".to_owned()
        } else {
            format!(
                "step {:?} declares {levels} escalation level{}",
                callback.step,
                if levels == 1 { "" } else { "s" }
            )
        };
        return Err(Answer::field("invalid_body", "level", format!("level {level} answers no task: {what}")));
    }
    let queue = step.escalate.get(level as usize - 1).map_or("", |e| e.task.queue.as_str());
    info!(level, queue, "the callback answers the task of an escalation level");
    Ok(())
}

/// The checks on a failure's `error` and `cause`. Step Functions refuses a longer `error` or
/// `cause` on every attempt: accepted here, the step would be answered `applied` and then never
/// fail (found by review). And a sender may not name its failure as Step Functions' or baton's
/// own ([`reserved_error`]).
fn failure_text(error: Option<&str>, cause: Option<&str>) -> Result<(), Answer> {
    let unchecked = crate::mutants::active(crate::mutants::Mutation::UncheckedFailureText);
    for (name, value, max) in
        [("error", error, MAX_FAILURE_ERROR_CHARS), ("cause", cause, MAX_FAILURE_CAUSE_CHARS)]
    {
        if let Some(v) = value.filter(|_| !unchecked) {
            failure_text_fits(name, v, max).map_err(|m| Answer::field("invalid_body", name, m))?;
        }
    }
    if let Some(reserved) = error.and_then(reserved_error) {
        return Err(Answer::field(
            "invalid_body",
            "error",
            format!(
                "error names beginning with {reserved:?} are reserved ({}): name the failure in your own terms",
                match reserved {
                    "States." => "Step Functions' own errors",
                    "SQS." => "what a failed send to SQS is named, which a token wait retries on",
                    _ => "baton's own",
                }
            ),
        ));
    }
    Ok(())
}

/// The reserved prefix `error` begins with, if any. Step Functions reserves `States.` for its
/// own errors, and baton's Catches and triggers read `baton.` ones (a cancel is
/// `baton.Cancelled`): a sender posing as either would end a run as a cancel or a timeout, or
/// kill the execution with an error nothing catches (found by review). `SQS.` names a failed
/// send, which a token wait retries on: a worker's failure named so would re-enter the step
/// instead of failing it. Matched without regard
/// to case, as a reader of a log would take them.
fn reserved_error(error: &str) -> Option<&'static str> {
    ["States.", "baton.", "SQS."]
        .into_iter()
        .find(|prefix| error.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix)))
}

/// The `compensation` field: a boolean, false when absent. A compensation's acknowledgement
/// says it succeeded or failed, and carries no data.
fn parse_compensation(
    value: Option<Value>,
    outcome: &StepOutcome,
    data: &Map<String, Value>,
) -> Result<bool, Answer> {
    let compensation = match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(Answer::field("invalid_body", "compensation", "compensation must be true or false"));
        }
    };
    if compensation && *outcome == StepOutcome::InProgress {
        return Err(Answer::field(
            "invalid_body",
            "outcome",
            "a compensation's outcome is succeeded or failed; its wait takes no heartbeat",
        ));
    }
    if compensation && !data.is_empty() {
        return Err(Answer::field(
            "invalid_body",
            "data",
            "a compensation's acknowledgement carries no data; keep what the undo produced in your own system",
        ));
    }
    Ok(compensation)
}

/// The `retryable` field: a boolean, with a failed outcome only; true when absent.
fn parse_retryable(value: Option<Value>, outcome: &str) -> Result<bool, Answer> {
    match value {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) if outcome == "failed" => Ok(b),
        Some(Value::Bool(_)) => {
            Err(Answer::field("invalid_body", "retryable", "retryable is for a failed outcome only"))
        }
        Some(_) => Err(Answer::field("invalid_body", "retryable", "retryable must be true or false")),
    }
}

/// The `outcome` field, with the failure's `error`, `cause` and `retryable` when it failed.
fn parse_outcome(
    outcome: &str,
    error: Option<String>,
    cause: Option<String>,
    retryable: bool,
) -> Result<StepOutcome, Answer> {
    match outcome {
        "succeeded" => Ok(StepOutcome::Succeeded),
        "in_progress" => Ok(StepOutcome::InProgress),
        "failed" => Ok(StepOutcome::Failed {
            error: error.unwrap_or_else(|| "baton.CallbackFailed".into()),
            cause: cause.unwrap_or_default(),
            retryable,
        }),
        other => Err(Answer::field(
            "invalid_body",
            "outcome",
            format!("outcome {other:?} is not one of succeeded, failed, in_progress"),
        )),
    }
}

/// The first integer literal in `json` (outside strings) that neither an `i64` nor a `u64`
/// holds. serde_json would read it as a float and silently round it: an account number or an
/// amount in minor units would reach the workflow changed.
fn integer_past_64_bits(json: &[u8]) -> Option<&str> {
    let (mut i, mut in_string) = (0, false);
    while i < json.len() {
        let b = json[i];
        if in_string {
            // Straight to the string's next quote or escape: a body is mostly strings (a
            // failure's cause runs to 32,768 characters), and this walk was hot in the simulation.
            let Some(n) = json[i..].iter().position(|&c| c == b'"' || c == b'\\') else { break };
            i += n;
            if json[i] == b'"' {
                in_string = false;
            } else {
                // An escape: the character after it is skipped too.
                i += 1;
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
        } else if b == b'-' || b.is_ascii_digit() {
            let end =
                json[i..].iter().position(|c| !b"+-.eE0123456789".contains(c)).map_or(json.len(), |n| i + n);
            let literal = std::str::from_utf8(&json[i..end]).unwrap_or_default();
            let integer = !literal.contains(['.', 'e', 'E']);
            if integer && literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err() {
                return Some(literal);
            }
            i = end;
            continue;
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published contract (infra/openapi.yaml, what API Gateway serves) says what the code
    /// takes and answers: the body's fields, and the 503's `maybe_applied`.
    #[test]
    fn the_openapi_contract_lists_the_fields_the_code_takes_and_answers() {
        let spec: Value = serde_saphyr::from_str(include_str!("../../../../infra/openapi.yaml")).unwrap();
        let schemas = &spec["components"]["schemas"];
        let mut documented: Vec<&str> =
            schemas["Callback"]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let mut taken = FIELDS.to_vec();
        documented.sort_unstable();
        taken.sort_unstable();
        assert_eq!(documented, taken, "infra/openapi.yaml's Callback against parse_body's FIELDS");
        assert_eq!(schemas["Callback"]["additionalProperties"], json!(false), "unknown fields are refused");
        assert!(schemas["Error"]["properties"]["maybe_applied"].is_object(), "the 503's maybe_applied");
        let unavailable =
            spec["paths"]["/v1/callbacks"]["post"]["responses"]["503"]["description"].as_str().unwrap();
        assert!(
            unavailable.contains("maybe_applied") && unavailable.contains("in_progress"),
            "{unavailable}"
        );
    }

    fn field_of(body: &str) -> (String, String) {
        let answer = parse_body(body.as_bytes()).err().expect("an error");
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        (
            answer.body["field"].as_str().unwrap().to_owned(),
            answer.body["message"].as_str().unwrap().to_owned(),
        )
    }

    #[test]
    fn a_named_escalation_level_must_be_one_the_step_declares_for_its_own_task() {
        let config = crate::domain::config::Config::parse(
            "workflows:\n  w:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
             - name: review\n        requires: [d]\n        timeout: 1d\n        \
             task: { title: Review, queue: review }\n        \
             compensate: { task: { title: Undo, queue: review }, timeout: 1h }\n        \
             escalate: [{ after: 1h, queue: leads }, { after: 2h, queue: heads }]\n      \
             - { name: pay, requires: [p], timeout: 1h }\n",
        )
        .unwrap();
        let step = &config.workflows[0].steps[0];
        let body = |level: u32, compensation: bool| {
            let data = if compensation { "null" } else { r#"{"d":1}"# };
            parse_body(
                format!(
                    r#"{{"workflow":"w","key":"k","step":"review","outcome":"succeeded","data":{data},"level":{level},"compensation":{compensation}}}"#
                )
                .as_bytes(),
            )
            .unwrap()
        };
        assert!(answers_level(&body(1, false), step, 1).is_ok());
        assert!(answers_level(&body(2, false), step, 2).is_ok());
        let refused = answers_level(&body(3, false), step, 3).unwrap_err();
        assert_eq!(
            (refused.status, refused.body["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("level"))
        );
        assert!(
            refused.body["message"].as_str().unwrap().contains("declares 2 escalation levels"),
            "{}",
            refused.body
        );
        let compensation = answers_level(&body(1, true), step, 1).unwrap_err();
        assert!(
            compensation.body["message"].as_str().unwrap().contains("not escalated"),
            "{}",
            compensation.body
        );
        let none = answers_level(&body(1, false), &config.workflows[0].steps[1], 1).unwrap_err();
        assert!(
            none.body["message"].as_str().unwrap().contains("declares 0 escalation levels"),
            "{}",
            none.body
        );
        assert_eq!(
            field_of(r#"{"workflow":"w","key":"k","step":"s","outcome":"succeeded","level":0}"#).0,
            "level"
        );
    }

    #[test]
    fn a_malformed_body_is_refused_naming_the_field() {
        assert_eq!(field_of("[1]").0, "");
        assert_eq!(field_of("{nope").0, "");
        assert_eq!(field_of(r#"{"key":"k","step":"s","outcome":"succeeded"}"#).0, "workflow");
        assert_eq!(
            field_of(r#"{"workflow":"w","key":"has space","step":"s","outcome":"succeeded"}"#).0,
            "key"
        );
        let (field, message) = field_of(r#"{"workflow":"w","key":"k","step":"s","outcome":"done"}"#);
        assert_eq!(field, "outcome");
        assert!(message.contains("succeeded, failed, in_progress"), "{message}");
        assert_eq!(
            field_of(r#"{"workflow":"w","key":"k","step":"s","outcome":"succeeded","data":[1]}"#).0,
            "data"
        );
        assert_eq!(
            field_of(r#"{"workflow":"w","key":"k","step":"s","outcome":"succeeded","extra":1}"#).0,
            "extra"
        );
        assert_eq!(field_of(r#"{"workflow":5,"key":"k","step":"s","outcome":"succeeded"}"#).0, "workflow");
        assert_eq!(
            field_of(r#"{"workflow":"w","key":"k","step":"s","outcome":"succeeded","generation":0}"#).0,
            "generation"
        );
    }

    #[test]
    fn an_error_or_cause_longer_than_step_functions_takes_is_refused_naming_the_limit() {
        // Given a failure whose error is one character past SendTaskFailure's limit
        let body = |error: &str, cause: &str| {
            json!({"workflow": "w", "key": "k", "step": "s", "outcome": "failed", "error": error, "cause": cause})
                .to_string()
        };
        let (field, message) = field_of(&body(&"E".repeat(257), "c"));
        // Then it is refused at the edge, naming the field and the limit
        assert_eq!(field, "error");
        assert!(message.contains("257") && message.contains("256"), "{message}");
        let (field, message) = field_of(&body("E", &"c".repeat(32_769)));
        assert_eq!(field, "cause");
        assert!(message.contains("32768"), "{message}");
        // Characters outside the BMP count twice, as AWS counts them
        assert_eq!(field_of(&body(&"\u{1F600}".repeat(129), "c")).0, "error");
        // And the limits themselves are accepted
        assert!(parse_body(body(&"E".repeat(256), &"c".repeat(32_768)).as_bytes()).is_ok());
    }

    /// A sender may not name its failure as Step Functions' own (`States.Timeout` killed the
    /// execution with an error nothing catches) or as baton's (`baton.Cancelled` ended the run
    /// as an operator's cancel): both refused at the edge, naming the field (found by review).
    #[test]
    fn a_failure_named_as_step_functions_or_baton_names_their_own_is_refused() {
        let body = |error: &str| {
            json!({"workflow": "w", "key": "k", "step": "s", "outcome": "failed", "error": error}).to_string()
        };
        for reserved in [
            "States.Timeout",
            "States.ALL",
            "states.taskfailed",
            "baton.Cancelled",
            "BATON.StepFailed",
            "SQS.SdkClientException",
        ] {
            let (field, message) = field_of(&body(reserved));
            assert_eq!(field, "error", "{reserved}");
            assert!(message.contains("reserved"), "{reserved}: {message}");
        }
        for fine in ["StatesTimeout", "Rejected", "batonCancelled", "MyStates.Timeout"] {
            assert!(parse_body(body(fine).as_bytes()).is_ok(), "{fine}");
        }
        // With no error named, baton names the failure itself, as ever.
        let unnamed = json!({"workflow": "w", "key": "k", "step": "s", "outcome": "failed"}).to_string();
        assert!(parse_body(unnamed.as_bytes()).is_ok());
    }

    #[test]
    fn an_integer_past_64_bits_is_refused_rather_than_rounded() {
        let body = |data: &str| {
            format!(r#"{{"workflow":"w","key":"k","step":"s","outcome":"succeeded","data":{data}}}"#)
        };
        let (field, message) = field_of(&body(r#"{"account": 123456789012345678901234567890}"#));
        assert_eq!(field, "data");
        assert!(message.contains("123456789012345678901234567890"), "{message}");
        assert_eq!(field_of(&body(r#"{"n": [-9223372036854775809]}"#)).0, "data");
        // What 64 bits hold, floats, and digits inside strings are kept as they are
        for fine in [
            r#"{"n": 18446744073709551615, "m": -9223372036854775808}"#,
            r#"{"f": 1.5e300, "g": 12345678901234567890123.5}"#,
            r#"{"s": "123456789012345678901234567890", "t": "a\"99999999999999999999999"}"#,
        ] {
            assert!(parse_body(body(fine).as_bytes()).is_ok(), "{fine}");
        }
    }

    /// A 400 names the field that is wrong: an integer past 64 bits in `generation` is a bad
    /// generation, not bad `data` (the body may carry no `data` at all).
    #[test]
    fn an_integer_past_64_bits_outside_data_names_its_own_field() {
        let body = r#"{"workflow":"w","key":"k","step":"s","outcome":"succeeded","generation":18446744073709551616}"#;
        assert_eq!(field_of(body).0, "generation");
    }

    /// Attacks on the scanner that held (coverage): escapes, `\\"`, whitespace, negative zero,
    /// exponents, nested arrays, number-like keys.
    #[test]
    fn the_integer_scanner_is_not_fooled_by_strings_escapes_or_exponents() {
        let body = |data: &str| {
            format!(r#"{{"workflow":"w","key":"k","step":"s","outcome":"succeeded","data":{data}}}"#)
        };
        for bad in [
            r#"{"a\\": 99999999999999999999}"#,
            r#"{"a\\\"": 99999999999999999999}"#,
            r#"{"a":"\\"  ,  "b":[[[ -99999999999999999999 ]]]}"#,
            "{\"a\":\n\t\r 99999999999999999999}",
            r#"{"18446744073709551616": 18446744073709551616}"#,
            r#"{"a": "\u0022", "b": 18446744073709551616}"#,
        ] {
            assert_eq!(field_of(&body(bad)).0, "data", "{bad}");
        }
        for fine in [
            r#"{"a": -0, "b": 0, "c": -0.0, "d": 1e19, "e": 1E+30}"#,
            r#"{"18446744073709551616": 1}"#,
            r#"{"a": "\\\\18446744073709551616\\\\"}"#,
            r#"{"a": ["\"", 18446744073709551615, -9223372036854775808]}"#,
        ] {
            assert!(parse_body(body(fine).as_bytes()).is_ok(), "{fine}");
        }
    }

    #[test]
    fn a_failed_outcome_carries_error_and_cause() {
        let c = parse_body(
            br#"{"workflow":"w","key":"k","step":"s","outcome":"failed","error":"Rejected","cause":"fraud"}"#,
        )
        .ok()
        .unwrap();
        assert_eq!(
            c.outcome,
            StepOutcome::Failed { error: "Rejected".into(), cause: "fraud".into(), retryable: true }
        );
    }

    #[test]
    fn a_stored_answer_comes_back_marked_as_a_duplicate() {
        let a =
            stored_answer(&json!({"http_status": 202, "body": {"status": "buffered", "duplicate": false}}));
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body, json!({"status": "buffered", "duplicate": true}));
    }

    /// A duplicate answers with the state the input's own write left, in whichever generation
    /// applied it: a retry after a restart is answered as its first attempt was (found by the
    /// simulation, which saw the new generation's state in the retry's answer).
    #[test]
    fn a_duplicate_is_answered_with_the_state_its_own_write_left_after_a_restart() {
        use crate::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
        use crate::domain::lifecycle::{Finish, Input, Plan, Record, Source, decide};
        let plan = Plan::line(vec![vec!["decision".to_owned()]]);
        let names = (WorkflowName::parse("w").unwrap(), CorrelationKey::parse("k").unwrap());
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let step = |r: Option<&Record>, input: &Input| {
            decide(&plan, (&names.0, &names.1), r, input, now).write.unwrap().to
        };
        let ready = |r: &Record, tok: &str| Input::StepReady {
            generation: r.generation,
            step: 0,
            token: TaskToken::parse(tok).unwrap(),
            deadline: now + time::Duration::days(1),
        };
        let input = Input::StepInput {
            id: EventId::parse("cb-1").unwrap(),
            hash: "h".into(),
            source: Source::Callback,
            step: 0,
            outcome: StepOutcome::Succeeded,
            data: serde_json::from_value(json!({"decision": "ok"})).unwrap(),
            generation: Some(1),
            attempt: None,
        };
        let r = step(None, &Input::start(EventId::parse("e1").unwrap()));
        let r = step(Some(&r), &ready(&r, "t1"));
        let r = step(Some(&r), &input);
        let r = step(Some(&r), &Input::Finished { generation: 1, finish: Finish::Succeeded });
        let r = step(Some(&r), &Input::start(EventId::parse("e2").unwrap()));
        let r = step(Some(&r), &ready(&r, "t2"));
        let a =
            answer(("w", &names.1, "s"), &EventId::parse("cb-1").unwrap(), (Outcome::Duplicate, Some(&r)))
                .unwrap();
        assert_eq!(a.body["state"], "advancing{0}");
        assert_eq!(a.body["duplicate"], true);
    }

    #[test]
    fn a_503_carries_retry_after() {
        let r = Answer { status: StatusCode::SERVICE_UNAVAILABLE, body: json!({}), retry_after: Some(5) }
            .into_response();
        assert_eq!(r.headers().get("retry-after").unwrap(), "5");
        assert_eq!(r.headers().get("content-type").unwrap(), "application/json");
    }
}
