//! The intake use case: a domain event from SQS starts workflows and supplies step inputs.
//!
//! Per message, parse first, then act (parse-then-apply): the event is parsed, every workflow it
//! starts and every step it supplies is resolved with its correlation key, and only then does
//! anything change. So an event that is wrong for one workflow (as the deployed config reads
//! it) goes to the dead-letter queue whole, before it has half-started the others. Starting is
//! idempotent (the record remembers its start events; execution names are deterministic), so
//! redelivery is always safe.
//!
//! Step inputs are read in every registered config version: a record takes an event only as
//! its own version reads it. Another version's reading that fails (no key at that version's
//! pointer) supplies nothing there, and does not dead-letter the event.

use std::collections::VecDeque;
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use serde_json::{Map, Value};
use tracing::{info, instrument};

use crate::domain::config::{Config, Workflow};
use crate::domain::event::Event;
use crate::domain::ids::CorrelationKey;
use crate::domain::ids::payload_hash;
use crate::domain::lifecycle::{Input, Source, StepOutcome};
use crate::ports::dead_letters::DeadLetters;
use crate::ports::metrics::Metric;
use crate::use_cases::batch::{Deadline, SqsHandler, Verdict, process_batch};
use crate::use_cases::engine::{Definition, Engine, EngineError, Exact};

#[async_trait::async_trait]
impl SqsHandler for Intake {
    /// Handles one SQS batch; the response lists only the messages to redeliver.
    async fn handle_within(&self, event: SqsEvent, deadline: &dyn Deadline) -> SqsBatchResponse {
        process_batch(event, &*self.dead_letters, deadline, |m| self.message(m)).await
    }
}

/// How old the registered versions a function knows may be before an event that no known
/// version takes makes it read them again.
const VERSIONS_MAX_AGE: time::Duration = time::Duration::minutes(1);

/// How many times one event is read again in another config version, for records that moved
/// onto it meanwhile, before the queue is left to retry it.
const MAX_REREADS: u32 = 4;

/// The dead-letter reason of an event that matched a workflow but lacks its correlation key.
pub const MISSING_CORRELATION_KEY: &str = "missing_correlation_key";

/// The intake handler, as Lambda calls it.
pub struct Intake {
    engine: Arc<Engine>,
    dead_letters: DeadLetters,
}

/// What one event does, resolved before anything is applied.
pub struct EventPlan<'a> {
    pub event: Event,
    /// Every workflow it starts and every step it supplies, with the correlation key.
    pub inputs: Vec<(&'a Workflow, CorrelationKey, Input)>,
}

impl Intake {
    pub fn new(engine: Arc<Engine>, dead_letters: DeadLetters) -> Self {
        Intake { engine, dead_letters }
    }

    #[instrument(skip_all, fields(message_id = message.message_id.as_deref().unwrap_or("")))]
    async fn message(&self, message: SqsMessage) -> Verdict {
        let now = self.engine.now();
        let body = message.body.as_deref().unwrap_or_default();
        let plan = match plan_event(&self.engine.config, body) {
            Ok(plan) => plan,
            Err(verdict) => {
                self.engine.metrics.count(Metric::PoisonMessages, None, now);
                return verdict;
            }
        };
        let mut versions = match self.engine.config_versions().await {
            Ok(versions) => versions,
            Err(e) => return Verdict::from_error(&e),
        };
        let mut others = other_step_inputs(&versions, body);
        // Nothing takes it in the versions this function knows: a version deployed since may
        // (read again at most once a minute).
        if plan.inputs.is_empty() && others.is_empty() {
            match self.engine.refresh_versions(VERSIONS_MAX_AGE).await {
                Ok(false) => {}
                Ok(true) => match self.engine.config_versions().await {
                    Ok(all) => {
                        versions = all;
                        others = other_step_inputs(&versions, body);
                    }
                    Err(e) => return Verdict::from_error(&e),
                },
                Err(e) => return Verdict::from_error(&e),
            }
        }
        if plan.inputs.is_empty() && others.is_empty() {
            info!(event_id = %plan.event.id, event_type = %plan.event.r#type, source = %plan.event.source,
                "event starts no workflow and supplies no step: not eligible");
            self.engine.metrics.count(Metric::NotEligible, None, now);
            return Verdict::Done;
        }
        // A step input is one version's reading of the event: it holds only for a record on
        // that version (or none yet, for this function's own). A record on another version gets
        // the event as that version reads it: that reading is still to come in this loop, or it
        // is read now (a version deployed after this function's cold start, or one read before
        // the record moved onto it: a restart between two submits; an event dropped so was
        // found by the simulation).
        let own = plan.inputs.iter().filter_map(|(w, k, i)| {
            Some((Definition::of(self.engine.config.clone(), w.name.as_str())?, k.clone(), i.clone()))
        });
        let mut todo: VecDeque<_> = own.chain(others).collect();
        let mut rereads = 0;
        while let Some((workflow, key, input)) = todo.pop_front() {
            if !matches!(input, Input::StepInput { .. }) {
                if let Err(e) = self.engine.submit(&workflow, &key, &input, now).await {
                    return Verdict::from_error(&e);
                }
                continue;
            }
            let version = match self.engine.submit_exact(&workflow, &key, &input, now).await {
                Ok(Exact::OtherVersion(version)) => version,
                Ok(Exact::Decided(_)) => continue,
                Err(e) => return Verdict::from_error(&e),
            };
            let coming = |(w, k, _): &(Definition, CorrelationKey, Input)| {
                w.config_version == version && w.name == workflow.name && *k == key
            };
            if todo.iter().any(coming) {
                continue;
            }
            // A record that keeps moving between versions: the queue retries the event.
            rereads += 1;
            if rereads > MAX_REREADS {
                return Verdict::from_error(&EngineError::Contended { attempts: rereads });
            }
            match self.reading(&version, &workflow, &key, body).await {
                Ok(inputs) => todo.extend(inputs),
                Err(e) => return Verdict::from_error(&e),
            }
        }
        Verdict::Done
    }

    /// The step inputs `body` supplies to (workflow, key) as config `version` reads it.
    async fn reading(
        &self,
        version: &str,
        workflow: &Workflow,
        key: &CorrelationKey,
        body: &str,
    ) -> Result<Vec<(Definition, CorrelationKey, Input)>, EngineError> {
        let config = self.engine.config_of(Some(version)).await?;
        let mut inputs = step_inputs(&config, body);
        inputs.retain(|(w, k, _)| w.name == workflow.name && k == key);
        Ok(inputs)
    }
}

/// The step inputs `body` supplies as each other config version of `versions` (the engine's
/// own first, as [`Engine::config_versions`] lists them) reads it (its `accepts_events`, its
/// key pointer): for records on that version. An event that does not parse, or matches nothing
/// there, supplies nothing there.
pub fn other_step_inputs(versions: &[Arc<Config>], body: &str) -> Vec<(Definition, CorrelationKey, Input)> {
    versions.iter().skip(1).flat_map(|config| step_inputs(config, body)).collect()
}

/// The step inputs `body` supplies as `config` reads it; none when it does not parse there.
fn step_inputs(config: &Arc<Config>, body: &str) -> Vec<(Definition, CorrelationKey, Input)> {
    let Ok(plan) = plan_event(config, body) else { return Vec::new() };
    plan.inputs
        .into_iter()
        .filter(|(_, _, input)| matches!(input, Input::StepInput { .. }))
        .filter_map(|(w, k, input)| Some((Definition::of(config.clone(), w.name.as_str())?, k, input)))
        .collect()
}

/// Parses an event and resolves what it does under `config`, before anything is applied.
pub fn plan_event<'c>(config: &'c Config, body: &str) -> Result<EventPlan<'c>, Verdict> {
    let event =
        Event::parse(body).map_err(|e| Verdict::Poison { reason: e.reason_code(), detail: e.to_string() })?;
    let normalised = event.normalised();
    let mut inputs = Vec::new();
    let mut hash = None;
    for route in config.routes.candidates(&event.r#type) {
        let workflow = &config.workflows[route.workflow];
        let key = || {
            workflow.correlation_key_in(&normalised).map_err(|e| Verdict::Poison {
                reason: MISSING_CORRELATION_KEY,
                detail: format!("event {} matches workflow {}, but {e}", event.id, workflow.name),
            })
        };
        if !config.pattern(route).is_some_and(|p| p.matches(&normalised)) {
            continue;
        }
        let Some(i) = route.step else {
            let untils = workflow.untils(&normalised);
            inputs.push((workflow, key()?, Input::Start { event: event.id.clone(), untils }));
            continue;
        };
        let data = match &event.data {
            Value::Object(map) => map.clone(),
            Value::Null => Map::new(),
            other => Map::from_iter([("data".to_owned(), other.clone())]),
        };
        let input = Input::StepInput {
            id: event.id.clone(),
            hash: hash.get_or_insert_with(|| payload_hash(body.as_bytes())).clone(),
            source: Source::Event,
            step: u32::try_from(i).unwrap_or(u32::MAX),
            outcome: StepOutcome::Succeeded,
            data,
            generation: None,
            attempt: None,
        };
        inputs.push((workflow, key()?, input));
    }
    Ok(EventPlan { event, inputs })
}
