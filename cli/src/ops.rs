//! What the operator commands (`send`, `callback`, `trace`, `status`) share: how times and
//! durations read, step names from the workflow config, and the table read across its shards.
//!
//! Records and inbox entries store a step's index, not its name, because the index is what the
//! lifecycle reasons about. Operators think in names, so the commands look them up in the config
//! when they can. The config is optional here: pointed at a deployed stack from another checkout,
//! a missing `infra/workflows.yaml` must not stop a trace, so without one the index is shown.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use baton_aws::dynamodb::DynamoDbStore;
use baton_core::domain::config::{self, Config};
use baton_core::domain::lifecycle::{Notice, Role, Wait};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Duration, OffsetDateTime, UtcOffset};

/// RFC 3339 in UTC, with as many fractional digits as the time has: the JSON form.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC).format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// Serializes a time as [`rfc3339`] (`#[serde(serialize_with = "ser_time")]`).
pub fn ser_time<S: serde::Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

/// Serializes an optional time as [`rfc3339`] or `null`.
pub fn ser_opt_time<S: serde::Serializer>(t: &Option<OffsetDateTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&rfc3339(*t)),
        None => s.serialize_none(),
    }
}

/// RFC 3339 in UTC with exactly milliseconds, so that columns line up: the table form.
pub fn table_time(t: OffsetDateTime) -> String {
    let format = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.to_offset(UtcOffset::UTC).format(&format).unwrap_or_else(|_| t.to_string())
}

/// A duration in its two largest units: `2d 3h`, `4h 5m`, `6m 7s`, `8s`.
pub fn human(d: Duration) -> String {
    let total = d.whole_seconds().unsigned_abs();
    let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let sign = if d.is_negative() { "-" } else { "" };
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{sign}{seconds}s"),
        (0, 0, _) => format!("{sign}{minutes}m {seconds}s"),
        (0, _, _) => format!("{sign}{hours}h {minutes}m"),
        _ => format!("{sign}{days}d {hours}h"),
    }
}

/// How many `by_due` shards to read: the most any of the stack's functions registered in its
/// table (the template's `DueShards`), or `BATON_DUE_SHARDS` if that is more (a stack whose
/// functions have not run yet has registered none), else the default 8. The operator commands read them all.
pub async fn due_shards(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u32> {
    let registered = registered_due_shards(client, table).await?;
    Ok(match (registered, env_due_shards()?) {
        (Some(n), Some(asked)) => n.max(asked),
        (Some(n), None) | (None, Some(n)) => n,
        (None, None) => baton_aws::dynamodb::DEFAULT_DUE_SHARDS,
    })
}

/// How many shards an operator's writes (replay, redrive, cancel) spread `by_due` entries over:
/// the functions' own count, as they registered it, so that their sweeper reads every record an
/// operator writes; `BATON_DUE_SHARDS`, else the default, only where no function registered one.
pub async fn write_due_shards(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u32> {
    Ok(match registered_due_shards(client, table).await? {
        Some(n) => n,
        None => env_due_shards()?.unwrap_or(baton_aws::dynamodb::DEFAULT_DUE_SHARDS),
    })
}

/// The table `args` point at, as [`store`] reads it, and where it is (for an error's context).
pub async fn table_at(args: &crate::target::TargetArgs) -> Result<(DynamoDbStore, String)> {
    use crate::target::{Field, resolve};
    let target = resolve(args, &[Field::Table], true)?;
    let Some(table) = target.table.clone() else { anyhow::bail!("the table is needed") };
    let store = store(aws_sdk_dynamodb::Client::new(&target.aws().sdk_config().await?), &table).await?;
    Ok((store, target.location()))
}

/// The stack's table, read across every `by_due` shard its functions write ([`due_shards`]).
pub async fn store(client: aws_sdk_dynamodb::Client, table: &str) -> Result<DynamoDbStore> {
    let shards = due_shards(&client, table).await?;
    Ok(DynamoDbStore::new(client, table).with_due_shards(shards))
}

async fn registered_due_shards(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Option<u32>> {
    DynamoDbStore::new(client.clone(), table)
        .registered_due_shards()
        .await
        .with_context(|| format!("cannot read the shard count the functions registered in {table}"))
}

/// `BATON_DUE_SHARDS`, when set (and not empty).
fn env_due_shards() -> Result<Option<u32>> {
    if std::env::var_os("BATON_DUE_SHARDS").is_none_or(|v| v.is_empty()) {
        return Ok(None);
    }
    Ok(Some(baton_aws::wiring::due_shards(&|name| std::env::var(name).ok())?))
}

/// Step names by workflow and index, from the config when one could be read.
#[derive(Debug, Default, Clone)]
pub struct StepNames(Option<Config>);

impl StepNames {
    /// Reads the config at `explicit` (`--config` / `BATON_CONFIG`), which must be valid, or
    /// else the default `infra/workflows.yaml` if it exists and is valid. Without either, steps
    /// are shown by index; a broken default file is reported on stderr, not fatal.
    pub fn load(explicit: Option<&Path>) -> Result<StepNames> {
        if let Some(path) = explicit {
            let config =
                Config::load(path).with_context(|| format!("cannot use the config {}", path.display()))?;
            return Ok(StepNames(Some(config)));
        }
        let default = PathBuf::from(config::DEFAULT_PATH);
        if !default.exists() {
            return Ok(StepNames(None));
        }
        match Config::load(&default) {
            Ok(config) => Ok(StepNames(Some(config))),
            Err(e) => {
                eprintln!("warning: steps are shown by index: {}: {e}", default.display());
                Ok(StepNames(None))
            }
        }
    }

    /// Names from a config already at hand.
    #[cfg(test)]
    pub fn from_config(config: Config) -> StepNames {
        StepNames(Some(config))
    }

    /// The names as config `version` has them (a record's own): this config when it is that
    /// version (or there is no record, `None`), else that version as registered in the table;
    /// by index when neither can be had, rather than another version's names.
    pub async fn of_version(
        self,
        store: &dyn baton_core::ports::store::WorkflowStore,
        version: Option<&str>,
    ) -> StepNames {
        let Some(version) = version else { return self };
        if self.0.as_ref().is_some_and(|c| c.version == version) {
            return self;
        }
        match store.configs().await {
            Ok(all) => StepNames(
                all.iter().find(|c| c.version == version).and_then(|c| Config::parse(&c.canonical).ok()),
            ),
            Err(e) => {
                eprintln!("warning: steps are shown by index: cannot read config version {version}: {e}");
                StepNames(None)
            }
        }
    }

    /// The names of each config version `records` are on, read once a version: a record's
    /// steps are named as its own version names them, not as the operator's checkout does (after
    /// an inserted step, its indices mean other steps).
    pub async fn of_records(
        &self,
        store: &dyn baton_core::ports::store::WorkflowStore,
        records: &[baton_core::domain::lifecycle::Record],
    ) -> BTreeMap<String, StepNames> {
        let mut versions = BTreeMap::new();
        for r in records {
            if !versions.contains_key(&r.config_version) {
                let named = self.clone().of_version(store, Some(&r.config_version)).await;
                versions.insert(r.config_version.clone(), named);
            }
        }
        versions
    }

    /// The workflows of the config (none without one).
    pub fn workflows(&self) -> impl Iterator<Item = &baton_core::domain::ids::WorkflowName> {
        self.0.iter().flat_map(|c| c.workflows.iter().map(|w| &w.name))
    }

    /// The state machine `workflow` runs, as the config generates it.
    pub fn definition(&self, workflow: &str) -> Option<serde_json::Value> {
        Some(baton_core::domain::asl::definition(self.0.as_ref()?.workflow(workflow)?))
    }

    /// The name of the position a record at step `index` is at: the parallel group's, when
    /// `index` is a branch of one, else the step's.
    pub fn position_name(&self, workflow: &str, index: u32) -> Option<String> {
        let wf = self.0.as_ref()?.workflow(workflow)?;
        match wf.group_of(index) {
            Some(group) => Some(group.name.to_string()),
            None => self.name(workflow, index),
        }
    }

    /// Who the task of the wait `w` (of a record of `workflow`) was given to, and when: its
    /// step's queue when Step Functions reached it, then each reminder and escalation level
    /// behind it, at its time (`baton trace`, `baton owes`). `None` for a wait with no task (a
    /// timer's, or one not reached), or without this config's step.
    pub fn asked(&self, workflow: &str, w: &Wait) -> Option<Asked> {
        let wf = self.0.as_ref()?.workflow(workflow)?;
        let step = wf.steps.get(usize::try_from(w.step).ok()?)?;
        let (task, timeout) = match (w.role, &step.compensate) {
            (Role::Compensation, Some(c)) => (&c.task, c.timeout),
            (Role::Compensation, None) => return None,
            _ => (step.task.as_ref()?, step.timeout),
        };
        let since = w.deadline?.checked_sub(Duration::try_from(timeout).ok()?)?;
        let after =
            |d: std::time::Duration| since.saturating_add(Duration::try_from(d).unwrap_or(Duration::MAX));
        let plan = wf.plan();
        // A compensation's task has no reminders or levels: they are a step's only.
        let schedule = if w.role == Role::Step { plan.step(w.step)?.notices() } else { Vec::new() };
        let behind = schedule.iter().take(w.notified as usize);
        let notices: Vec<AskedAgain> = behind
            .map(|(t, notice)| match *notice {
                Notice::Reminder(count) => AskedAgain {
                    at: after(*t),
                    queue: task.queue.clone(),
                    reminder: Some(count),
                    level: None,
                },
                Notice::Escalation(level) => AskedAgain {
                    at: after(*t),
                    queue: step
                        .escalate
                        .get(level as usize - 1)
                        .map_or_else(String::new, |e| e.task.queue.clone()),
                    reminder: None,
                    level: Some(level),
                },
            })
            .collect();
        Some(Asked {
            queue: task.queue.clone(),
            since,
            reminders: notices.iter().filter_map(|n| n.reminder).max().unwrap_or(0),
            level: notices.iter().filter_map(|n| n.level).max().unwrap_or(0),
            again: notices,
        })
    }

    /// The name of step `index` of `workflow`, if the config has it.
    pub fn name(&self, workflow: &str, index: u32) -> Option<String> {
        let wf = self.0.as_ref()?.workflow(workflow)?;
        let step = wf.steps.get(usize::try_from(index).ok()?)?;
        Some(step.name.to_string())
    }
}

/// Who a wait's task was given to, and when ([`StepNames::asked`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Asked {
    /// The step's own queue, where its task went when Step Functions reached it.
    pub queue: String,
    /// When that was: when Step Functions entered the step (its deadline less its timeout).
    #[serde(serialize_with = "ser_time")]
    pub since: OffsetDateTime,
    /// How many reminders are behind it (the highest count: a late sweep sends only the last of
    /// those due at once).
    pub reminders: u32,
    /// The highest escalation level its task was given to (0: none yet).
    pub level: u32,
    /// Each reminder and escalation level behind it, in order, at its time.
    pub again: Vec<AskedAgain>,
}

/// A reminder or an escalation level behind a wait: due at `at` (the sweeper publishes it at its
/// first sweep from then), on `queue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AskedAgain {
    #[serde(serialize_with = "ser_time")]
    pub at: OffsetDateTime,
    pub queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reminder: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u32>,
}

impl AskedAgain {
    /// `reminder 2`, `level 1`.
    pub fn what(&self) -> String {
        match (self.reminder, self.level) {
            (Some(n), _) => format!("reminder {n}"),
            (_, Some(n)) => format!("level {n}"),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(human(Duration::seconds(8)), "8s");
        assert_eq!(human(Duration::seconds(6 * 60 + 7)), "6m 7s");
        assert_eq!(human(Duration::seconds(4 * 3600 + 5 * 60 + 59)), "4h 5m");
        assert_eq!(human(Duration::seconds(2 * 86_400 + 3 * 3600)), "2d 3h");
        assert_eq!(human(Duration::seconds(-90)), "-1m 30s");
    }

    #[test]
    fn times_are_utc_and_table_times_have_fixed_width() {
        let t = OffsetDateTime::UNIX_EPOCH + Duration::milliseconds(1_500);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:01.5Z");
        assert_eq!(table_time(t), "1970-01-01T00:00:01.500Z");
        assert_eq!(table_time(OffsetDateTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn step_names_come_from_the_config_when_it_has_them() {
        let config = Config::parse(
            "workflows:\n  wf:\n    start: { when: { type: [t] }, key: /subject }\n    steps:\n      \
             - { name: review, requires: [d], timeout: 1h }\n",
        )
        .unwrap();
        let names = StepNames::from_config(config);
        assert_eq!(names.name("wf", 0).as_deref(), Some("review"));
        assert_eq!(names.name("wf", 1), None);
        assert_eq!(names.name("other", 0), None);
        assert_eq!(StepNames::default().name("wf", 0), None);
    }
}
