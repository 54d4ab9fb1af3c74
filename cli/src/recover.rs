//! Recovery commands: `baton replay`, `baton redrive`, `baton cancel`.
//!
//! The rule for all three: look at the current state first, say what would happen, and only
//! then act, guarded. Replay is a dry run unless `--apply`; its plan can be saved, reviewed and
//! applied later, and each line is applied only if the record still has the version the plan
//! saw. Redrive moves messages back to their source queue in bulk, but refuses messages that need
//! a person unless `--force`, and logs who forced what. Nothing leaves a dead-letter queue until
//! it has been applied, re-queued, or classified `noop`.

use baton_aws::sqs::SqsDeadLetterReader;
use baton_core::ports::dead_letters::{DeadLetterReader, DlqMessage};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use baton_aws::wiring::Settings;
use baton_core::domain::config::Config;
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::{IgnoreReason, Input, Outcome, State};
use baton_core::ports::metrics::Metrics;
use baton_core::use_cases::engine::Engine;
use baton_core::use_cases::replay::{self, Applied, Classification, Done, Line, Origin};
use serde::{Deserialize, Serialize};

use crate::target::{self, Field, Target, TargetArgs};
use crate::terminal::{columns, terminal_safe};

/// Which dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dlq {
    Intake,
    Progress,
}

impl Dlq {
    fn origin(self) -> Origin {
        match self {
            Dlq::Intake => Origin::Intake,
            Dlq::Progress => Origin::Progress,
        }
    }

    fn dlq_field(self) -> Field {
        match self {
            Dlq::Intake => Field::IntakeDlqUrl,
            Dlq::Progress => Field::ProgressDlqUrl,
        }
    }

    fn source_field(self) -> Field {
        match self {
            Dlq::Intake => Field::IntakeQueueUrl,
            Dlq::Progress => Field::ProgressQueueUrl,
        }
    }
}

/// `baton replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Replay the messages of this dead-letter queue.
    #[arg(long, conflicts_with = "ledger")]
    pub dlq: Option<Dlq>,
    /// Replay the ledger entries (ignored inputs) of one workflow record: WORKFLOW KEY.
    #[arg(long, num_args = 2, value_names = ["WORKFLOW", "KEY"])]
    pub ledger: Option<Vec<String>>,
    /// Carry out the plan: deliver the `safe` lines, drop the `noop` ones from the DLQ.
    #[arg(long)]
    pub apply: bool,
    /// Write the plan to this file (JSON), to review it before `--apply --plan FILE`.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Apply this saved plan instead of planning anew. Lines are guarded by the versions it saw.
    #[arg(long, value_name = "FILE", requires = "apply")]
    pub plan: Option<PathBuf>,
    /// Print the plan and the results as JSON.
    #[arg(long)]
    pub json: bool,
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub config: PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// A saved plan: what `baton replay --save` writes and `--apply --plan` reads.
#[derive(Debug, Serialize, Deserialize)]
struct SavedPlan {
    schema: String,
    dlq: Option<Dlq>,
    ledger: Option<Vec<String>>,
    lines: Vec<Line>,
}

const PLAN_SCHEMA: &str = "baton.replay-plan/v1";

/// The alias `template.yaml` publishes each state machine under (`AutoPublishAlias`).
const STATE_MACHINE_ALIAS: &str = "live";

/// The engine and SQS client the recovery commands act through.
pub(crate) struct Tools {
    pub(crate) engine: Arc<Engine>,
    sqs: aws_sdk_sqs::Client,
    target: Target,
}

pub(crate) async fn tools(config: &std::path::Path, args: &TargetArgs, extra: &[Field]) -> Result<Tools> {
    let mut fields = vec![Field::Table, Field::StateMachines, Field::TaskQueueUrlPrefix];
    fields.extend_from_slice(extra);
    let target = target::resolve(args, &fields, true)?;
    let sdk = target.aws().sdk_config().await?;
    let config = Config::load(config)?;
    let prefix = target
        .state_machines
        .as_ref()
        .and_then(|s| s.prefix())
        .context("cannot tell the state machine ARN prefix; pass --state-machine-prefix")?;
    let settings = Settings {
        table: target.table.clone().unwrap_or_default(),
        state_machine_prefix: prefix,
        // Executions an operator's replay starts go through the alias the functions use: the
        // template's `live`, unless BATON_STATE_MACHINE_ALIAS names another (empty: none).
        state_machine_alias: match std::env::var("BATON_STATE_MACHINE_ALIAS") {
            Ok(alias) => Some(alias).filter(|a| !a.is_empty()),
            Err(_) => Some(STATE_MACHINE_ALIAS.to_owned()),
        },
        dlq_url: None,
        max_receive_count: baton_core::ports::dead_letters::DEFAULT_MAX_RECEIVE_COUNT,
        task_queue_url_prefix: target.queues.get(Field::TaskQueueUrlPrefix.env()).cloned(),
        config_path: None,
        webhook_secret_arn: None,
        webhook_secrets: None,
        webhook_secrets_ttl: baton_core::ports::secrets::DEFAULT_TTL,
        source_queue_url: None,
        requeue_delay_seconds: baton_core::ports::dead_letters::REQUEUE_DELAY_SECONDS,
        // Writes spread as the functions' do, so that their sweeper reads what a replay writes.
        due_shards: crate::ops::write_due_shards(
            &aws_sdk_dynamodb::Client::new(&sdk),
            target.table.as_deref().unwrap_or_default(),
        )
        .await?,
        // A replay's or cancel's record keeps a long (AWS) token in its own item, as the
        // functions' do by default; either way, every version from token items reads both.
        token_inline_max: baton_aws::dynamodb::TOKEN_INLINE_MAX,
    };
    // Metrics from an operator's terminal would be noise on stdout: they go nowhere.
    let engine = baton_aws::wiring::engine(&sdk, &settings, config, Metrics::to(Box::new(std::io::sink())));
    Ok(Tools { engine: Arc::new(engine), sqs: aws_sdk_sqs::Client::new(&sdk), target })
}

fn queue(target: &Target, field: Field) -> Result<String> {
    let url = match field {
        Field::IntakeQueueUrl => target.intake_queue_url.clone(),
        _ => target.queues.get(field.env()).cloned(),
    };
    url.with_context(|| format!("no {} ({})", field.flag(), field.env()))
}

fn names(pair: &[String]) -> Result<(WorkflowName, CorrelationKey)> {
    let [workflow, key] = pair else { bail!("--ledger takes WORKFLOW KEY") };
    Ok((WorkflowName::parse(workflow.as_str())?, CorrelationKey::parse(key.as_str())?))
}

#[expect(
    clippy::too_many_lines,
    reason = "the replay command: resolve, plan, confirm, apply and report, in the order an operator reads them"
)]
pub async fn replay(args: ReplayArgs) -> Result<()> {
    let extra: Vec<Field> = args.dlq.map(|d| vec![d.dlq_field()]).unwrap_or_default();
    let t = tools(&args.config, &args.target, &extra).await?;
    let now = t.engine.now();
    let lines = match (&args.plan, args.dlq, &args.ledger) {
        (Some(path), _, _) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let saved: SavedPlan = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a replay plan", path.display()))?;
            if saved.schema != PLAN_SCHEMA || saved.dlq != args.dlq || saved.ledger != args.ledger {
                bail!(
                    "{} is a plan for another source; pass the same --dlq/--ledger it was made with",
                    path.display()
                );
            }
            saved.lines
        }
        (None, Some(dlq), _) => {
            let url = queue(&t.target, dlq.dlq_field())?;
            replay::plan_dlq(&t.engine, &SqsDeadLetterReader::new(t.sqs.clone(), url), dlq.origin(), now)
                .await?
        }
        (None, None, Some(pair)) => {
            let (w, k) = names(pair)?;
            let trace = t.engine.store.trace(&w, &k).await?;
            let mut lines = Vec::new();
            for entry in &trace.ledger {
                lines.push(replay::plan_ledger(&t.engine, entry, now).await?);
            }
            lines
        }
        (None, None, None) => bail!("say what to replay: --dlq intake|progress, or --ledger WORKFLOW KEY"),
    };
    if args.json && !args.apply {
        println!("{}", serde_json::to_string_pretty(&lines)?);
    } else {
        print_plan(&lines);
    }
    if let Some(path) = &args.save {
        let saved = SavedPlan {
            schema: PLAN_SCHEMA.into(),
            dlq: args.dlq,
            ledger: args.ledger.clone(),
            lines: lines.clone(),
        };
        std::fs::write(path, serde_json::to_string_pretty(&saved)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("plan saved to {}; apply it with --apply --plan {}", path.display(), path.display());
    }
    if !args.apply {
        eprintln!("dry run: nothing was changed. Re-run with --apply to deliver the safe lines.");
        return Ok(());
    }
    let total = lines.len();
    // Each line as it is done, in columns as wide as the plan's longest id.
    let id_width = lines.iter().map(|l| terminal_safe(&l.id).chars().count()).max().unwrap_or(0);
    let mut n = 0;
    let mut progress = |d: &Done| {
        n += 1;
        if total > 20 {
            eprint!("\r[{n}/{total}] {}", bar(n, total));
            let _ = std::io::stderr().flush();
        }
        if !args.json {
            let (id, result) = (terminal_safe(&d.id), describe(&d.result));
            println!(
                "{}",
                done_line((&id, id_width), &d.classification.to_string(), &terminal_safe(&result))
            );
        }
    };
    let (done, summary) = match args.dlq {
        Some(dlq) => {
            let url = queue(&t.target, dlq.dlq_field())?;
            replay::apply_dlq(
                &t.engine,
                &SqsDeadLetterReader::new(t.sqs.clone(), url),
                &lines,
                now,
                &mut progress,
            )
            .await?
        }
        None => replay::apply_ledger(&t.engine, &lines, now, &mut progress).await?,
    };
    if total > 20 {
        eprintln!();
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"results": done, "summary": summary}))?
        );
    }
    println!(
        "summary: applied {}, skipped {}, needs-human {}, noop removed {}",
        summary.applied, summary.skipped, summary.needs_human, summary.noop_removed
    );
    Ok(())
}

fn bar(n: usize, total: usize) -> String {
    let filled = n * 30 / total.max(1);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(30 - filled))
}

fn describe(result: &Applied) -> String {
    match result {
        Applied::Applied { outcomes } => format!("applied: {}", outcomes.join("; ")),
        Applied::Skipped { reason } => format!("skipped: {reason}"),
        Applied::NotSafe => "left for a person".into(),
    }
}

/// One line of `--apply`'s output: the message's id padded to the plan's longest (`width`), its
/// class in a column as wide as the longest (`needs-human`), and what was done.
fn done_line((id, width): (&str, usize), class: &str, result: &str) -> String {
    format!("{id:<width$}  {class:<11}  {result}")
}

fn print_plan(lines: &[Line]) {
    let mut rows =
        vec![["message", "class", "record (state, version)", "effect"].map(str::to_owned).to_vec()];
    for line in lines {
        if line.targets.is_empty() {
            let class = line.classification.to_string();
            rows.push(vec![line.id.clone(), class, "-".to_owned(), line.note.clone().unwrap_or_default()]);
        }
        for t in &line.targets {
            let record = match (&t.state, t.version) {
                (Some(s), Some(v)) => format!("{}/{} {s} v{v}", t.workflow, t.key),
                _ => format!("{}/{} (none)", t.workflow, t.key),
            };
            rows.push(vec![line.id.clone(), t.classification.to_string(), record, t.effect.clone()]);
        }
    }
    for text in columns(&rows) {
        println!("{text}");
    }
    let count = |c: Classification| lines.iter().filter(|l| l.classification == c).count();
    println!(
        "plan: {} safe, {} noop, {} needs-human",
        count(Classification::Safe),
        count(Classification::Noop),
        count(Classification::NeedsHuman)
    );
}

/// `baton redrive`.
#[derive(Debug, clap::Args)]
pub struct RedriveArgs {
    /// The dead-letter queue whose messages go back to their source queue.
    #[arg(long)]
    pub dlq: Dlq,
    /// Move them; without it, only the plan is shown.
    #[arg(long)]
    pub apply: bool,
    /// Also move messages classified needs-human. Logged with who forced it.
    #[arg(long)]
    pub force: bool,
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub config: PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn redrive(args: RedriveArgs) -> Result<()> {
    let t = tools(&args.config, &args.target, &[args.dlq.dlq_field(), args.dlq.source_field()]).await?;
    let dlq = queue(&t.target, args.dlq.dlq_field())?;
    let source = queue(&t.target, args.dlq.source_field())?;
    let now = t.engine.now();
    let reader = SqsDeadLetterReader::new(t.sqs.clone(), &dlq);
    let lines = replay::plan_dlq(&t.engine, &reader, args.dlq.origin(), now).await?;
    print_plan(&lines);
    let refused: Vec<&Line> =
        lines.iter().filter(|l| l.classification == Classification::NeedsHuman).collect();
    if !refused.is_empty() && !args.force {
        bail!(
            "{} message(s) need a person (see the plan); fix them, use `baton replay`, or pass --force to move them anyway",
            refused.len()
        );
    }
    if !args.apply {
        eprintln!("dry run: nothing was moved. Re-run with --apply.");
        return Ok(());
    }
    let who =
        std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into());
    let messages = reader.read(1000, 300).await.map_err(anyhow::Error::from_boxed)?;
    let mut moved = 0;
    for m in &messages {
        let Some(line) = lines.iter().find(|l| l.id == m.id) else { continue };
        if line.classification == Classification::NeedsHuman {
            // Structured, so it lands in whatever collects the operator's logs.
            eprintln!(
                "{}",
                serde_json::json!({"event": "forced_redrive", "user": who, "message_id": m.id, "dlq": args.dlq,
                    "classification": line.classification, "note": line.note})
            );
        }
        t.sqs
            .send_message()
            .queue_url(&source)
            .message_body(&m.body)
            .send()
            .await
            .context("cannot send to the source queue")?;
        reader.delete(m).await.map_err(anyhow::Error::from_boxed).context("cannot delete from the DLQ")?;
        moved += 1;
    }
    let untouched: Vec<&DlqMessage> =
        messages.iter().filter(|m| !lines.iter().any(|l| l.id == m.id)).collect();
    reader.release(&untouched).await.map_err(anyhow::Error::from_boxed)?;
    println!("summary: moved {moved} message(s) back to the source queue");
    Ok(())
}

/// `baton cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    pub workflow: String,
    pub key: String,
    /// Why: kept in the record's history and on the stopped execution.
    #[arg(long)]
    pub reason: String,
    /// Compensate what completed, in reverse, before the workflow ends (`compensated` or
    /// `compensation_failed`). Without it, nothing is undone. `baton compensate plan` shows
    /// what would be undone.
    #[arg(long)]
    pub compensate: bool,
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub config: PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn cancel(args: CancelArgs) -> Result<()> {
    // The reason is the cause of both the StopExecution and the SendTaskFailure: longer than
    // they take, every attempt to stop the execution would be refused (found by review).
    baton_core::domain::lifecycle::failure_text_fits(
        "--reason",
        &args.reason,
        baton_core::domain::lifecycle::MAX_FAILURE_CAUSE_CHARS,
    )
    .map_err(anyhow::Error::msg)?;
    let t = tools(&args.config, &args.target, &[]).await?;
    let workflow = t
        .engine
        .config
        .workflow(&args.workflow)
        .with_context(|| format!("no workflow named {:?} in the config", args.workflow))?;
    let key = CorrelationKey::parse(args.key.as_str())?;
    if t.engine.store.load(&workflow.name, &key).await?.is_none() {
        bail!("no such workflow record: {} {}", args.workflow, args.key);
    }
    let now = t.engine.now();
    let reason = args.reason.clone();
    let input = if args.compensate { Input::CancelCompensate { reason } } else { Input::Cancel { reason } };
    let submitted = t.engine.submit(workflow, &key, &input, now).await?;
    let state = submitted.record().map(|r| r.state).unwrap_or(State::Pending);
    let (w, k) = (&args.workflow, &args.key);
    match submitted.outcome() {
        Outcome::Applied if state == State::Compensating => println!(
            "cancelled {w} {k}; compensating what completed, last first (see `baton compensate plan {w} {k}`)"
        ),
        Outcome::Applied if args.compensate => {
            println!("cancelled {w} {k}; nothing it completed has a compensation; the execution was stopped")
        }
        Outcome::Applied => println!("cancelled {w} {k}; the execution was stopped"),
        Outcome::Duplicate => println!("{w} {k} was already cancelled"),
        Outcome::Ignored(IgnoreReason::Compensating) => bail!(
            "refused: {w} {k} is compensating; a cancel now would stop its compensations half done. \
             Wait for compensated or compensation_failed (`baton compensate plan {w} {k}` shows progress)"
        ),
        Outcome::Ignored(IgnoreReason::OutOfOrder) => bail!(
            "refused: {w} {k} is between steps ({state}); its next step is seconds away. Run the cancel again"
        ),
        Outcome::Ignored(_) => println!("{w} {k} has already ended ({state}); nothing changed"),
        other => bail!("unexpected outcome {other:?}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_lines_keep_their_columns_past_a_long_id() {
        let long = "evt-".repeat(20);
        let width = long.len();
        let done = [
            (long.as_str(), "safe", "applied"),
            ("evt-1", "needs-human", "left"),
            ("evt-2", "noop", "removed"),
        ];
        for (id, class, result) in done {
            let line = done_line((id, width), class, result);
            assert_eq!(&line[width + 2..width + 2 + class.len()], class, "{line}");
            assert_eq!(&line[width + 15..], result, "{line}");
        }
    }
}
