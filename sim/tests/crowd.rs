//! The sweeper under a crowd: thousands of records whose executions ended without a report
//! (stopped from the console, outside baton) sit past their deadlines. Owed work of other
//! records still goes out on time, and the crowd is stranded, one batch a sweep, instead of
//! being listed for ever (found by review: 100 such records filled the sweeper's batch for good).

mod common;

use baton_core::domain::ids::CorrelationKey;
use baton_core::domain::lifecycle::Kind;
use baton_core::limits::STRANDED_AFTER;
use baton_core::ports::store::{COUNT_UP_TO, Count, WorkflowStore};
use baton_sim::sqs::QueueId;
use baton_sim::world::{World, drive, lock};
use baton_sim::{EPOCH, Stack};
use common::*;
use serde_json::json;
use time::{Duration, OffsetDateTime};

const YAML: &str = r#"
workflows:
  crowd:
    start: { when: { type: ["crowd.placed"] }, key: /subject }
    steps:
      - { name: wait, requires: [x], timeout: 10m }
  retried:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: verify
        task: { title: "Verify {key}", queue: verify }
        requires: [verdict]
        timeout: 6h
        retry: { attempts: 3, backoff: 30s }
"#;

/// How many records the crowd holds.
const CROWD: usize = 10_000;

fn drain(s: &Stack) {
    loop {
        let busy =
            [QueueId::Intake, QueueId::Progress].iter().any(|q| lock(&s.sqs).any_visible(*q, s.world.now()));
        if !busy {
            return;
        }
        deliver(s, QueueId::Intake);
        deliver(s, QueueId::Progress);
    }
}

fn published_attempts(s: &Stack, key: &str) -> Vec<u32> {
    lock(&s.publisher.log).iter().filter(|p| p.task.key.as_str() == key).map(|p| p.task.attempt).collect()
}

#[test]
fn a_retried_steps_next_attempt_goes_out_on_time_past_ten_thousand_stranded_records() {
    let start = OffsetDateTime::from_unix_timestamp(EPOCH).unwrap();
    let s = Stack::with_config(World::new(11, start, false), None, YAML, Default::default());
    for i in 0..CROWD {
        send(&s, &event(&format!("c-{i}"), "crowd.placed", &format!("c{i}"), json!({})));
    }
    drain(&s);
    // Every crowd execution is stopped from the console: no report will come.
    let arns = running_executions(&s, "crowd");
    assert_eq!(arns.len(), CROWD);
    for arn in &arns {
        drive(s.engine.orchestrator.stop_execution(arn, "Console", "stopped by hand")).unwrap();
    }
    // Long past their deadlines, and past the time a report could still be on its way.
    s.world.advance(Duration::minutes(10) + STRANDED_AFTER + Duration::minutes(5));
    send(&s, &event("r-start", "order.placed", "r", json!({})));
    drain(&s);
    assert_eq!(published_attempts(&s, "r"), [1]);
    let failed = json!({"workflow": "retried", "key": "r", "step": "verify", "outcome": "failed",
        "error": "Unreachable", "cause": "the scanner timed out", "attempt": 1, "generation": 1});
    let a = callback(&s, "r-fail-1", &failed);
    assert_eq!((a.status.as_u16(), a.body["status"].as_str()), (200, Some("applied")), "{}", a.body);
    // The sweep right after the backoff publishes attempt 2, whatever the crowd.
    s.world.advance(Duration::seconds(31));
    let report = drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(published_attempts(&s, "r"), [1, 2], "attempt 2 held back by the crowd: {report:?}");
    assert_eq!(report.stranded, 100, "one batch of the crowd stranded by this sweep");
    // The crowd is stranded a batch a sweep, and then nothing of it is listed any more.
    for _ in 0..CROWD / 100 {
        s.world.advance(Duration::minutes(1));
        drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    }
    let counts = drive(s.memory.count_by_state(COUNT_UP_TO)).unwrap();
    assert_eq!(counts.get(&Kind::Stranded), Some(&Count::MoreThan(COUNT_UP_TO)));
    let crowd = s.config.workflow("crowd").unwrap();
    let stranded = (0..CROWD)
        .filter(|i| {
            drive(s.memory.load(&crowd.name, &CorrelationKey::parse(format!("c{i}")).unwrap()))
                .unwrap()
                .is_some_and(|r| r.state.kind() == Kind::Stranded)
        })
        .count();
    assert_eq!(stranded, CROWD);
    let after = drive(s.live().sweeper.run_once(s.world.now())).unwrap();
    assert_eq!(
        (after.stranded, after.nothing_owed),
        (0, 0),
        "nothing of the crowd is listed any more: {after:?}"
    );
}
