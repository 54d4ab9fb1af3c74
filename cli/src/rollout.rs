//! `baton rollout plan`: before a deploy, what the config change would do to the records in
//! flight ([`baton_core::use_cases::rollout`]).
//!
//! The deployed config is, by default, the version the stack's functions last started on (each
//! cold start registers its version in the table, [`baton_core::use_cases::rollout::deployed`]); `--from` takes
//! a file or a git ref instead. The live records are counted from the table's `by_due` index
//! (pending, waiting and advancing records; a Query per state, never a Scan). `--offline`
//! counts nothing: every change whose effect depends on live records then needs a person.
//!
//! Exit status: 0 when every change is safe, 1 when one is breaking (each is named), 3 when
//! none is breaking but one needs a person, 2 when no plan could be made (usage, an unreadable
//! config or table). `--json` prints the `baton.rollout/v1` document.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use baton_core::domain::config::Config;
use baton_core::use_cases::rollout::{self, Class, Live, LiveVersion, RolloutPlan};
use serde::Serialize;
use time::OffsetDateTime;

use crate::target::{self, Field, TargetArgs};

/// The `--json` schema's name and version.
pub const SCHEMA: &str = "baton.rollout/v1";

/// `baton rollout`.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Compare the deployed config with the one about to be deployed, and classify each change
    /// by what it does to the records in flight: safe, breaking (exit 1) or needs-human (exit 3).
    Plan(PlanArgs),
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The deployed config: a file, or a git ref (its copy of the --to path) [default: the
    /// version the stack's functions last started on, as registered in its table].
    #[arg(long, value_name = "PATH|GIT-REF")]
    pub from: Option<String>,
    /// The config about to be deployed.
    #[arg(long, env = "BATON_CONFIG", default_value = baton_core::domain::config::DEFAULT_PATH)]
    pub to: PathBuf,
    /// Count no live records (no stack needed): changes that depend on them need a person.
    #[arg(long)]
    pub offline: bool,
    /// Print the `baton.rollout/v1` JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// The `baton.rollout/v1` document.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// Where the deployed config came from: `table`, a path, or `git:<ref>`.
    pub from: String,
    pub to: String,
    /// Whether live records were counted.
    pub counted: bool,
    /// Every live record per (workflow, config version), whatever the changes touch; null when
    /// not counted. A version with none here runs nothing: its state machine version can be
    /// deleted, its registered config item never (docs/RUNBOOK.md).
    pub live: Option<Vec<LiveVersion>>,
    #[serde(flatten)]
    pub plan: RolloutPlan,
}

/// The exit status for a verdict.
pub fn exit_status(verdict: Class) -> u8 {
    match verdict {
        Class::Safe => 0,
        Class::Breaking => 1,
        Class::NeedsHuman => 3,
    }
}

/// Runs the command; the exit status it asks for.
pub async fn run(args: RolloutArgs) -> Result<u8> {
    let RolloutCommand::Plan(args) = args.command;
    let to =
        Config::load(&args.to).with_context(|| format!("cannot use the config {}", args.to.display()))?;
    let store = if args.offline {
        None
    } else {
        let target = target::resolve(&args.target, &[Field::Table], true)
            .context("the live records are counted in the stack's table (or give --offline)")?;
        let Some(table) = target.table.clone() else { bail!("the table is needed (or --offline)") };
        let client = aws_sdk_dynamodb::Client::new(&target.aws().sdk_config().await?);
        Some((crate::ops::store(client, &table).await?, target.location()))
    };
    let (from, from_name) = match &args.from {
        Some(spec) => from_spec(spec, &args.to)?,
        None => {
            let Some((store, location)) = &store else {
                bail!("--offline needs --from: the deployed config is read from the stack's table")
            };
            let deployed = rollout::deployed(store)
                .await
                .with_context(|| format!("cannot read the registered configs at {location}"))?;
            let Some((config, _)) = deployed else {
                bail!("the stack at {location} has registered no config yet; give --from")
            };
            (config, "table".to_owned())
        }
    };
    let live = match &store {
        None => Live::unknown(),
        Some((store, location)) => rollout::count_live(store, OffsetDateTime::now_utc())
            .await
            .with_context(|| format!("cannot count the live records at {location}"))?,
    };
    let plan = rollout::plan(&from, &to, &live);
    let report = Report {
        schema: SCHEMA,
        from: from_name,
        to: args.to.display().to_string(),
        counted: store.is_some(),
        live: live.by_version(),
        plan,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(exit_status(report.plan.verdict))
}

/// A file, or else a git ref holding `to`'s path.
fn from_spec(spec: &str, to: &Path) -> Result<(Config, String)> {
    let path = Path::new(spec);
    if path.is_file() {
        let config = Config::load(path).with_context(|| format!("cannot use the config {spec}"))?;
        return Ok((config, spec.to_owned()));
    }
    let out = Command::new("git")
        .arg("show")
        .arg(format!("{spec}:{}", to.display()))
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "--from {spec} is neither a file nor a git ref with {}: {}",
            to.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8(out.stdout).context("the config at that ref is not UTF-8")?;
    let config = Config::parse(&text).with_context(|| format!("the config at {spec} is not valid"))?;
    Ok((config, format!("git:{spec}")))
}

/// The text form: one block per change, then the verdict.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rollout plan: {} ({}) -> {} ({}){}",
        r.plan.from_version,
        r.from,
        r.plan.to_version,
        r.to,
        if r.counted { "" } else { "; live records not counted" }
    );
    for v in r.live.iter().flatten() {
        let _ = writeln!(out, "live records: {} on {}: {}", v.workflow, v.version, v.records);
    }
    if r.plan.changes.is_empty() {
        let _ = writeln!(out, "no change");
    }
    for c in &r.plan.changes {
        let _ = writeln!(out, "{:<12} {:<24} {}: {}", c.class.as_str(), c.kind, c.workflow, c.detail);
        let _ = writeln!(out, "{:<12} {}", "", c.why);
        for t in &c.touches {
            let _ = writeln!(out, "{:<12} live: {} record(s) {} on {}", "", t.records, t.state, t.version);
        }
    }
    let _ = writeln!(out, "verdict: {} (exit {})", r.plan.verdict.as_str(), exit_status(r.plan.verdict));
    out
}
