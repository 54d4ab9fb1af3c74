//! `baton owes`: the tasks people owe an answer to, across records, by queue. Each is the open
//! wait of a step, a parallel branch or a compensation whose task is out: its workflow, key and
//! step, how long ago the task went out, how many reminders followed it, the highest escalation
//! level it was given to, and its deadline.
//!
//! It reads the table's due-time index (no Scan): the waiting and compensating records, up to a
//! bound (`--up-to`, 1,000 by default) on each of their lists. Past the bound it says "more
//! than", as `baton status` does, and lists what it read.
//!
//! `--json` is a contract like `baton status --json`: `baton.owes/v1` (docs/OPERATING.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::lifecycle::{Kind, Record, Role, WaitStatus};
use baton_core::ports::store::{COUNT_UP_TO, DueList, WorkflowStore};
use serde::Serialize;
use time::{Duration, OffsetDateTime};

use crate::ops::{Asked, StepNames, human, rfc3339, table_time};
use crate::target::TargetArgs;

/// The `--json` schema's name and version.
pub const SCHEMA: &str = "baton.owes/v1";

/// `baton owes`.
#[derive(Debug, clap::Args)]
pub struct OwesArgs {
    /// Only the tasks on this queue (a step's `task.queue`, or an escalation level's `queue`).
    #[arg(long)]
    pub queue: Option<String>,
    /// Only the tasks whose wait is past its deadline.
    #[arg(long)]
    pub overdue: bool,
    /// Print the `baton.owes/v1` JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Read up to this many records of each list; past it, say "more than". What `owes` reads
    /// grows with this bound, not with the table.
    #[arg(long, default_value_t = COUNT_UP_TO)]
    pub up_to: u64,
    /// The workflow config, for step names and queues [default: infra/workflows.yaml when
    /// present].
    #[arg(long, env = "BATON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Reads the open tasks, then prints them.
pub async fn run(args: OwesArgs) -> Result<()> {
    let names = StepNames::load(args.config.as_deref())?;
    let (store, at) = crate::ops::table_at(&args.target).await?;
    let filter = Filter { queue: args.queue, overdue: args.overdue };
    let report = read(&store, &names, OffsetDateTime::now_utc(), args.up_to, &filter)
        .await
        .with_context(|| format!("at {at}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// Which tasks to list.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Only those on this queue: the step's own, or one it was escalated to.
    pub queue: Option<String>,
    /// Only those past their deadline.
    pub overdue: bool,
}

/// Reads the waiting and compensating records of `store`, up to `up_to` on each list, and
/// lists the tasks they owe at `now` (`baton owes`, and the local console's page).
pub async fn read(
    store: &DynamoDbStore,
    names: &StepNames,
    now: OffsetDateTime,
    up_to: u64,
    filter: &Filter,
) -> Result<Report> {
    let table = store.table();
    // Every record on these lists, whenever it is due: the index orders them by due time, and
    // a task is owed whatever its record is due for next.
    let whenever = now + Duration::days(365 * 100);
    let limit = usize::try_from(up_to).unwrap_or(usize::MAX).saturating_add(1);
    let mut records = Vec::new();
    let mut more_than = false;
    for list in [Kind::Waiting, Kind::Compensating].into_iter().flat_map(DueList::of_state) {
        let mut read = store
            .due(list, whenever, limit)
            .await
            .with_context(|| format!("cannot list the {} records in {table}", list.kind))?;
        if read.len() >= limit {
            more_than = true;
            read.truncate(limit - 1);
        }
        records.extend(read.into_iter().map(std::sync::Arc::unwrap_or_clone));
    }
    let versions = names.of_records(store, &records).await;
    Ok(build(table, &records, (names, &versions), (up_to, more_than), filter, now))
}

/// The `baton.owes/v1` document.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// When it was read (RFC 3339, UTC).
    pub at: String,
    pub table: String,
    /// The bound each list of records was read up to.
    pub read_up_to: u64,
    /// `true` when a list held more records than `read_up_to`: the tasks listed are those of the
    /// records read, and there are more.
    pub more_than: bool,
    /// The queue and overdue filters, as asked (`null`: all).
    pub queue: Option<String>,
    pub overdue_only: bool,
    /// The open tasks, by queue, the oldest first in each.
    pub tasks: Vec<Owed>,
}

/// One task a person owes an answer to.
#[derive(Debug, Serialize)]
pub struct Owed {
    /// The step's own queue; `null` when the config to name it could not be had.
    pub queue: Option<String>,
    pub workflow: String,
    pub key: String,
    pub generation: u32,
    pub step: u32,
    pub step_name: Option<String>,
    /// `step`, `branch` or `compensation`.
    pub role: &'static str,
    /// The attempt whose task is out.
    pub attempt: u32,
    /// When the task went out (when Step Functions entered the step), and how long ago.
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub since: Option<OffsetDateTime>,
    pub age_seconds: Option<i64>,
    pub reminders: u32,
    /// The highest escalation level it was given to (0: none), and that level's queue.
    pub level: u32,
    pub level_queue: Option<String>,
    /// Every queue it was given to: its own, then each escalation level's behind it (each
    /// holder may answer it).
    pub held_by: Vec<String>,
    #[serde(serialize_with = "crate::ops::ser_opt_time")]
    pub deadline: Option<OffsetDateTime>,
    pub overdue: bool,
}

/// Puts what was read into the report; `now` is when it was read.
pub fn build(
    table: &str,
    records: &[Record],
    (names, versions): (&StepNames, &BTreeMap<String, StepNames>),
    (up_to, more_than): (u64, bool),
    filter: &Filter,
    now: OffsetDateTime,
) -> Report {
    let mut tasks: Vec<Owed> = records
        .iter()
        .flat_map(|r| {
            // Each record's steps are named, and their queues found, as its own config version
            // has them.
            let own = versions.get(&r.config_version).unwrap_or(names);
            owed_by(r, own, now)
        })
        .filter(|t| !filter.overdue || t.overdue)
        .filter(|t| filter.queue.as_ref().is_none_or(|q| t.held_by.contains(q)))
        .collect();
    tasks.sort_by(|a, b| {
        (&a.queue, a.since, &a.workflow, &a.key).cmp(&(&b.queue, b.since, &b.workflow, &b.key))
    });
    Report {
        schema: SCHEMA,
        at: rfc3339(now),
        table: table.to_owned(),
        read_up_to: up_to,
        more_than,
        queue: filter.queue.clone(),
        overdue_only: filter.overdue,
        tasks,
    }
}

/// The tasks record `r` owes: each of its live waits that is open (its attempt's task out), and
/// publishes a task (found by an attack test: a step fed by events alone, which no person owes,
/// was listed). Without its config version, every open wait is listed, its queue unknown.
fn owed_by(r: &Record, names: &StepNames, now: OffsetDateTime) -> Vec<Owed> {
    let workflow = r.workflow.as_str();
    r.live_waits()
        .filter(|w| w.token.is_some() && w.status == WaitStatus::Open)
        .filter_map(|w| {
            let asked: Option<Asked> = names.asked(workflow, w);
            if asked.is_none() && names.name(workflow, w.step).is_some() {
                return None;
            }
            let since = asked.as_ref().map(|a| a.since);
            let level = asked.as_ref().map_or(0, |a| a.level);
            let levels = asked.iter().flat_map(|a| a.again.iter().filter(|n| n.level.is_some()));
            Some(Owed {
                queue: asked.as_ref().map(|a| a.queue.clone()),
                workflow: workflow.to_owned(),
                key: r.key.to_string(),
                generation: r.generation,
                step: w.step,
                step_name: names.name(workflow, w.step),
                role: match w.role {
                    Role::Step => "step",
                    Role::Branch => "branch",
                    Role::Compensation => "compensation",
                },
                attempt: w.attempt(),
                since,
                age_seconds: since.map(|s| (now - s).whole_seconds()),
                reminders: asked.as_ref().map_or(0, |a| a.reminders),
                level,
                level_queue: levels.clone().last().map(|n| n.queue.clone()),
                held_by: asked
                    .iter()
                    .map(|a| a.queue.clone())
                    .chain(levels.map(|n| n.queue.clone()))
                    .collect(),
                deadline: w.deadline,
                overdue: w.deadline.is_some_and(|d| d <= now),
            })
        })
        .collect()
}

/// The human form: a table per queue.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let filters: Vec<String> = report
        .queue
        .iter()
        .map(|q| format!("queue {q}"))
        .chain(report.overdue_only.then(|| "past their deadline".to_owned()))
        .collect();
    let of = if filters.is_empty() { String::new() } else { format!(", {}", filters.join(", ")) };
    let count = if report.more_than {
        format!("more than {}: the first {} records of each list read", report.tasks.len(), report.read_up_to)
    } else {
        report.tasks.len().to_string()
    };
    let _ = writeln!(out, "tasks owed (table {}{of}): {count}", report.table);
    if report.tasks.is_empty() {
        return out;
    }
    let cells: Vec<[String; 8]> = report.tasks.iter().map(cells).collect();
    let head = ["WORKFLOW", "KEY", "STEP", "ATTEMPT", "AGE", "REMINDERS", "LEVEL", "DEADLINE"];
    let widths: Vec<usize> = (0..head.len())
        .map(|i| cells.iter().map(|c| c[i].len()).chain([head[i].len()]).max().unwrap_or(0))
        .collect();
    let row = |out: &mut String, c: &[&str]| {
        let line: Vec<String> = c.iter().zip(&widths).map(|(s, w)| format!("{s:<w$}")).collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    };
    let mut queue = None;
    for (task, c) in report.tasks.iter().zip(&cells) {
        if queue != Some(&task.queue) {
            queue = Some(&task.queue);
            let _ = writeln!(
                out,
                "\nqueue {}",
                task.queue.as_deref().unwrap_or("(unknown: no config for this version)")
            );
            row(&mut out, &head);
        }
        row(&mut out, &c.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let _ = writeln!(out, "\nlook at one with: baton trace <workflow> <key>");
    out
}

/// One task's cells, in the table's column order.
fn cells(t: &Owed) -> [String; 8] {
    let step = match (&t.step_name, t.role) {
        (Some(name), "step") => name.clone(),
        (Some(name), role) => format!("{name} ({role})"),
        (None, role) => format!("{role} {}", t.step),
    };
    let level = match (t.level, &t.level_queue) {
        (0, _) => "-".to_owned(),
        (n, Some(q)) => format!("{n} ({q})"),
        (n, None) => n.to_string(),
    };
    let deadline = match t.deadline {
        Some(d) if t.overdue => format!("{} (overdue)", table_time(d)),
        Some(d) => table_time(d),
        None => "-".to_owned(),
    };
    [
        t.workflow.clone(),
        t.key.clone(),
        step,
        t.attempt.to_string(),
        t.age_seconds.map_or_else(|| "-".to_owned(), |s| human(Duration::seconds(s))),
        t.reminders.to_string(),
        level,
        deadline,
    ]
}

#[cfg(test)]
mod tests {
    use baton_core::domain::config::Config;
    use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
    use baton_core::domain::lifecycle::{State, Wait};
    use serde_json::json;

    use super::*;

    const CONFIG: &str = "workflows:\n  order-review:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
        - name: review\n        requires: [d]\n        timeout: 1d\n        \
        task: { title: Review, queue: reviewers }\n        \
        remind: { after: 1h, every: 1h, times: 3 }\n        \
        escalate: [{ after: 4h, queue: leads }, { after: 5h, queue: heads }]\n      \
        - name: pay\n        requires: [p]\n        timeout: 1h\n        \
        task: { title: Pay, queue: payments }\n      \
        - name: await-refund\n        requires: [r]\n        timeout: 1h\n";

    fn t(hours: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + Duration::days(20_000) + Duration::hours(hours)
    }

    /// A record waiting at `step` since `since`, with `notified` notices behind it.
    fn waiting(key: &str, step: u32, (since, timeout): (i64, i64), notified: u32) -> Record {
        let mut w = Wait::reached(
            step,
            Role::Step,
            &TaskToken::parse(format!("token-{key}")).unwrap(),
            t(since + timeout),
        );
        w.notified = notified;
        Record {
            workflow: WorkflowName::parse("order-review").unwrap(),
            key: CorrelationKey::parse(key).unwrap(),
            generation: 1,
            state: State::Waiting { step },
            version: 2,
            waits: vec![w],
            applied: Vec::new(),
            start_events: Vec::new(),
            history: Vec::new(),
            created_at: t(since),
            updated_at: t(since),
            write_id: None,
            config_version: "v-test".into(),
            missed: Vec::new(),
            confirmed: Vec::new(),
            succeeded: Vec::new(),
            compensation: None,
            untils: Vec::new(),
        }
    }

    fn report(records: &[Record], filter: &Filter, now: OffsetDateTime) -> Report {
        let names = StepNames::from_config(Config::parse(CONFIG).unwrap());
        build("t", records, (&names, &BTreeMap::new()), (1_000, false), filter, now)
    }

    #[test]
    fn each_open_task_is_listed_by_queue_with_its_age_reminders_level_and_deadline() {
        // Given a review out for 5 hours (reminders at 1h, 2h, 3h and level 1 at 4h behind it),
        // another out for 30 minutes, and a payment past its deadline
        let records = [waiting("a", 0, (0, 24), 4), waiting("b", 0, (4, 24), 0), waiting("c", 1, (-2, 1), 0)];
        let now = t(5) - Duration::minutes(30);
        // When the report is built
        let report = report(&records, &Filter::default(), now);
        // Then each queue's tasks come together, the oldest first
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["schema"], "baton.owes/v1");
        let listed: Vec<(&str, &str)> =
            report.tasks.iter().map(|t| (t.queue.as_deref().unwrap(), t.key.as_str())).collect();
        assert_eq!(listed, [("payments", "c"), ("reviewers", "a"), ("reviewers", "b")]);
        let a = &json["tasks"][1];
        assert_eq!(
            (a["step_name"].as_str(), a["role"].as_str(), a["age_seconds"].as_i64(), a["reminders"].as_u64()),
            (Some("review"), Some("step"), Some(4 * 3600 + 1800), Some(3))
        );
        assert_eq!(
            (a["level"].as_u64(), a["level_queue"].as_str(), a["overdue"].as_bool()),
            (Some(1), Some("leads"), Some(false))
        );
        assert_eq!(a["deadline"], json!(rfc3339(t(24))));
        assert_eq!(json["tasks"][0]["overdue"], true);

        let text = render(&report);
        assert!(text.starts_with("tasks owed (table t): 3\n"), "{text}");
        assert!(text.contains("\nqueue payments\n"), "{text}");
        let a_row = text.lines().find(|l| l.starts_with("  order-review  a ")).unwrap();
        assert!(a_row.contains("  4h 30m  ") && a_row.contains("  1 (leads)  "), "{a_row}");
        let c_row = text.lines().find(|l| l.starts_with("  order-review  c ")).unwrap();
        assert!(c_row.ends_with("(overdue)"), "{c_row}");
        // Every row of a queue's table has its columns where its head has them.
        let head = text.lines().find(|l| l.contains("WORKFLOW")).unwrap();
        let column = |line: &str, name: &str| line.find(name).unwrap();
        let at = column(head, "DEADLINE");
        assert_eq!(&a_row[at..at + 4], &rfc3339(t(24))[..4], "{text}");
    }

    #[test]
    fn a_queue_filter_finds_a_task_by_its_own_queue_or_any_level_it_was_escalated_to() {
        // a: level 1 behind it (leads); d: level 2 as well (heads), and the leads still hold it
        // (found by an attack test: only the highest level's queue found it).
        let records = [
            waiting("a", 0, (0, 24), 4),
            waiting("b", 0, (4, 24), 0),
            waiting("c", 1, (-2, 1), 0),
            waiting("d", 0, (-1, 24), 5),
        ];
        let keys = |filter: Filter| -> Vec<String> {
            report(&records, &filter, t(5)).tasks.into_iter().map(|t| t.key).collect()
        };
        assert_eq!(keys(Filter { queue: Some("leads".into()), overdue: false }), ["d", "a"]);
        assert_eq!(keys(Filter { queue: Some("heads".into()), overdue: false }), ["d"]);
        assert_eq!(keys(Filter { queue: Some("reviewers".into()), overdue: false }), ["d", "a", "b"]);
        assert_eq!(keys(Filter { queue: None, overdue: true }), ["c"]);
        assert!(keys(Filter { queue: Some("nobody".into()), overdue: false }).is_empty());
    }

    #[test]
    fn a_bound_passed_says_more_than_and_nothing_owed_says_so() {
        let names = StepNames::from_config(Config::parse(CONFIG).unwrap());
        let records = [waiting("a", 0, (0, 24), 0)];
        let more = build("t", &records, (&names, &BTreeMap::new()), (1, true), &Filter::default(), t(1));
        assert!(
            render(&more)
                .starts_with("tasks owed (table t): more than 1: the first 1 records of each list read\n")
        );
        assert_eq!(serde_json::to_value(&more).unwrap()["more_than"], true);
        let none = report(&[], &Filter { queue: Some("leads".into()), overdue: true }, t(1));
        assert_eq!(render(&none), "tasks owed (table t, queue leads, past their deadline): 0\n");
    }

    #[test]
    fn a_step_that_publishes_no_task_is_owed_by_no_one_and_without_a_config_every_open_wait_is() {
        // Found by an attack test: a step fed by events alone was listed, its queue unknown.
        let records = [waiting("a", 2, (0, 1), 0), waiting("b", 0, (0, 24), 0)];
        let listed: Vec<String> =
            report(&records, &Filter::default(), t(1)).tasks.into_iter().map(|t| t.key).collect();
        assert_eq!(listed, ["b"]);
        let none = (&StepNames::default(), &BTreeMap::new());
        let blind = build("t", &records, none, (1_000, false), &Filter::default(), t(1));
        assert_eq!(blind.tasks.len(), 2, "no config to tell: both listed");
        assert!(blind.tasks.iter().all(|t| t.queue.is_none()));
    }

    #[test]
    fn a_timer_and_a_task_between_attempts_are_owed_by_no_one() {
        let mut sleeping = waiting("a", 0, (0, 24), 0);
        sleeping.waits[0].status = WaitStatus::Sleeping { until: t(2) };
        let mut backing_off = waiting("b", 0, (0, 24), 0);
        backing_off.waits[0].status = WaitStatus::TaskDue { at: t(2) };
        assert!(report(&[sleeping, backing_off], &Filter::default(), t(1)).tasks.is_empty());
    }
}
