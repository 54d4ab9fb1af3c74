//! End to end, on the emulator: from a domain event to a waiting step (issue 4).
//!
//! Real executions of the generated state machines, real handlers behind local event source
//! mappings, and only public surfaces to drive and observe: the intake queue, the outbound
//! queue, the dead-letter queue, Step Functions and the store.

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use baton_core::domain::lifecycle::{IgnoreReason, State, WaitOutcome};
use baton_core::ports::dead_letters::{DETAIL_ATTRIBUTE, REASON_ATTRIBUTE};
use baton_core::ports::metrics::Metric;
use baton_tests::system::{System, eventually, start_system};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

const CONFIG: &str = baton_tests::ORDER_REVIEW;

fn order_placed(id: &str, key: &str, total: u32) -> String {
    json!({
        "specversion": "1.0", "id": id, "source": "shop", "type": "order.placed",
        "subject": key, "data": {"order_id": key, "total": total}
    })
    .to_string()
}

async fn waiting_on(system: &System, key: &str, step: u32) {
    system
        .until(&format!("{key} waiting on step {step}"), || async {
            system.record("order-review", key).await.filter(|r| r.state == State::Waiting { step })
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eligible_event_starts_one_execution_waits_on_the_first_step_and_publishes_one_task() {
    let system = start_system(CONFIG).await;
    system.send_event(&order_placed("evt-1", "order-1", 1250)).await;
    waiting_on(&system, "order-1", 0).await;

    let executions = system.executions("order-review").await;
    assert_eq!(executions.len(), 1);
    assert!(executions[0].name().ends_with("-g1"), "{}", executions[0].name());
    let record = system.record("order-review", "order-1").await.unwrap();
    assert!(record.waits[0].token.is_some() && record.waits[0].deadline.is_some());

    let tasks = system.published_tasks(1).await;
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(tasks[0]["type"], "baton.task.created");
    assert_eq!(tasks[0]["id"], "order-review/order-1/g1/manual-review");
    assert_eq!(tasks[0]["data"]["title"], "Review order order-1");
    assert_eq!(tasks[0]["data"]["queue"], "risk-review");
    assert_eq!(system.metrics.count(Metric::WorkflowsStarted, Some("order-review")), 1);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_three_times_sequentially_and_concurrently_gives_one_execution_and_one_task() {
    let system = start_system(CONFIG).await;
    // Sequentially, through the queue.
    for _ in 0..3 {
        system.send_event(&order_placed("evt-seq", "order-seq", 5000)).await;
    }
    // Concurrently: three invocations of the intake handler at once, as Lambda may run them.
    let intake = system.baton.handlers.get("IntakeFunction").expect("intake").clone();
    let event = |n: usize| {
        let mut e = SqsEvent::default();
        let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
        m.message_id = Some(format!("local-{n}"));
        m.body = Some(order_placed("evt-conc", "order-conc", 5000));
        e.records.push(m);
        e
    };
    let (a, b, c) = tokio::join!(
        system.deliver(&*intake, event(1)),
        system.deliver(&*intake, event(2)),
        system.deliver(&*intake, event(3))
    );
    for r in [a, b, c] {
        assert!(r.batch_item_failures.is_empty(), "{r:?}");
    }
    waiting_on(&system, "order-seq", 0).await;
    waiting_on(&system, "order-conc", 0).await;
    // Every delivery handled before counting: the intake queue holds nothing, in flight or not.
    eventually("the intake queue to drain", WAIT, || async {
        (system.queue_depth("IntakeQueue").await == 0).then_some(())
    })
    .await;

    let executions = system.executions("order-review").await;
    assert_eq!(executions.len(), 2, "one per key: {executions:#?}");
    let tasks = system.published_tasks(2).await;
    let ids: Vec<&str> = tasks.iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(tasks.len(), 2, "{ids:?}");
    assert!(ids.contains(&"order-review/order-seq/g1/manual-review"));
    assert!(ids.contains(&"order-review/order-conc/g1/manual-review"));
    assert_eq!(system.metrics.count(Metric::WorkflowsStarted, None), 2);
    assert_eq!(system.metrics.count(Metric::DuplicateInputs, None), 4, "2 duplicates per key");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ineligible_event_creates_nothing_and_is_counted_with_its_reason() {
    let logs = baton_tests::logs::captured();
    let system = start_system(CONFIG).await;
    // Below the threshold: the pattern does not match.
    system.send_event(&order_placed("evt-small", "order-small", 10)).await;
    eventually("the not-eligible count", WAIT, || async {
        (system.metrics.count(Metric::NotEligible, None) == 1).then_some(())
    })
    .await;
    assert!(system.record("order-review", "order-small").await.is_none());
    assert!(system.executions("order-review").await.is_empty());
    assert!(system.drain_queue("IntakeDLQ").await.is_empty(), "not eligible is not poison");
    let line = logs
        .lines()
        .into_iter()
        .find(|l| l["fields"]["event_id"] == "evt-small")
        .expect("a log line about the ineligible event");
    assert!(line["fields"]["message"].as_str().unwrap().contains("not eligible"), "{line}");
    assert_eq!(line["fields"]["event_type"], "order.placed");
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_misses_its_deadline_ends_the_workflow_timed_out_with_the_metric() {
    // Ten seconds: long enough for the step to begin waiting first on a loaded machine (a
    // timeout before that ends a pending record timed out too, legally, but that is not this test).
    let config = CONFIG.replace("timeout: 1h\n      - name: payment", "timeout: 10s\n      - name: payment");
    let system = start_system(&config).await;
    system.send_event(&order_placed("evt-slow", "order-slow", 2000)).await;
    // The window the step waits in is short to catch from outside on a loaded machine, so the
    // record's own trail says it waited.
    let record = eventually("the timeout", WAIT, || async {
        system.record("order-review", "order-slow").await.filter(|r| r.state == State::TimedOut)
    })
    .await;
    let states: Vec<&str> = record.history.iter().map(|h| &*h.to).collect();
    assert_eq!(states, ["pending", "waiting{0}", "timed_out"], "the step waited, then timed out");
    assert_eq!(record.waits[0].outcome(), Some(WaitOutcome::TimedOut), "{:?}", record.waits);
    eventually("the timed-out metric", WAIT, || async {
        (system.metrics.count(Metric::WorkflowsTimedOut, Some("order-review")) == 1).then_some(())
    })
    .await;
    // The execution reports, then enters its Fail state.
    system.execution_ended("order-review", "FAILED").await;
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_goes_to_the_dlq_with_its_reason_and_nothing_else_is_lost() {
    let system = start_system(CONFIG).await;
    system.send_event("{ this is not json").await;
    system.send_event(&json!({"specversion": "1.0", "id": "x", "type": "order.placed"}).to_string()).await;
    system.send_event(&order_placed("evt-good", "order-good", 1500)).await;
    waiting_on(&system, "order-good", 0).await;

    eventually("two dead letters", WAIT, || async {
        (system.queue_depth("IntakeDLQ").await == 2).then_some(())
    })
    .await;
    let dead = system.drain_queue("IntakeDLQ").await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    let mut reasons: Vec<(String, String)> = dead
        .iter()
        .map(|m| {
            let attrs = m.message_attributes().expect("attributes");
            let get = |k: &str| attrs.get(k).and_then(|v| v.string_value()).unwrap_or_default().to_owned();
            (get(REASON_ATTRIBUTE), get(DETAIL_ATTRIBUTE))
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons[0].0, "missing_field");
    assert!(reasons[0].1.contains("`source`"), "{}", reasons[0].1);
    assert_eq!(reasons[1].0, "not_json");
    assert!(dead.iter().any(|m| m.body() == Some("{ this is not json")), "the original body is kept");
    assert_eq!(system.metrics.count(Metric::PoisonMessages, None), 2);
    system.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_terminal_state_on_restart_decides_whether_a_new_generation_opens() {
    let quick = CONFIG.replace("timeout: 1h\n      - name: payment", "timeout: 1s\n      - name: payment");
    for (policy, restarts) in [("after_terminal", true), ("never", false)] {
        let system =
            start_system(&quick.replace("on_restart: after_terminal", &format!("on_restart: {policy}")))
                .await;
        system.send_event(&order_placed("evt-a", "order-r", 1500)).await;
        eventually("generation 1 timed out", WAIT, || async {
            system.record("order-review", "order-r").await.filter(|r| r.state == State::TimedOut)
        })
        .await;
        system.send_event(&order_placed("evt-b", "order-r", 1500)).await;
        if restarts {
            let r = eventually("generation 2 waiting", WAIT, || async {
                system
                    .record("order-review", "order-r")
                    .await
                    .filter(|r| r.generation == 2 && r.state == State::Waiting { step: 0 })
            })
            .await;
            assert_eq!(r.start_events.len(), 2);
            let names: Vec<String> =
                system.executions("order-review").await.iter().map(|e| e.name().to_owned()).collect();
            assert_eq!(names.len(), 2, "{names:?}");
            assert!(names.iter().any(|n| n.ends_with("-g2")), "{names:?}");
        } else {
            let trace = eventually("the restart ledgered", WAIT, || async {
                let (w, k) = (
                    baton_core::domain::ids::WorkflowName::parse("order-review").unwrap(),
                    baton_core::domain::ids::CorrelationKey::parse("order-r").unwrap(),
                );
                let t = baton_core::ports::store::WorkflowStore::trace(&system.store, &w, &k).await.unwrap();
                t.ledger.iter().any(|l| l.reason == IgnoreReason::RestartNotAllowed).then_some(t)
            })
            .await;
            let entry = trace.ledger.iter().find(|l| l.reason == IgnoreReason::RestartNotAllowed).unwrap();
            assert_eq!(entry.input_id, "evt-b");
            assert_eq!(trace.record.unwrap().generation, 1);
            assert_eq!(system.executions("order-review").await.len(), 1);
        }
        system.stop().await;
    }
}

/// A report the progress function cannot use goes to the progress dead-letter queue with its
/// reason, and the reports around it are handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_progress_cannot_use_goes_to_its_dlq_with_the_reason() {
    let system = start_system(CONFIG).await;
    let version = baton_core::domain::config::Config::parse(CONFIG).expect("valid").version;
    let report = json!({"kind": "finished", "workflow": "no-such-workflow", "key": "k", "generation": 1,
        "config_version": version, "outcome": "succeeded"});
    system
        .sqs
        .send_message()
        .queue_url(system.queue_url("ProgressQueue"))
        .message_body(report.to_string())
        .send()
        .await
        .expect("send");
    system.send_event(&order_placed("evt-around", "order-around", 1500)).await;
    waiting_on(&system, "order-around", 0).await;
    let dead = eventually("the dead letter", WAIT, || async {
        let all = system.drain_queue("ProgressDLQ").await;
        (!all.is_empty()).then_some(all)
    })
    .await;
    assert_eq!(dead.len(), 1);
    let attrs = dead[0].message_attributes().expect("attributes");
    assert_eq!(attrs[REASON_ATTRIBUTE].string_value(), Some("unknown_workflow"));
    assert!(attrs[DETAIL_ATTRIBUTE].string_value().unwrap_or("").contains("no-such-workflow"));
    assert_eq!(dead[0].body(), Some(report.to_string().as_str()), "the original body is kept");
    system.stop().await;
}

/// A crash between the `pending` write and StartExecution: the sweeper finds the record still
/// pending after its grace period and starts the execution, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_start_execution_is_repaired_by_the_sweeper() {
    let system = start_system(CONFIG).await;
    let engine = system.engine();
    let workflow = engine.config.workflow("order-review").unwrap();
    let key = baton_core::domain::ids::CorrelationKey::parse("order-crash").unwrap();
    let start = baton_core::domain::lifecycle::Input::start(
        baton_core::domain::ids::EventId::parse("evt-crash").unwrap(),
    );
    let decision = baton_core::domain::lifecycle::decide(
        &workflow.plan(),
        (&workflow.name, &key),
        None,
        &start,
        engine.now(),
    );
    let write = decision.write.expect("a create");
    assert_eq!(
        baton_core::ports::store::WorkflowStore::apply(&system.store, &write).await.unwrap(),
        baton_core::ports::store::Applied::Written
    );
    assert!(system.executions("order-review").await.is_empty(), "crashed before StartExecution");

    let early = system
        .sweep(write.to.updated_at + baton_core::limits::RESTART_PENDING_AFTER - time::Duration::seconds(1))
        .await;
    assert_eq!(early.repaired, 0, "a start in flight is left alone");
    let due = write.to.updated_at + baton_core::limits::RESTART_PENDING_AFTER + time::Duration::seconds(1);
    assert_eq!(system.sweep(due).await.repaired, 1);
    waiting_on(&system, "order-crash", 0).await;
    assert_eq!(system.executions("order-review").await.len(), 1, "one execution");
    system.stop().await;
}
