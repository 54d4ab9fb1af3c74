//! `baton compensate plan WORKFLOW KEY [--json]`: what compensation would do for a record, or is
//! doing, or did.
//!
//! For a record that has not begun compensating, the plan is what a failure now would undo (the
//! record as it stands, read the way compensation reads it when it begins). For one compensating
//! or ended after compensating, it is the plan fixed when compensation began, with each step's
//! outcome. Every step of the workflow is listed, last position first: completed or not, its
//! compensation, the attempts used, and its state.

use anyhow::{Context, Result, bail};
use baton_core::domain::config::Workflow;
use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::{self, Record, State, Undo, WaitOutcome};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::recover::tools;
use crate::target::TargetArgs;
use crate::terminal::{columns, line};

/// The JSON document's schema name.
pub const SCHEMA: &str = "baton.compensation-plan/v1";

#[derive(Debug, clap::Args)]
pub struct CompensateArgs {
    #[command(subcommand)]
    pub command: CompensateCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum CompensateCommand {
    /// For one record: each step, completed or not, its compensation, attempts used, and state.
    Plan(PlanArgs),
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    pub workflow: String,
    /// The correlation key.
    pub key: String,
    /// Print the `baton.compensation-plan/v1` JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub config: std::path::PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn run(args: CompensateArgs) -> Result<()> {
    let CompensateCommand::Plan(args) = args.command;
    let t = tools(&args.config, &args.target, &[]).await?;
    let workflow = t
        .engine
        .config
        .workflow(&args.workflow)
        .with_context(|| format!("no workflow named {:?} in the config", args.workflow))?;
    let key = CorrelationKey::parse(args.key.as_str())?;
    let Some(record) = t.engine.store.load(&workflow.name, &key).await? else {
        bail!("no such workflow record: {} {}", args.workflow, args.key);
    };
    // The record is read in the config version it runs.
    let pinned = t.engine.definition(workflow.name.as_str(), Some(record.config_version.as_str())).await?;
    let definition: &Workflow = pinned.as_deref().unwrap_or(workflow);
    let doc = document(definition, &record);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", text(&doc));
    }
    Ok(())
}

/// Where compensation stands for a record.
fn phase(r: &Record) -> &'static str {
    match (r.state, &r.compensation) {
        (State::Compensating, _) => "compensating",
        (_, Some(_)) => "ended",
        _ => "not_begun",
    }
}

/// The `baton.compensation-plan/v1` document for `r`, its steps named by `workflow`.
pub fn document(workflow: &Workflow, r: &Record) -> Value {
    let plan = workflow.plan();
    let undos: Vec<Undo> = match &r.compensation {
        Some(c) => c.undos.clone(),
        None => lifecycle::compensation_plan(&plan, r),
    };
    let mut steps: Vec<Value> = undos.iter().map(|u| step_entry(workflow, r, Some(u), u.step())).collect();
    // The steps the plan leaves out: not completed, with nothing to undo.
    let mut rest: Vec<u32> =
        (0..workflow.steps.len() as u32).filter(|i| !undos.iter().any(|u| u.step() == *i)).collect();
    rest.reverse();
    steps.extend(rest.into_iter().map(|i| step_entry(workflow, r, None, i)));
    let trigger = r.compensation.as_ref().map(|c| {
        json!({"kind": c.trigger.as_str(), "detail": c.trigger, "began_at": c.began_at.format(&Rfc3339).ok()})
    });
    json!({
        "schema": SCHEMA,
        "workflow": workflow.name.as_str(),
        "key": r.key.as_str(),
        "generation": r.generation,
        "state": r.state.to_string(),
        "phase": phase(r),
        "trigger": trigger,
        "steps": steps,
    })
}

/// One step's line: `undo` is its entry in the plan (`None`: the plan leaves it out).
fn step_entry(workflow: &Workflow, r: &Record, undo: Option<&Undo>, step: u32) -> Value {
    let spec = &workflow.steps[step as usize];
    let compensation = spec.compensate.as_ref().map(|c| {
        json!({
            "title": c.task.render(workflow.name.as_str(), r.key.as_str(), spec.name.as_str(), r.generation),
            "queue": c.task.queue,
            "attempts": c.attempts,
            "timeout_seconds": c.timeout.as_secs(),
        })
    });
    let completed = undo.is_some_and(|u| u.skip != Some(lifecycle::SkipReason::NotCompleted));
    let state = match undo {
        None => "not_in_plan",
        Some(u) if r.compensation.is_none() && u.skip.is_none() => "would_run",
        Some(u) => u.state(),
    };
    let errors: Vec<Value> = undo
        .map(|u| {
            u.wait
                .failed
                .iter()
                .map(|a| json!({"attempt": a.attempt, "error": a.error, "cause": a.cause}))
                .collect()
        })
        .unwrap_or_default();
    // Each attempt whose task went out: the failed ones, and the last unless it failed too.
    let used = undo
        .filter(|u| u.wait.token.is_some() && u.skip.is_none())
        .map_or(0, |u| u.wait.failed.len() as u32 + u32::from(u.wait.outcome() != Some(WaitOutcome::Failed)));
    json!({
        "step": step,
        "name": spec.name.as_str(),
        "completed": completed,
        "compensation": compensation,
        "attempts_used": used,
        "state": state,
        "skip_reason": undo.and_then(|u| u.skip).map(|s| s.as_str()),
        "errors": errors,
    })
}

/// The table `baton compensate plan` prints. Every line goes through [`line`]: a sender chose
/// the failures' `error` and `cause` and a cancel's reason, and `--json` keeps them exact.
pub fn text(doc: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = String::new();
    line(
        &mut out,
        &format!(
            "{} {}  generation {}  state {}  compensation {}",
            s(&doc["workflow"]),
            s(&doc["key"]),
            doc["generation"],
            s(&doc["state"]),
            s(&doc["phase"]).replace('_', " ")
        ),
    );
    if let Some(t) = doc["trigger"].as_object() {
        let detail = &t["detail"];
        let why = detail["error"].as_str().or(detail["reason"].as_str()).unwrap_or_default();
        line(&mut out, &format!("  began {} after the run {} {}", s(&t["began_at"]), s(&t["kind"]), why));
    }
    let steps: Vec<&Value> = doc["steps"].as_array().into_iter().flatten().collect();
    let header = ["step", "completed", "attempts", "state", "compensation"].map(str::to_owned).to_vec();
    let rows: Vec<Vec<String>> = std::iter::once(header).chain(steps.iter().copied().map(step_row)).collect();
    let lines = columns(&rows);
    out.push_str(&format!("  {}\n", lines[0]));
    for (step, text) in steps.iter().zip(&lines[1..]) {
        out.push_str(&format!("  {text}\n"));
        for e in step["errors"].as_array().into_iter().flatten() {
            line(
                &mut out,
                &format!("      attempt {} failed: {} {}", e["attempt"], s(&e["error"]), s(&e["cause"])),
            );
        }
    }
    out
}

/// One step's cells in the plan's table: name, completed, attempts, state, compensation.
fn step_row(step: &Value) -> Vec<String> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let comp = &step["compensation"];
    let (what, attempts) = match comp.as_object() {
        Some(_) => (
            format!("{} ({}, {} attempts)", s(&comp["title"]), s(&comp["queue"]), comp["attempts"]),
            format!("{}/{}", step["attempts_used"], comp["attempts"]),
        ),
        None => ("none declared".to_owned(), "-".to_owned()),
    };
    let mut state = s(&step["state"]);
    if let Some(reason) = step["skip_reason"].as_str() {
        state = format!("{state} ({reason})");
    }
    let completed = if step["completed"] == true { "yes" } else { "no" };
    vec![s(&step["name"]), completed.to_owned(), attempts, state, what]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by review: the plan printed senders' `error` and `cause` (and an operator's cancel
    /// reason) raw, so terminal escapes reached the operator's screen and a newline could forge
    /// a line of the table. The text escapes them (`--json` prints the document as it is).
    #[test]
    fn a_senders_error_and_cause_are_shown_escaped() {
        let doc = json!({
            "workflow": "order-review", "key": "k-1", "generation": 1, "state": "compensating",
            "phase": "compensating",
            "trigger": {"kind": "failed", "detail": {"error": "Rejected\u{1b}]0;owned\u{7}"}, "began_at": "2026-12-01T09:00:00Z"},
            "steps": [{
                "step": 0, "name": "payment", "completed": true, "state": "running", "skip_reason": null,
                "attempts_used": 1,
                "compensation": {"title": "Refund k-1", "queue": "billing", "attempts": 3, "timeout_seconds": 60},
                "errors": [{"attempt": 1, "error": "BankDown\u{1b}[2J", "cause": "no\n  payment   yes  1/3  acknowledged  forged\u{202e}"}],
            }],
        });
        let text = text(&doc);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'), "{text}");
        assert!(text.contains("after the run failed Rejected\\x1b]0;owned\\x07"), "{text}");
        assert!(text.contains("attempt 1 failed: BankDown\\x1b[2J no\\n  payment   yes"), "{text}");
        assert!(text.contains("forged\\u{202e}"), "{text}");
        assert_eq!(text.lines().count(), 5, "no line forged: {text}");
    }
}
