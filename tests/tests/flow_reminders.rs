//! End to end, on the emulator: a step's task is reminded of while nobody answers it. The worker
//! ignores the first task and answers the reminder; the sweeper, run again after, sends no more.
//! A reminder is a task event of its own on the step's queue, naming the task it reminds of and
//! its count. An escalation gives the task to a second queue, whose worker answers it; the later
//! level never goes out.

use baton_core::domain::lifecycle::State;
use baton_tests::order_placed;
use baton_tests::system::{System, start_system};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

const CONFIG: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review {key}", queue: reviewers }
        requires: [decision]
        timeout: 2d
        remind: { after: 1h, every: 2h, times: 2 }
"#;

/// Starts the review for `key` and waits until it waits with its task out on the reviewers'
/// queue (read and dropped, as a worker that misses it): when its first notice is due, and the
/// task's id.
async fn waiting_with_its_task(system: &System, key: &str) -> (OffsetDateTime, String) {
    system.send_event(&order_placed(key)).await;
    let r = system
        .record_until("order-review", key, "waiting on review", |r| r.state == State::Waiting { step: 0 })
        .await;
    let first = r.wait(0).and_then(|w| w.notice_at).expect("the first notice's time");
    let tasks = system.published_tasks(1).await;
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    let (kind, queue) = (tasks[0]["type"].as_str(), tasks[0]["data"]["queue"].as_str());
    assert_eq!((kind, queue), (Some("baton.task.created"), Some("reviewers")));
    (first, tasks[0]["data"]["task_id"].as_str().expect("a task id").to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_missed_the_task_answers_its_reminder_and_no_more_go_out() {
    let system = start_system(CONFIG).await;
    let key = "k-remind";
    // The task goes out; its worker misses it (it reads and drops it).
    let (notice_at, task_id) = waiting_with_its_task(&system, key).await;
    let from_now = notice_at - OffsetDateTime::now_utc();
    assert!(from_now > Duration::minutes(59) && from_now <= Duration::hours(1), "{notice_at}");

    // Before its time, a sweep sends nothing; on time, the first reminder goes out.
    system.sweep(notice_at - Duration::seconds(1)).await;
    assert_eq!(system.record("order-review", key).await.and_then(|r| r.wait(0).map(|w| w.notified)), Some(0));
    let report = system.sweep(notice_at).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    let reminders = system.published_tasks(1).await;
    assert_eq!(reminders.len(), 1, "one reminder: {reminders:#?}");
    let reminder = &reminders[0];
    assert_eq!(reminder["type"], "baton.task.reminder", "{reminder}");
    assert_eq!(reminder["id"].as_str(), Some(format!("{task_id}/r1").as_str()), "{reminder}");
    assert_eq!(reminder["data"]["reminds"].as_str(), Some(task_id.as_str()), "{reminder}");
    assert_eq!(reminder["data"]["reminder"], 1, "{reminder}");
    assert_eq!(reminder["data"]["queue"], "reviewers", "{reminder}");

    // The worker answers the step the reminder names, as it would the task.
    let answer = json!({"workflow": reminder["data"]["workflow"], "key": reminder["data"]["key"],
        "step": reminder["data"]["step"], "outcome": "succeeded", "data": {"decision": "approve"}});
    system.answered("review-1", answer, (200, "applied")).await;
    system.record_until("order-review", key, "succeeded", |r| r.state == State::Succeeded).await;

    // The second reminder's time comes: nothing goes out.
    system.sweep(notice_at + Duration::hours(2)).await;
    let after: Vec<Value> = system
        .drain_queue(&system.task_queue("reviewers"))
        .await
        .into_iter()
        .filter_map(|m| serde_json::from_str(m.body()?).ok())
        .collect();
    assert!(after.is_empty(), "no reminder once answered: {after:#?}");
    system.stop().await;
}

const ESCALATED: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review {key}", queue: reviewers }
        requires: [decision]
        timeout: 2d
        escalate:
          - { after: 4h, queue: leads }
          - { after: 8h, queue: heads, title: "Overdue review of {key}" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_answered_by_the_second_queues_worker_completes_the_step_and_no_later_level_goes_out() {
    let system = start_system(ESCALATED).await;
    let key = "k-escalate";
    let (level_1_at, task_id) = waiting_with_its_task(&system, key).await;

    // The reviewers' worker misses it; at its time the task goes to the leads' queue as well.
    let report = system.sweep(level_1_at).await;
    assert_eq!(report.repaired, 1, "{report:?}");
    let escalated = system.published_tasks(1).await;
    assert_eq!(escalated.len(), 1, "{escalated:#?}");
    let lead = &escalated[0];
    assert_eq!(lead["type"], "baton.task.escalated", "{lead}");
    assert_eq!(lead["id"].as_str(), Some(format!("{task_id}/e1").as_str()), "{lead}");
    assert_eq!(
        (lead["data"]["escalates"].as_str(), lead["data"]["level"].as_u64()),
        (Some(task_id.as_str()), Some(1))
    );
    assert_eq!(lead["data"]["queue"], "leads", "on the leads' own queue: {lead}");

    // The leads' worker answers the step the task names, naming the level it holds: that
    // completes it. A level the step does not declare is refused first, by name.
    let answer = |level: u64| {
        json!({"workflow": lead["data"]["workflow"], "key": lead["data"]["key"], "step": lead["data"]["step"],
            "outcome": "succeeded", "data": {"decision": "approve"}, "level": level})
    };
    let (status, refused) = system.callback("lead-0", &answer(3)).await;
    assert_eq!(
        (status, refused["error"].as_str(), refused["field"].as_str()),
        (400, Some("invalid_body"), Some("level"))
    );
    system.answered("lead-1", answer(1), (200, "applied")).await;
    system.record_until("order-review", key, "succeeded", |r| r.state == State::Succeeded).await;

    // The second level's time comes: nothing goes out, to anyone.
    system.sweep(level_1_at + Duration::hours(4)).await;
    for queue in ["reviewers", "leads", "heads"] {
        let left = system.drain_queue(&system.task_queue(queue)).await;
        assert!(left.is_empty(), "nothing more on {queue}: {left:?}");
    }
    system.stop().await;
}
