//! The scale model (`make scale`): a million workflows through the real lifecycle (`decide`),
//! with the `by_due` index as the DynamoDB store lays it out (`store::dynamodb::due_kind`),
//! and DynamoDB's per-partition quota applied. It answers docs/SCALE.md's questions:
//! - the peak write rate on each index partition, unsharded and sharded;
//! - what one sweeper tick reads;
//! - that the sweeper reads in proportion to what is due, not to the records stored;
//! - what `baton status` reads, counting each state up to its bound.
//!
//! - what Step Functions' token buckets (StartExecution, SendTask*) do to the same stream of
//!   calls: how many wait, for how long, and that every one is served, none lost.
//!
//! Each workflow is the sample's two steps: start, `step_ready`, the review's callback, the next
//! `step_ready`, the payment, the final report. Starts arrive at a steady rate; the review and the
//! payment come a uniformly random while later. A share of workflows is left stuck `pending`
//! (their execution never reports), which is what the sweeper exists to find.

use std::collections::{BTreeMap, HashMap};

use baton_aws::dynamodb::{due_kind, due_partitions};
use baton_core::domain::config::Config;
use baton_core::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
use baton_core::domain::lifecycle::{self, Input, Kind, Record, Source, StepOutcome};
use baton_core::ports::store::{BoundedCount, COUNT_UP_TO};
use time::{Duration, OffsetDateTime};

use crate::rng::Rng;

/// One index partition takes this many writes a second (DynamoDB, docs/SCALE.md).
pub const PARTITION_WRITES_PER_SECOND: u64 = 1_000;

/// A Step Functions token bucket: it holds `capacity` calls and refills `refill` a second
/// (docs/SCALE.md, us-east-1's defaults). A call over it is throttled: baton retries it, then
/// leaves it in SQS or with its sender, so it waits rather than being lost.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub name: &'static str,
    pub capacity: u64,
    pub refill: u64,
}

/// StartExecution: 1,300, refilled 300 a second.
pub const START_EXECUTION: Bucket = Bucket { name: "StartExecution", capacity: 1_300, refill: 300 };
/// SendTaskSuccess (and SendTaskFailure, SendTaskHeartbeat, each its own): 3,000, 500 a second.
pub const SEND_TASK_SUCCESS: Bucket = Bucket { name: "SendTaskSuccess", capacity: 3_000, refill: 500 };

/// What a bucket did to the calls made of it ([`Admission`]): the calls it could not take in the
/// second they were made waited, oldest first, for the seconds it refilled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Throttled {
    pub calls: u64,
    /// Calls not taken in the second they were made (each throttled at least once).
    pub waited: u64,
    pub max_backlog: u64,
    /// The longest any call waited, in seconds.
    pub longest_wait: i64,
    /// The second (from the first call) by which every call was taken.
    pub all_served_by: i64,
}

/// Calls through a bucket one at a time, in the order they are made (the intake queue's
/// order): each is taken at once if the bucket has a token, else it waits in SQS, oldest first,
/// for the second the bucket refills. Gives the second each call was taken.
struct Admission {
    bucket: Bucket,
    second: i64,
    tokens: u64,
    /// The seconds the calls still waiting at the latest call were taken, oldest first.
    pending: std::collections::VecDeque<i64>,
    first: Option<i64>,
    out: Throttled,
}

impl Admission {
    fn new(bucket: Bucket) -> Self {
        Admission {
            bucket,
            second: i64::MIN,
            tokens: bucket.capacity,
            pending: Default::default(),
            first: None,
            out: Throttled::default(),
        }
    }

    /// A call made in second `made` (not before the previous call's); the second it is taken.
    fn admit(&mut self, made: i64) -> i64 {
        self.first.get_or_insert(made);
        if made > self.second {
            let refills = if self.second == i64::MIN { 0 } else { (made - self.second) as u64 };
            self.tokens = self
                .tokens
                .saturating_add(refills.saturating_mul(self.bucket.refill))
                .min(self.bucket.capacity);
            self.second = made;
        }
        while self.tokens == 0 {
            self.second += 1;
            self.tokens = self.bucket.refill.min(self.bucket.capacity);
        }
        self.tokens -= 1;
        self.out.calls += 1;
        if self.second > made {
            self.out.waited += 1;
            self.out.longest_wait = self.out.longest_wait.max(self.second - made);
        }
        while self.pending.front().is_some_and(|&taken| taken <= made) {
            self.pending.pop_front();
        }
        self.pending.push_back(self.second);
        // Waiting now: this call, if it waits, and every earlier one still waiting.
        let waiting = if self.second > made { self.pending.len() as u64 } else { 0 };
        self.out.max_backlog = self.out.max_backlog.max(waiting);
        self.out.all_served_by = self.second - self.first.unwrap_or(made);
        self.second
    }
}

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
    /// Step Functions' buckets, applied to the starts and to the resumes.
    pub start_executions: Throttled,
    pub resumes: Throttled,
}

/// One index write: at second `at`, on `partition`.
struct IndexWrite {
    at: i64,
    partition: u32,
}

/// Drives `scale.workflows` workflows and measures the index.
#[expect(clippy::too_many_lines, reason = "the scale model's report, figure by figure")]
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
    // Step Functions' buckets: the starts, in the order the events arrive; each step's resume
    // (its callback), in the order they are made, once all are known.
    let mut starts = Admission::new(START_EXECUTION);
    let mut resumes: Vec<i64> = Vec::with_capacity(scale.workflows as usize * 2);
    // Each record's state, due time and index partition at the tick.
    let mut last: Vec<(Kind, OffsetDateTime, u32)> = Vec::with_capacity(scale.workflows as usize);
    let end = t0 + Duration::seconds((scale.workflows / scale.rate.max(1)) as i64);
    // The sweeper's tick looked at: ten minutes after the last start, when most workflows wait
    // on their review and the stuck ones are past the restart grace.
    let now = end + Duration::minutes(10);

    for i in 0..scale.workflows {
        let key = CorrelationKey::parse(format!("order-{i}")).expect("key");
        let pk = format!("WF#{workflow}#{key}");
        let arrived = t0 + Duration::microseconds((i * 1_000_000 / scale.rate.max(1)) as i64);
        // The record is written when the event arrives; its execution starts when
        // StartExecution's bucket lets it (until then the event waits in the intake queue), and
        // the rest of the workflow follows from there.
        let taken = starts.admit((arrived - t0).whole_seconds());
        let start = arrived.max(t0 + Duration::seconds(taken));
        let stuck = rng.below(1_000_000) < scale.stuck_per_million;
        let mut inputs = vec![(arrived, Input::start(EventId::parse(format!("evt-{i}")).expect("id")))];
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
                        attempt: None,
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
            let second = (at - t0).whole_seconds();
            if let Input::StepInput { .. } = &input {
                resumes.push(second);
            }
            let decision = lifecycle::decide(&plan, (&workflow, &key), record.as_ref(), &input, at);
            let Some(write) = decision.write else {
                panic!("{input:?} did not write on {:?}", record.map(|r| r.state))
            };
            let to = write.to;
            let kind = to.state.kind();
            let due_at = to.due_at();
            let partition = intern(due_kind(&format!("record#{kind}"), &pk, scale.shards));
            // An index entry moved (its key changed) is a delete and a put; a new one, a put.
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

    let mut report = Report {
        index_writes: writes.len() as u64,
        records: scale.workflows,
        start_executions: starts.out.clone(),
        resumes: {
            resumes.sort_unstable();
            let mut admission = Admission::new(SEND_TASK_SUCCESS);
            for made in resumes {
                admission.admit(made);
            }
            admission.out
        },
        ..Report::default()
    };
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
        Kind::Pending => at <= now - baton_core::limits::RESTART_PENDING_AFTER,
        Kind::Advancing => at <= now - baton_core::limits::RESEND_RESUME_AFTER,
        _ => false,
    };
    report.due = last.iter().filter(|(k, at, _)| due(*k, *at)).count() as u64;
    report.tick_queries = 3 * (u64::from(scale.shards) + 1);
    report.tick_items = report.due.min(baton_core::use_cases::sweeper::BATCH as u64 * 2);
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
        "{} workflows at {} starts/s, by_due over {} shard(s) per state, {} per million never reported:",
        scale.workflows, scale.rate, scale.shards, scale.stuck_per_million
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
    for (bucket, t) in [(START_EXECUTION, &r.start_executions), (SEND_TASK_SUCCESS, &r.resumes)] {
        println!(
            "  Step Functions {:<15} (bucket {}, {}/s): {} calls, {} waited (most waiting at once {}, longest wait {} s), all served {} s after the first",
            bucket.name,
            bucket.capacity,
            bucket.refill,
            t.calls,
            t.waited,
            t.max_backlog,
            t.longest_wait,
            t.all_served_by
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_takes_a_burst_up_to_its_size_then_its_refill_and_serves_every_call_in_order() {
        let mut admission = Admission::new(Bucket { name: "b", capacity: 10, refill: 4 });
        for made in std::iter::repeat_n(0, 25).chain([5, 5]) {
            admission.admit(made);
        }
        let t = admission.out;
        // Second 0 takes 10; 15 wait: 4 in each of seconds 1-3, the last 3 in second 4 (which
        // refills to 4); second 5 has 1 token left over plus 4.
        assert_eq!(t.calls, 27);
        assert_eq!(t.waited, 15);
        assert_eq!(t.max_backlog, 15);
        assert_eq!(t.longest_wait, 4);
        assert_eq!(t.all_served_by, 5);
        let mut calm = Admission::new(Bucket { name: "b", capacity: 10, refill: 4 });
        for made in [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2] {
            calm.admit(made);
        }
        assert_eq!((calm.out.waited, calm.out.longest_wait), (0, 0), "within the refill nothing waits");
    }

    #[test]
    fn calls_admitted_one_by_one_are_taken_in_order_as_the_bucket_refills() {
        let mut admission = Admission::new(Bucket { name: "b", capacity: 2, refill: 1 });
        let taken: Vec<i64> = [0, 0, 0, 0, 5].into_iter().map(|made| admission.admit(made)).collect();
        assert_eq!(taken, [0, 0, 1, 2, 5], "two at once, then one a second; the bucket refilled by 5");
        let out = admission.out;
        assert_eq!(
            (out.calls, out.waited, out.longest_wait, out.max_backlog, out.all_served_by),
            (5, 2, 2, 2, 5)
        );
    }

    #[test]
    fn the_sustained_rate_passes_step_functions_and_four_times_it_waits_in_sqs() {
        let at = |rate| run(Scale { workflows: 30_000, rate, shards: 8, stuck_per_million: 0, seed: 3 });
        let sustained = at(250);
        assert_eq!(sustained.start_executions.waited, 0, "{:?}", sustained.start_executions);
        assert_eq!(sustained.resumes.waited, 0, "{:?}", sustained.resumes);
        let over = at(1_000);
        assert_eq!(over.start_executions.calls, 30_000);
        assert!(
            over.start_executions.waited > 0,
            "over StartExecution's refill, starts wait: {:?}",
            over.start_executions
        );
        // Every call is served in the end: 30,000 starts at 300 a second after the burst of 1,300.
        assert!(over.start_executions.all_served_by >= (30_000 - 1_300) / 300);
    }

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
