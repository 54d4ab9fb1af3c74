//! The scale model (`make scale`): a million workflows through the real lifecycle (`decide`),
//! with the `by_due` index as the DynamoDB store lays it out (`store::dynamodb::due_kind`),
//! and DynamoDB's per-partition quota applied. It answers docs/SCALE.md's questions:
//! - the peak write rate on each index partition, unsharded and sharded;
//! - what one sweeper tick reads;
//! - that the sweeper reads in proportion to what is due, not to the records stored;
//! - what `baton status` reads, counting each state up to its bound.
//!
//! Each workflow is the sample's two steps: start, `step_ready`, the review's callback, the next
//! `step_ready`, the payment, the final report. Starts arrive at a steady rate; the review and the
//! payment come a uniformly random while later. A share of workflows is left stuck `pending`
//! (their execution never reports), which is what the sweeper exists to find.

use std::collections::{BTreeMap, HashMap};

use baton::config::Config;
use baton::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
use baton::lifecycle::{self, Input, Kind, Record, Source, StepOutcome};
use baton::store::dynamodb::{due_kind, due_partitions};
use baton::store::{BoundedCount, COUNT_UP_TO};
use time::{Duration, OffsetDateTime};

use crate::rng::Rng;

/// One index partition takes this many writes a second (DynamoDB, docs/SCALE.md).
pub const PARTITION_WRITES_PER_SECOND: u64 = 1_000;

/// What to drive.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub workflows: u64,
    /// Starts per second.
    pub rate: u64,
    /// `by_due` shards per state.
    pub shards: u32,
    /// Workflows left stuck pending, per million.
    pub stuck_per_million: u64,
    pub seed: u64,
}

/// What it found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub index_writes: u64,
    /// The busiest second of the busiest partition: (partition, writes).
    pub peak: (String, u64),
    /// Partition-seconds over [`PARTITION_WRITES_PER_SECOND`].
    pub throttled_seconds: u64,
    /// At the tick: records stored, records due for the sweeper, and what one tick reads.
    pub records: u64,
    pub due: u64,
    pub tick_queries: u64,
    pub tick_items: u64,
    /// What counting the live states (pending, waiting, advancing) to the end would read, and
    /// counting all of them.
    pub live_entries: u64,
    pub all_entries: u64,
    /// The index entries `baton status` reads, counting each state up to [`COUNT_UP_TO`].
    pub status_entries: u64,
}

/// One index write: at second `at`, on `partition`.
struct IndexWrite {
    at: i64,
    partition: u32,
}

/// Drives `scale.workflows` workflows and measures the index.
pub fn run(scale: Scale) -> Report {
    let config = Config::parse(include_str!("../../infra/workflows.yaml")).expect("the sample config");
    let plan = config.workflows[0].plan();
    let workflow = WorkflowName::parse("order-review").expect("name");
    let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("time");
    let mut rng = Rng::new(scale.seed);
    // Partition names, interned: (state kind, shard).
    let mut partitions: Vec<String> = Vec::new();
    let mut partition_ids: HashMap<String, u32> = HashMap::new();
    let mut intern = |name: String| -> u32 {
        *partition_ids.entry(name.clone()).or_insert_with(|| {
            partitions.push(name);
            (partitions.len() - 1) as u32
        })
    };
    let mut writes: Vec<IndexWrite> = Vec::with_capacity(scale.workflows as usize * 11);
    // Each record's state, due time and index partition at the tick.
    let mut last: Vec<(Kind, OffsetDateTime, u32)> = Vec::with_capacity(scale.workflows as usize);
    let end = t0 + Duration::seconds((scale.workflows / scale.rate.max(1)) as i64);
    // The sweeper's tick looked at: ten minutes after the last start, when most workflows wait
    // on their review and the stuck ones are past the restart grace.
    let now = end + Duration::minutes(10);

    for i in 0..scale.workflows {
        let key = CorrelationKey::parse(format!("order-{i}")).expect("key");
        let pk = format!("WF#{workflow}#{key}");
        let start = t0 + Duration::microseconds((i * 1_000_000 / scale.rate.max(1)) as i64);
        let stuck = rng.below(1_000_000) < scale.stuck_per_million;
        let mut inputs =
            vec![(start, Input::Start { event: EventId::parse(format!("evt-{i}")).expect("id") })];
        if !stuck {
            let review = start + Duration::seconds(rng.range(60, 3_600));
            let paid = review + Duration::seconds(rng.range(60, 7_200));
            let ready = |at: OffsetDateTime, step: u32| {
                (
                    at,
                    Input::StepReady {
                        generation: 1,
                        step,
                        token: TaskToken::parse(format!("tok-{i}-{step}")).expect("token"),
                        deadline: at + Duration::days(2),
                    },
                )
            };
            let callback = |at: OffsetDateTime, step: u32, field: &str| {
                let data = serde_json::Map::from_iter([(field.to_owned(), serde_json::json!("x"))]);
                (
                    at,
                    Input::StepInput {
                        id: EventId::parse(format!("cb-{i}-{step}")).expect("id"),
                        hash: format!("h{i}{step}"),
                        source: Source::Callback,
                        step,
                        outcome: StepOutcome::Succeeded,
                        data,
                        generation: None,
                    },
                )
            };
            inputs.extend([
                ready(start + Duration::milliseconds(200), 0),
                callback(review, 0, "decision"),
                ready(review + Duration::milliseconds(200), 1),
                callback(paid, 1, "payment_ref"),
                (
                    paid + Duration::milliseconds(200),
                    Input::Finished { generation: 1, finish: lifecycle::Finish::Succeeded },
                ),
            ]);
        }
        let mut record: Option<Record> = None;
        let mut entry: Option<(u32, OffsetDateTime)> = None;
        let mut at_tick: Option<(Kind, OffsetDateTime, u32)> = None;
        for (at, input) in inputs {
            let decision = lifecycle::decide(&plan, (&workflow, &key), record.as_ref(), &input, at);
            let Some(write) = decision.write else {
                panic!("{input:?} did not write on {:?}", record.map(|r| r.state))
            };
            let to = write.to;
            let kind = to.state.kind();
            let due_at = baton::store::memory::due_at(&to);
            let partition = intern(due_kind(&format!("record#{kind}"), &pk, scale.shards));
            // An index entry moved (its key changed) is a delete and a put; a new one, a put.
            let second = (at - t0).whole_seconds();
            if let Some((old, _)) = entry {
                writes.push(IndexWrite { at: second, partition: old });
            }
            writes.push(IndexWrite { at: second, partition });
            entry = Some((partition, due_at));
            if at <= now {
                at_tick = Some((kind, due_at, partition));
            }
            record = Some(to);
        }
        last.extend(at_tick);
    }

    let mut report =
        Report { index_writes: writes.len() as u64, records: scale.workflows, ..Report::default() };
    let mut per_second: HashMap<(u32, i64), u64> = HashMap::new();
    for w in &writes {
        *per_second.entry((w.partition, w.at)).or_default() += 1;
    }
    let mut by_partition: BTreeMap<u32, u64> = BTreeMap::new();
    for ((p, _), n) in &per_second {
        let peak = by_partition.entry(*p).or_default();
        *peak = (*peak).max(*n);
        if *n > PARTITION_WRITES_PER_SECOND {
            report.throttled_seconds += 1;
        }
    }
    if let Some((p, n)) = by_partition.iter().max_by_key(|(_, n)| **n) {
        report.peak = (partitions[*p as usize].clone(), *n);
    }

    // One sweeper tick: pending past the restart grace and advancing past the resend grace,
    // from every shard and the unsharded partition (3 due kinds with the inbox), at most its
    // batch per kind.
    let due = |kind: Kind, at: OffsetDateTime| match kind {
        Kind::Pending => at <= now - lifecycle::RESTART_PENDING_AFTER,
        Kind::Advancing => at <= now - lifecycle::RESEND_RESUME_AFTER,
        _ => false,
    };
    report.due = last.iter().filter(|(k, at, _)| due(*k, *at)).count() as u64;
    report.tick_queries = 3 * (u64::from(scale.shards) + 1);
    report.tick_items = report.due.min(baton::sweeper::BATCH as u64 * 2);
    report.live_entries = last.iter().filter(|(k, _, _)| !k.is_terminal()).count() as u64;
    report.all_entries = last.len() as u64;
    // `baton status`: each state counted up to the bound, as the store counts it.
    let mut per_partition: HashMap<&str, u64> = HashMap::new();
    for (_, _, p) in &last {
        *per_partition.entry(&partitions[*p as usize]).or_default() += 1;
    }
    for kind in Kind::ALL {
        let sizes: Vec<u64> = due_partitions(&format!("record#{kind}"), scale.shards)
            .iter()
            .map(|p| per_partition.get(p.as_str()).copied().unwrap_or(0))
            .collect();
        report.status_entries += BoundedCount::over(&sizes, COUNT_UP_TO).1;
    }
    report
}

/// The report, as `make scale` prints it.
pub fn print(scale: &Scale, r: &Report) {
    println!(
        "{} workflows at {} starts/s, by_due over {} shard(s) per state ({} stuck pending):",
        scale.workflows, scale.rate, scale.shards, r.due
    );
    println!("  index writes                       {:>12}", r.index_writes);
    println!("  busiest partition-second           {:>12}  ({})", r.peak.1, r.peak.0);
    println!("  partition-seconds over {} writes/s {:>11}", PARTITION_WRITES_PER_SECOND, r.throttled_seconds);
    println!("  records stored                     {:>12}", r.records);
    println!("  due for the sweeper                {:>12}", r.due);
    println!("  one sweeper tick: queries, items   {:>12}, {}", r.tick_queries, r.tick_items);
    println!("  counting live states to the end    {:>12} index entries", r.live_entries);
    println!("  counting every state to the end    {:>12} index entries", r.all_entries);
    println!("  baton status (up to {COUNT_UP_TO} a state)   {:>12} index entries", r.status_entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharding_spreads_a_states_writes_and_the_sweeper_reads_only_what_is_due() {
        let scale =
            |shards| Scale { workflows: 20_000, rate: 2_000, shards, stuck_per_million: 1_000, seed: 7 };
        let one = run(scale(1));
        let eight = run(scale(8));
        assert_eq!(one.index_writes, eight.index_writes, "the same writes, spread");
        assert!(
            one.peak.1 > PARTITION_WRITES_PER_SECOND,
            "unsharded, a state's partition is hot: {:?}",
            one.peak
        );
        assert!(eight.peak.1 * 4 < one.peak.1, "sharded, its busiest second is far lower: {:?}", eight.peak);
        assert_eq!(eight.throttled_seconds, 0, "and within the partition's quota");
        assert!(eight.due > 0 && eight.due < 100, "the stuck ones are due: {}", eight.due);
        assert_eq!(eight.tick_items, eight.due, "a tick reads what is due");
        assert_eq!(eight.tick_queries, 27, "3 kinds, 8 shards and the unsharded partition");
        // Status reads about the bound for each state past it, whatever the records and shards.
        let twice = run(Scale { workflows: 40_000, ..scale(8) });
        assert_eq!(twice.all_entries, 2 * eight.all_entries);
        for r in [&one, &eight, &twice] {
            assert!(
                r.status_entries <= Kind::ALL.len() as u64 * (COUNT_UP_TO + 9),
                "status reads in proportion to its bound, not to the {} records: {}",
                r.all_entries,
                r.status_entries
            );
        }
    }
}
