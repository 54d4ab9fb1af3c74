//! `baton end WORKFLOW KEY`: the way out for a record whose execution is gone.
//!
//! A record is stranded when its execution ended without the report baton waits for (stopped
//! from the console, a report lost past its dead-letter queue): the sweeper notices it, counts
//! it (`RecordsStranded`, alarmed) and leaves it to a person. `baton end` is that person's tool,
//! for a stranded record or any live one whose execution is no longer running (compensating
//! included), before the sweeper got to it:
//!
//! - **A plan first.** It reads the record and asks Step Functions how the execution ended, and
//!   says what the record will become, and what stays undone: compensations not acknowledged,
//!   and completed steps that declare `compensate` which nothing will now undo. Nothing is
//!   written.
//! - **Then `--apply --expect-version N`**, N the record version the plan showed: refused if
//!   the record changed since. The record is stranded (if it was not yet), then ended as the
//!   execution ended ([`lifecycle::ended_as`]; a compensation settles as at the chain's end).
//! - **Never a running execution**: that is `baton cancel`'s.

use anyhow::{Context, Result, bail};
use baton_core::domain::config::Workflow;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{self, NOT_FOUND, Record, State, WaitOutcome};
use baton_core::use_cases::ending::{self, ExecutionEnd};
use serde_json::{Value, json};

use crate::recover::tools;
use crate::target::TargetArgs;
use crate::terminal::terminal_safe;

/// The JSON document's schema name.
pub const SCHEMA: &str = "baton.end-plan/v1";

#[derive(Debug, clap::Args)]
pub struct EndArgs {
    pub workflow: String,
    /// The correlation key.
    pub key: String,
    /// Why: kept in the record's history.
    #[arg(long, default_value = "its execution ended without its report")]
    pub reason: String,
    /// Carry the plan out. Needs `--expect-version`, the record version the plan showed.
    #[arg(long, requires = "expect_version")]
    pub apply: bool,
    /// The record version the plan was made on: `--apply` is refused if the record changed since.
    #[arg(long)]
    pub expect_version: Option<u64>,
    /// Print the `baton.end-plan/v1` JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub config: std::path::PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn run(args: EndArgs) -> Result<()> {
    let t = tools(&args.config, &args.target, &[]).await?;
    let name = WorkflowName::parse(args.workflow.as_str())?;
    let key = CorrelationKey::parse(args.key.as_str())?;
    let Some(record) = t.engine.store.load(&name, &key).await? else {
        bail!("no such workflow record: {} {}", args.workflow, args.key);
    };
    // The record's own config version defines its workflow, even one a later deploy removed.
    let definition =
        t.engine.definition(name.as_str(), Some(record.config_version.as_str())).await?.with_context(
            || format!("no workflow named {:?} in the record's config version", args.workflow),
        )?;
    let workflow: &Workflow = &definition;
    let execution = ExecutionEnd::of(&t.engine, workflow, &record)
        .await
        .with_context(|| format!("cannot read the execution of {} {}", args.workflow, args.key))?;
    let doc = plan(workflow, &record, &execution, &args.reason);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", text(&doc, &args));
    }
    if let Some(refused) = doc["refused"].as_str() {
        bail!("refused: {refused}");
    }
    if !args.apply {
        return Ok(());
    }
    if args.expect_version != Some(record.version) {
        bail!(
            "refused: the record is at version {}, not {}: it changed since the plan; plan again",
            record.version,
            args.expect_version.unwrap_or_default()
        );
    }
    ending::end(&t.engine, workflow, &record, &execution, &args.reason)
        .await
        .map_err(|e| anyhow::anyhow!("refused: {e}"))?;
    println!("ended {} {}: {}", args.workflow, args.key, doc["ends"].as_str().unwrap_or_default());
    Ok(())
}

/// What ending `r` (whose execution stands as `execution` says) would do, decided by the
/// lifecycle as the apply will be, without writing: the `baton.end-plan/v1` document.
fn plan(workflow: &Workflow, r: &Record, execution: &ExecutionEnd, reason: &str) -> Value {
    let ended = execution.ended(workflow, r, reason);
    let refused = match (&ended, r.state) {
        _ if r.state.is_terminal() => Some(format!("the record has already ended ({})", r.state)),
        (_, State::Pending) if execution.status == NOT_FOUND => {
            Some("its execution has not started yet: the sweeper starts it".to_owned())
        }
        _ if !lifecycle::execution_gone(&execution.status) => Some(format!(
            "its execution is {} (not ended): `baton cancel` stops a running one",
            execution.status
        )),
        (None, _) => Some("the lifecycle refuses to end it; see `baton trace`".to_owned()),
        _ => None,
    };
    json!({
        "schema": SCHEMA,
        "workflow": workflow.name.as_str(),
        "key": r.key.as_str(),
        "generation": r.generation,
        "state": r.state.to_string(),
        "version": r.version,
        "execution_status": execution.status,
        "execution_error": execution.error,
        "ends": ended.as_ref().map(|e| e.state.to_string()),
        "stays_undone": stays_undone(workflow, r, ended.as_ref()),
        "refused": refused,
    })
}

/// The steps whose work stays done once `r` ends as `ended`: a compensation that ran and was not
/// acknowledged, or, before compensation began, a completed step that declares `compensate`.
fn stays_undone(workflow: &Workflow, r: &Record, ended: Option<&Record>) -> Vec<Value> {
    let name =
        |step: u32| workflow.steps.get(step as usize).map_or(format!("step {step}"), |s| s.name.to_string());
    match (&r.compensation, ended) {
        (Some(_), Some(e)) => e
            .compensation
            .iter()
            .flat_map(|c| c.run())
            .filter(|u| u.wait.outcome() != Some(WaitOutcome::Succeeded))
            .map(|u| json!({"step": name(u.step()), "why": "its compensation was not acknowledged"}))
            .collect(),
        (None, _) => lifecycle::compensation_plan(&workflow.plan(), r)
            .iter()
            .filter(|u| u.skip.is_none())
            .map(|u| json!({"step": name(u.step()), "why": "it completed and declares compensate; no compensation will run now"}))
            .collect(),
        _ => Vec::new(),
    }
}

fn text(doc: &Value, args: &EndArgs) -> String {
    let s = |v: &Value| terminal_safe(v.as_str().unwrap_or("-")).into_owned();
    let mut out = format!(
        "{} {} (generation {}): {} at version {}; its execution: {}\n",
        s(&doc["workflow"]),
        s(&doc["key"]),
        doc["generation"],
        s(&doc["state"]),
        doc["version"],
        s(&doc["execution_status"])
    );
    if doc["refused"].is_string() {
        return out;
    }
    out += &format!("ends: {}\n", s(&doc["ends"]));
    for step in doc["stays_undone"].as_array().into_iter().flatten() {
        out += &format!("stays undone: {} ({})\n", s(&step["step"]), s(&step["why"]));
    }
    if !args.apply {
        out += &format!(
            "to carry it out: baton end {} {} --apply --expect-version {}\n",
            args.workflow, args.key, doc["version"]
        );
    }
    out
}
