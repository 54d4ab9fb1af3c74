//! `baton status`: how many records are in each state, and which ones wait past their deadline.
//! A state is counted up to a bound (`--count-up-to`, 1,000 by default), so what a status reads
//! does not grow with the table: past the bound it says "more than".
//!
//! Every waiting step has a deadline, and Step Functions ends a step that misses it (invariant 7,
//! docs/ARCHITECTURE.md), which moves the record to `timed_out`. A record still `waiting` after its
//! deadline therefore means that report was lost or is stuck: the first thing to look at, with
//! `baton trace`. Both questions are answered from the table's due-time index (no Scan).
//!
//! `--json` is a contract like `baton trace --json`: `baton.status/v2` (docs/OPERATING.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::lifecycle::{Kind, Record};
use baton_core::ports::store::{COUNT_UP_TO, Count, DueList, WorkflowStore};
use serde::Serialize;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::ops::{StepNames, human, rfc3339, table_time};
use crate::target::TargetArgs;

/// The `--json` schema's name and version.
pub const SCHEMA: &str = "baton.status/v2";
/// At most this many overdue records are listed.
pub const OVERDUE_LIMIT: usize = 100;

/// `baton status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print the `baton.status/v2` JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Count each state up to this many records; a state with more shows as "more than". What
    /// a status reads grows with this bound, not with the table (docs/OPERATING.md, `baton status`).
    #[arg(long, default_value_t = COUNT_UP_TO)]
    pub count_up_to: u64,
    /// The workflow config, for step names [default: infra/workflows.yaml when present].
    #[arg(long, env = "BATON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Reads the counts and the overdue records, then prints them.
pub async fn run(args: StatusArgs) -> Result<()> {
    let names = StepNames::load(args.config.as_deref())?;
    let (store, at) = crate::ops::table_at(&args.target).await?;
    let report = read(&store, &names, OffsetDateTime::now_utc(), args.count_up_to)
        .await
        .with_context(|| format!("at {at}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// Reads the counts by state, each up to `up_to`, and the overdue records of `store` at `now`
/// (`baton status`, and the local console's overview).
pub async fn read(
    store: &DynamoDbStore,
    names: &StepNames,
    now: OffsetDateTime,
    up_to: u64,
) -> Result<Report> {
    let table = store.table();
    let counts = store
        .count_by_state(up_to)
        .await
        .with_context(|| format!("cannot count the records in the table {table}"))?;
    let overdue = store
        .due(DueList { kind: Kind::Waiting, work: false }, now, OVERDUE_LIMIT)
        .await
        .with_context(|| format!("cannot list the overdue records in {table}"))?;
    let overdue: Vec<Record> = overdue.into_iter().map(std::sync::Arc::unwrap_or_clone).collect();
    let versions = names.of_records(store, &overdue).await;
    Ok(build(table, &counts, up_to, &overdue, (names, &versions), now))
}

/// The `baton.status/v2` document.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// When the counts were taken (RFC 3339, UTC).
    pub at: String,
    pub table: String,
    /// Every state, zeros included, in lifecycle order: its exact count, or, for a state in
    /// `more_than`, the bound it was counted up to.
    pub counts: Map<String, Value>,
    /// The bound each state was counted up to.
    pub counted_up_to: u64,
    /// The states holding more records than `counted_up_to`, in lifecycle order.
    pub more_than: Vec<String>,
    /// The sum of `counts`: exact when `more_than` is empty, otherwise the table holds more.
    pub total: u64,
    /// Waiting records whose deadline has passed, most overdue first.
    pub overdue: Vec<Overdue>,
    /// `true` when there may be more than the [`OVERDUE_LIMIT`] listed.
    pub overdue_truncated: bool,
}

/// A record waiting past its deadline.
#[derive(Debug, Serialize)]
pub struct Overdue {
    pub workflow: String,
    pub key: String,
    pub generation: u32,
    pub step: Option<u32>,
    pub step_name: Option<String>,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub deadline: Option<OffsetDateTime>,
    pub overdue_seconds: i64,
}

/// Puts what was read into the report; `now` is when it was read.
/// `names`: the checkout's step names, and those of each config version the records are on.
pub fn build(
    table: &str,
    counts: &BTreeMap<Kind, Count>,
    up_to: u64,
    overdue: &[Record],
    (names, versions): (&StepNames, &BTreeMap<String, StepNames>),
    now: OffsetDateTime,
) -> Report {
    let mut by_state = Map::new();
    let mut more_than = Vec::new();
    for kind in Kind::ALL {
        let count = counts.get(&kind).copied().unwrap_or(Count::Exact(0));
        by_state.insert(kind.as_str().to_owned(), json!(count.counted()));
        if let Count::MoreThan(_) = count {
            more_than.push(kind.as_str().to_owned());
        }
    }
    let mut listed: Vec<Overdue> = overdue
        .iter()
        .map(|r| {
            let step = r.state.step();
            // The earliest deadline of the waits still open (a step's, or a group's branches').
            let deadline = r.waits.iter().filter(|w| w.waits()).filter_map(|w| w.deadline).min();
            Overdue {
                workflow: r.workflow.to_string(),
                key: r.key.to_string(),
                generation: r.generation,
                step,
                step_name: step.and_then(|s| {
                    let own = versions.get(&r.config_version).unwrap_or(names);
                    own.name(r.workflow.as_str(), s)
                }),
                deadline,
                overdue_seconds: deadline.map(|d| (now - d).whole_seconds()).unwrap_or(0),
            }
        })
        .collect();
    listed.sort_by_key(|o| std::cmp::Reverse(o.overdue_seconds));
    Report {
        schema: SCHEMA,
        at: rfc3339(now),
        table: table.to_owned(),
        counts: by_state,
        counted_up_to: up_to,
        more_than,
        total: counts.values().map(|c| c.counted()).sum(),
        overdue_truncated: overdue.len() >= OVERDUE_LIMIT,
        overdue: listed,
    }
}

impl Report {
    /// One state's count as shown: the number, or "more than" the bound.
    pub fn count(&self, state: &str) -> String {
        let n = self.counts.get(state).and_then(Value::as_u64).unwrap_or(0);
        if self.more_than.iter().any(|s| s == state) { format!("more than {n}") } else { n.to_string() }
    }

    /// The total as shown.
    pub fn total(&self) -> String {
        if self.more_than.is_empty() { self.total.to_string() } else { format!("more than {}", self.total) }
    }
}

/// The human form.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "records by state (table {})", report.table);
    // Both columns as wide as their widest cell: `compensation_failed` and "more than 100"
    // keep the counts aligned.
    let rows: Vec<(&str, String)> = report
        .counts
        .keys()
        .map(|state| (state.as_str(), report.count(state)))
        .chain([("total", report.total())])
        .collect();
    let w_state = rows.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
    let w_count = rows.iter().map(|(_, n)| n.len()).max().unwrap_or(0);
    for (state, n) in &rows {
        let _ = writeln!(out, "  {state:<w_state$}  {n:>w_count$}");
    }
    let _ = writeln!(out);
    if report.overdue.is_empty() {
        let _ = writeln!(out, "waiting past their deadline: none");
        return out;
    }
    let more =
        if report.overdue_truncated { format!(", the first {OVERDUE_LIMIT} shown") } else { String::new() };
    let _ = writeln!(out, "waiting past their deadline ({}{more}):", report.overdue.len());
    let width =
        |f: &dyn Fn(&Overdue) -> usize, min: usize| report.overdue.iter().map(f).max().unwrap_or(0).max(min);
    let w_wf = width(&|o| o.workflow.len(), "WORKFLOW".len());
    let w_key = width(&|o| o.key.len(), "KEY".len());
    let label = |o: &Overdue| match (&o.step_name, o.step) {
        (Some(name), _) => name.clone(),
        (None, Some(i)) => format!("step {i}"),
        (None, None) => "-".to_owned(),
    };
    let w_step = width(&|o| label(o).len(), "STEP".len());
    let _ = writeln!(
        out,
        "  {:<w_wf$}  {:<w_key$}  {:<w_step$}  {:<24}  OVERDUE",
        "WORKFLOW", "KEY", "STEP", "DEADLINE"
    );
    for o in &report.overdue {
        let deadline = o.deadline.map(table_time).unwrap_or_else(|| "-".to_owned());
        let _ = writeln!(
            out,
            "  {:<w_wf$}  {:<w_key$}  {:<w_step$}  {deadline:<24}  {}",
            o.workflow,
            o.key,
            label(o),
            human(time::Duration::seconds(o.overdue_seconds))
        );
    }
    let _ = writeln!(out, "\nlook at one with: baton trace <workflow> <key>");
    out
}

#[cfg(test)]
mod tests {
    use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
    use baton_core::domain::lifecycle::{Role, State, Wait, WaitStatus};
    use time::Duration;

    use super::*;

    fn waiting(key: &str, step: u32, deadline: OffsetDateTime) -> Record {
        Record {
            workflow: WorkflowName::parse("order-review").unwrap(),
            key: CorrelationKey::parse(key).unwrap(),
            generation: 1,
            state: State::Waiting { step },
            version: 2,
            waits: vec![Wait {
                token: Some(TaskToken::parse(format!("token-{key}")).unwrap()),
                deadline: Some(deadline),
                status: WaitStatus::Open,
                ..Wait::unreached(step, Role::Step)
            }],
            applied: Vec::new(),
            start_events: Vec::new(),
            history: Vec::new(),
            created_at: deadline,
            updated_at: deadline,
            write_id: None,
            config_version: "v-test".into(),
            missed: Vec::new(),
            confirmed: Vec::new(),
            succeeded: Vec::new(),
            compensation: None,
            untils: Vec::new(),
        }
    }

    #[test]
    fn an_overdue_step_is_named_as_its_records_own_version_names_it() {
        // Given a checkout whose version inserted a step before payment, and a record of the
        // version before, overdue at its second step (payment, there)
        let v1 = "workflows:\n  order-review:\n    start: { when: { type: [\"o\"] }, key: /subject }\n    steps:\n      - name: manual-review\n        timeout: 1h\n      - name: payment\n        timeout: 1h\n";
        let v2 = v1.replace(
            "      - name: payment",
            "      - name: fraud-check\n        timeout: 1h\n      - name: payment",
        );
        let (v1, v2) = (
            baton_core::domain::config::Config::parse(v1).unwrap(),
            baton_core::domain::config::Config::parse(&v2).unwrap(),
        );
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let mut record = waiting("a", 1, now - Duration::minutes(5));
        record.config_version = v1.version.clone();
        let versions = BTreeMap::from([(v1.version.clone(), StepNames::from_config(v1))]);
        // When the report is built with the checkout's names (version 2)
        let report =
            build("t", &BTreeMap::new(), 1_000, &[record], (&StepNames::from_config(v2), &versions), now);
        // Then the step is the record's payment, not the checkout's fraud-check
        assert_eq!(report.overdue[0].step_name.as_deref(), Some("payment"));
    }

    #[test]
    fn every_state_is_counted_and_the_most_overdue_comes_first() {
        // Given two waiting records past their deadlines, by 5 minutes and by 2 hours
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let counts = BTreeMap::from([(Kind::Waiting, Count::Exact(3)), (Kind::Succeeded, Count::Exact(7))]);
        let overdue =
            [waiting("a", 0, now - Duration::minutes(5)), waiting("b", 1, now - Duration::hours(2))];
        // When the report is built
        let report = build("t", &counts, 1_000, &overdue, (&StepNames::default(), &BTreeMap::new()), now);
        // Then zeros are explicit, the total adds up, and the order is by lateness
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["schema"], "baton.status/v2");
        assert_eq!(json["counted_up_to"], 1_000);
        assert_eq!(json["more_than"], json!([]));
        assert_eq!(
            json["counts"],
            json!({"pending": 0, "waiting": 3, "advancing": 0, "succeeded": 7, "degraded": 0, "failed": 0, "timed_out": 0,
                "cancelled": 0, "compensating": 0, "compensated": 0, "compensation_failed": 0, "stranded": 0})
        );
        assert_eq!(json["total"], 10);
        assert_eq!(json["overdue"][0]["key"], "b");
        assert_eq!(json["overdue"][0]["overdue_seconds"], 7200);
        assert_eq!(json["overdue"][1]["overdue_seconds"], 300);
        assert_eq!(json["overdue_truncated"], false);

        let text = render(&report);
        assert!(text.contains("  waiting               3\n"), "{text}");
        assert!(text.contains("  total                10\n"), "{text}");
        assert!(text.contains("waiting past their deadline (2):"), "{text}");
        let b = text.lines().find(|l| l.contains("  b  ")).unwrap();
        assert!(b.contains("step 1") && b.ends_with("2h 0m"), "{b}");
    }

    #[test]
    fn a_state_past_the_bound_and_the_total_say_more_than() {
        let counts =
            BTreeMap::from([(Kind::Waiting, Count::Exact(3)), (Kind::Succeeded, Count::MoreThan(50))]);
        let report = build(
            "t",
            &counts,
            50,
            &[],
            (&StepNames::default(), &BTreeMap::new()),
            OffsetDateTime::UNIX_EPOCH,
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["counts"]["succeeded"], 50, "the bound it was counted up to");
        assert_eq!(json["more_than"], json!(["succeeded"]));
        assert_eq!(json["total"], 53);
        let text = render(&report);
        assert!(text.contains("  succeeded            more than 50\n"), "{text}");
        assert!(text.contains("  waiting                         3\n"), "{text}");
        assert!(text.contains("  total                more than 53\n"), "{text}");
    }

    #[test]
    fn the_counts_stay_aligned_past_the_longest_state_name_and_a_bound() {
        let counts = BTreeMap::from([
            (Kind::Waiting, Count::Exact(3)),
            (Kind::CompensationFailed, Count::Exact(12)),
            (Kind::Succeeded, Count::MoreThan(100)),
        ]);
        let report = build(
            "t",
            &counts,
            100,
            &[],
            (&StepNames::default(), &BTreeMap::new()),
            OffsetDateTime::UNIX_EPOCH,
        );
        let text = render(&report);
        let rows: Vec<&str> = text.lines().skip(1).take_while(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), Kind::ALL.len() + 1, "every state and the total: {text}");
        let ends: Vec<usize> = rows.iter().map(|l| l.len()).collect();
        assert!(ends.iter().all(|e| *e == ends[0]), "the counts end in one column:\n{text}");
        let starts: Vec<usize> = rows.iter().map(|l| l.len() - l.trim_start().len()).collect();
        assert!(starts.iter().all(|s| *s == 2), "{text}");
    }

    #[test]
    fn nothing_overdue_says_so() {
        let report = build(
            "t",
            &BTreeMap::new(),
            1_000,
            &[],
            (&StepNames::default(), &BTreeMap::new()),
            OffsetDateTime::UNIX_EPOCH,
        );
        assert_eq!(report.total, 0);
        assert!(render(&report).contains("waiting past their deadline: none"));
    }
}
