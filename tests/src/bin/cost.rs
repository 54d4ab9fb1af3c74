//! `make cost`: K two-step workflows of the sample config (`order-review`), then K workflows
//! with a three-branch parallel group ([`GROUPED`]), on the local stack,
//! with the emulator counting every API call (`tools/emulator.py --count-calls`); prints, per
//! workflow, the calls by operation, Step Functions state transitions (from each execution's
//! history), DynamoDB units, SQS requests, Lambda invocations and HTTP API requests, and the
//! dollars per million workflows at on-demand prices (docs/COST.md).
//!
//! Each workflow: the start event; the review decision by callback; the payment by callback
//! (even workflows) or by a `payment.settled` event (odd ones). One workflow runs first,
//! uncounted, so that cold starts are not charged to the K. The sweeper's calls are left out
//! of the per-workflow figures (they are per schedule, not per workflow) and measured apart:
//! one idle sweep.

use std::collections::BTreeMap;

use baton_core::domain::lifecycle::State;
use baton_tests::cost::{self, Index, PerWorkflow, Units};
use baton_tests::system::{System, start_system};
use baton_tests::{Emulator, http};
use serde_json::{Value, json};

const SAMPLE: &str = include_str!("../../../infra/workflows.yaml");
const RUNNER: &str = "other";
const SWEEPER: &str = "SweeperFunction";
/// Messages in a full batch: template.yaml's `QueueBatchSize` default, Lambda's own default for
/// SQS, and the most it takes without a batching window.
const FULL_BATCH: f64 = 10.0;

/// The workflow with a three-branch parallel group `make cost` measures beside the two-step
/// one: a review, then fraud, credit and an optional address check side by side, then payment.
/// Named as the template's state machine is (each stack its own).
const GROUPED: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        requires: [decision]
        timeout: 2d
      - parallel:
          name: checks
          branches:
            - name: fraud-check
              requires: [fraud_score]
              timeout: 1d
            - name: credit-check
              requires: [credit_ok]
              timeout: 1d
            - name: address-check
              requires: [address_ok]
              timeout: 2h
              optional: true
      - name: payment
        requires: [payment_ref]
        timeout: 7d
"#;

/// The two-step workflow with bounded retry on its first step, which `make cost` measures with
/// one failed attempt before the success.
const RETRIED: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review order {key}", queue: risk-review }
        requires: [decision]
        timeout: 2d
        retry: { attempts: 3, backoff: 1s }
      - name: payment
        requires: [payment_ref]
        timeout: 7d
"#;

/// The two-step workflow whose review is an approval reminded of twice, an hour apart, and
/// escalated once between the two, before it is answered.
const REMINDED: &str = r#"
workflows:
  order-review:
    start:
      when: { type: ["order.placed"] }
      key: /subject
    steps:
      - name: manual-review
        task: { title: "Review order {key}", queue: risk-review }
        requires: [decision]
        timeout: 2d
        remind: { after: 1h, every: 1h, times: 2 }
        escalate: [{ after: 90m, queue: risk-leads }]
      - name: payment
        requires: [payment_ref]
        timeout: 7d
"#;

/// One workflow shape `make cost` measures.
#[derive(Clone, Copy)]
enum Shape {
    /// The sample config's two steps.
    TwoStep,
    /// [`GROUPED`]: a step, a three-branch group, a step.
    Grouped,
    /// [`RETRIED`]: two steps, the first failing once and succeeding on its second attempt.
    Retried,
    /// [`baton_tests::SAGA`]: the failure path, two compensations acknowledged.
    Compensated,
    /// [`REMINDED`]: two steps, the first answered after its two reminders and its escalation
    /// went out.
    Reminded,
}

impl Shape {
    fn workflow(self) -> &'static str {
        match self {
            Shape::TwoStep | Shape::Grouped | Shape::Retried | Shape::Compensated | Shape::Reminded => {
                "order-review"
            }
        }
    }

    fn config(self) -> &'static str {
        match self {
            Shape::TwoStep => SAMPLE,
            Shape::Grouped => GROUPED,
            Shape::Retried => RETRIED,
            Shape::Compensated => baton_tests::SAGA,
            Shape::Reminded => REMINDED,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Shape::TwoStep => "two-step workflows of order-review",
            Shape::Grouped => "workflows with a parallel group (a step, three branches side by side, a step)",
            Shape::Retried => {
                "two-step workflows whose first step fails once and succeeds on its second attempt"
            }
            Shape::Compensated => {
                "failures after two completed steps, both compensated (the failure path, per failure)"
            }
            Shape::Reminded => {
                "two-step workflows whose approval is answered after two reminders and one escalation"
            }
        }
    }

    /// Whether a call is this shape's work: not the runner's, and not the sweeper's, but for a
    /// retried step's next attempt, which the sweeper publishes (its writes and sends; its reads,
    /// the due index's query and the record's, are every sweep's, once a minute whatever the
    /// load, and left out as for the other shapes).
    fn counts(self, caller: &str, operation: &str) -> bool {
        match caller {
            RUNNER => false,
            SWEEPER => matches!(self, Shape::Retried | Shape::Reminded) && !operation.ends_with("Query"),
            _ => true,
        }
    }
}

#[tokio::main]
async fn main() {
    let workflows: u64 = std::env::args().nth(1).map_or(20, |k| k.parse().expect("K: a number of workflows"));
    measure(Shape::TwoStep, workflows).await;
    println!();
    measure(Shape::Grouped, workflows).await;
    println!();
    measure(Shape::Retried, workflows).await;
    println!();
    measure(Shape::Compensated, workflows).await;
    println!();
    measure(Shape::Reminded, workflows).await;
}

#[expect(clippy::too_many_lines, reason = "the cost model's report, figure by figure")]
async fn measure(shape: Shape, workflows: u64) {
    let emulator = Emulator::from_env();
    let calls_url = format!("{}/_baton/calls", emulator.endpoint);
    let system = start_system(shape.config()).await;
    let indexes = [Index { keys: vec!["due_kind".into(), "due_at".into()] }];
    let prefix = format!("cost-{}", std::process::id());

    run(shape, &system, &format!("{prefix}-warm"), 0).await;
    expect_ok(http::delete(&calls_url).await, "reset the counts");
    let mut keys = Vec::new();
    let mut load = Load::default();
    for i in 0..workflows {
        let key = format!("{prefix}-{i}");
        load += run(shape, &system, &key, i).await;
        keys.push(key);
    }
    let doc = expect_ok(http::get(&calls_url).await, "read the counts");

    let mut per = PerWorkflow { workflows, ..PerWorkflow::default() };
    let k = workflows as f64;
    let counted = cost::counts(&doc);
    for ((caller, operation), n) in &counted {
        if shape.counts(caller, operation) {
            *per.calls.entry(operation.clone()).or_default() += *n as f64 / k;
        }
    }
    let mut units = Units::default();
    let mut with_aws_tokens = Units::default();
    let mut largest_aws_record = 0;
    let mut by_item: BTreeMap<String, (f64, Units)> = BTreeMap::new();
    for call in doc["dynamodb"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let caller = call["caller"].as_str().unwrap_or_default();
        if shape.counts(caller, call["operation"].as_str().unwrap_or_default()) {
            let these = cost::units(call, &indexes);
            units += these;
            for modelled in cost::with_aws_tokens(call) {
                with_aws_tokens += cost::units(&modelled, &indexes);
                if let Some(after) = modelled.get("after").filter(|a| a["sk"]["S"] == "RECORD") {
                    let size = baton_aws::dynamodb::item_size(&cost::item_from_json(after));
                    largest_aws_record = largest_aws_record.max(size);
                }
            }
            let entry = by_item.entry(cost::item_kind(call)).or_default();
            entry.0 += 1.0 / k;
            entry.1 += these.per(k);
        }
    }
    // The record item at its largest (after the last step): what each record write is billed on.
    let record_sizes =
        doc["dynamodb"].as_array().map(Vec::as_slice).unwrap_or_default().iter().filter_map(|call| {
            let after = call.get("after").filter(|a| a["sk"]["S"] == "RECORD")?;
            Some(baton_aws::dynamodb::item_size(&cost::item_from_json(after)))
        });
    let largest_record = record_sizes.max().unwrap_or(0);
    per.dynamodb = units.per(k);
    // The event source mappings' receives that returned messages (the local mappings poll
    // untagged, as the runner does, but the runner receives nothing): one invocation each.
    let receives = counted.get(&(RUNNER.to_owned(), "sqs:ReceiveMessage (with messages)".to_owned()));
    let sqs_invocations = receives.copied().unwrap_or(0) as f64 / k;
    let sent = |n: u64| n as f64 / k;
    // SQS bills the functions' and state machines' sends, the producers' events, and for each
    // invocation its receive and its delete; the local poller's empty long polls are not AWS's.
    let sends = per.calls.get("sqs:SendMessage").copied().unwrap_or(0.0) + sent(load.events);
    per.sqs_requests = sends + 2.0 * sqs_invocations;
    per.queue_messages = sqs_invocations;
    per.http_requests = sent(load.callbacks);
    per.lambda_invocations = sqs_invocations + per.http_requests;
    per.handled = per.lambda_invocations;
    per.state_transitions = transitions(&system, shape.workflow(), &keys).await / k;

    print(shape, &per);
    println!("  DynamoDB by item and operation:   calls  table WCU  index WCU  RCU");
    for (item, (calls, u)) in &by_item {
        println!(
            "    {item:<30} {calls:>6.2} {:>10.2} {:>10.2} {:>4.2}",
            u.table_writes, u.index_writes, u.reads
        );
    }
    println!(
        "  record item at its largest: {largest_record} bytes ({} write units per record write)",
        cost::write_units(largest_record)
    );
    let aws = PerWorkflow { dynamodb: with_aws_tokens.per(k), ..per.clone() };
    println!(
        "  with AWS-length task tokens ({} characters, the API's limit; kept out of the record): record at its largest {} bytes, DynamoDB write units {:.2} (table) + {:.2} (index), read units {:.2}, total {:.2} dollars per million, {:.1}% above Step Functions",
        cost::AWS_TOKEN_CHARS,
        largest_aws_record,
        aws.dynamodb.table_writes,
        aws.dynamodb.index_writes,
        aws.dynamodb.reads,
        aws.total_per_million(),
        100.0 * aws.above_step_functions()
    );
    let (issue, aws_issue) = (per.as_issue_15_counted(sends), aws.as_issue_15_counted(sends));
    println!(
        "  counted as issue 15 counted its 25 % (table write units, reads, SQS sends, Lambda, HTTP API; not the index, nor the receives and deletes): {:.2} dollars per million, {:.1}% above Step Functions; with AWS-length task tokens {:.2}, {:.2}%",
        issue.total_per_million(),
        100.0 * issue.above_step_functions(),
        aws_issue.total_per_million(),
        100.0 * aws_issue.above_step_functions()
    );
    let busy = per.in_batches_of(FULL_BATCH);
    println!(
        "  on busy queues, every batch full ({FULL_BATCH} messages, QueueBatchSize's default; a receive, a delete and an invocation per batch): SQS requests {:.2}, Lambda invocations {:.2}, total {:.2} dollars per million, {:.1}% above Step Functions",
        busy.sqs_requests,
        busy.lambda_invocations,
        busy.total_per_million(),
        100.0 * busy.above_step_functions()
    );
    expect_ok(http::delete(&calls_url).await, "reset the counts");
    system.sweep(time::OffsetDateTime::now_utc()).await;
    let idle = expect_ok(http::get(&calls_url).await, "read the counts");
    let mut sweep: BTreeMap<String, u64> = BTreeMap::new();
    for ((caller, operation), n) in cost::counts(&idle) {
        if caller == SWEEPER {
            sweep.insert(operation, n);
        }
    }
    println!("one idle sweep (per schedule run, not per workflow): {sweep:?}");
    system.stop().await;
}

fn expect_ok(reply: http::Reply, what: &str) -> Value {
    assert_eq!(reply.status, 200, "{what}: {:?} (is the emulator running with --count-calls?)", reply.body);
    reply.body
}

/// What the runner sent: domain events to the intake queue, callbacks to the HTTP API.
#[derive(Default)]
struct Load {
    events: u64,
    callbacks: u64,
}

impl std::ops::AddAssign for Load {
    fn add_assign(&mut self, other: Load) {
        self.events += other.events;
        self.callbacks += other.callbacks;
    }
}

/// One workflow of `shape`, start to its end, as a user's systems drive it.
async fn run(shape: Shape, system: &System, key: &str, i: u64) -> Load {
    match shape {
        Shape::TwoStep => run_two_step(system, key, i).await,
        Shape::Grouped => run_grouped(system, key).await,
        Shape::Retried => run_retried(system, key).await,
        Shape::Compensated => run_compensated(system, key).await,
        Shape::Reminded => run_reminded(system, key).await,
    }
}

/// A [`REMINDED`] workflow: nobody answers the review until the sweeper has published both its
/// reminders, an hour apart, and its escalation between them (the sweeps run as of those times);
/// then the lead answers it, and payment is answered.
async fn run_reminded(system: &System, key: &str) -> Load {
    let placed = json!({"specversion": "1.0", "id": format!("{key}-placed"), "source": "shop",
        "type": "order.placed", "subject": key, "data": {"total": 1500}});
    system.send_event(&placed.to_string()).await;
    let workflow = Shape::Reminded.workflow();
    wait_in(system, workflow, key, State::Waiting { step: 0 }).await;
    let first =
        system.record(workflow, key).await.and_then(|r| r.wait(0)?.notice_at).expect("a reminder due");
    for (n, at) in
        [(1, first), (2, first + time::Duration::minutes(30)), (3, first + time::Duration::hours(1))]
    {
        system.sweep(at).await;
        let behind = system.record(workflow, key).await.and_then(|r| r.wait(0).map(|w| w.notified));
        assert_eq!(behind, Some(n), "notice {n} went out");
    }
    let answer = |step: &str, data: Value| json!({"workflow": workflow, "key": key, "step": step, "outcome": "succeeded", "data": data});
    let (status, body) = system
        .callback(&format!("{key}-review"), &answer("manual-review", json!({"decision": "approve"})))
        .await;
    assert_eq!(status, 200, "{body}");
    wait_in(system, workflow, key, State::Waiting { step: 1 }).await;
    let (status, body) =
        system.callback(&format!("{key}-pay"), &answer("payment", json!({"payment_ref": "pay-1"}))).await;
    assert_eq!(status, 200, "{body}");
    wait_in(system, workflow, key, State::Succeeded).await;
    Load { events: 1, callbacks: 2 }
}

/// A [`baton_tests::SAGA`] workflow: reserve-stock and payment complete, shipping fails, and
/// the compensations of payment and then reserve-stock are acknowledged: it ends `compensated`.
async fn run_compensated(system: &System, key: &str) -> Load {
    baton_tests::compensated(system, key).await;
    Load { events: 1, callbacks: 5 }
}

/// A [`RETRIED`] workflow: the review fails once, the sweeper publishes its second attempt once
/// the backoff has passed, which succeeds; then payment.
async fn run_retried(system: &System, key: &str) -> Load {
    let placed = json!({"specversion": "1.0", "id": format!("{key}-placed"), "source": "shop",
        "type": "order.placed", "subject": key, "data": {"total": 1500}});
    system.send_event(&placed.to_string()).await;
    let workflow = Shape::Retried.workflow();
    wait_in(system, workflow, key, State::Waiting { step: 0 }).await;
    let answer = |outcome: &str, data: Value| {
        json!({"workflow": workflow, "key": key, "step": "manual-review", "outcome": outcome, "data": data,
            "error": (outcome == "failed").then_some("ReviewerUnavailable")})
    };
    let (status, body) = system.callback(&format!("{key}-review-1"), &answer("failed", json!({}))).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("waiting{0}")), "{body}");
    let due = system
        .record(workflow, key)
        .await
        .and_then(|r| r.wait(0).and_then(|w| w.task_due()))
        .expect("a second attempt due");
    system.sweep(due.max(time::OffsetDateTime::now_utc())).await;
    let record = system.record(workflow, key).await.expect("the record");
    let step = record.wait(0).expect("the step's wait");
    assert_eq!((step.attempt(), step.task_due()), (2, None), "the second attempt opened");
    let ok = answer("succeeded", json!({"decision": "approve"}));
    let (status, body) = system.callback(&format!("{key}-review-2"), &ok).await;
    assert_eq!(status, 200, "{body}");
    wait_in(system, workflow, key, State::Waiting { step: 1 }).await;
    let paid = json!({"workflow": workflow, "key": key, "step": "payment", "outcome": "succeeded",
        "data": {"payment_ref": "pay-1"}});
    let (status, body) = system.callback(&format!("{key}-pay"), &paid).await;
    assert_eq!(status, 200, "{body}");
    wait_in(system, workflow, key, State::Succeeded).await;
    Load { events: 1, callbacks: 3 }
}

/// A [`GROUPED`] workflow: each step and branch answered by callback; every fourth one's
/// optional branch fails, so it ends `degraded`.
async fn run_grouped(system: &System, key: &str) -> Load {
    let placed = json!({"specversion": "1.0", "id": format!("{key}-placed"), "source": "shop",
        "type": "order.placed", "subject": key, "data": {"total": 1500}});
    system.send_event(&placed.to_string()).await;
    let workflow = Shape::Grouped.workflow();
    wait_in(system, workflow, key, State::Waiting { step: 0 }).await;
    let degraded = key.ends_with('3') || key.ends_with('7');
    let answers = [
        ("manual-review", "succeeded", json!({"decision": "approve"})),
        ("fraud-check", "succeeded", json!({"fraud_score": 3})),
        ("credit-check", "succeeded", json!({"credit_ok": true})),
        ("address-check", if degraded { "failed" } else { "succeeded" }, json!({"address_ok": true})),
        ("payment", "succeeded", json!({"payment_ref": "pay-1"})),
    ];
    for (i, (step, outcome, data)) in answers.into_iter().enumerate() {
        match i {
            // Every branch parked on its token: a callback before its branch's `step_ready` is
            // buffered (202), a dearer path than the one measured here.
            1 => {
                system
                    .until(&format!("{key} every branch waiting"), || async {
                        let r = system.record(workflow, key).await?;
                        let open = r.branches().count() == 3 && r.branches().all(|b| b.token.is_some());
                        (r.state == State::Waiting { step: 1 } && open).then_some(())
                    })
                    .await;
            }
            4 => wait_in(system, workflow, key, State::Waiting { step: 4 }).await,
            _ => {}
        }
        let mut body =
            json!({"workflow": workflow, "key": key, "step": step, "outcome": outcome, "data": data});
        if outcome == "failed" {
            body["error"] = json!("AddressUnknown");
            body["cause"] = json!("no such street");
        }
        let (status, answer) = system.callback(&format!("{key}-{step}"), &body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let end = if degraded { State::Degraded } else { State::Succeeded };
    wait_in(system, workflow, key, end).await;
    Load { events: 1, callbacks: 5 }
}

/// A two-step workflow, start to `succeeded`.
async fn run_two_step(system: &System, key: &str, i: u64) -> Load {
    let event = |id: String, r#type: &str, data: Value| {
        json!({"specversion": "1.0", "id": id, "source": "shop", "type": r#type, "subject": key, "data": data})
            .to_string()
    };
    system.send_event(&event(format!("{key}-placed"), "order.placed", json!({"total": 1500}))).await;
    wait_for(system, key, State::Waiting { step: 0 }).await;
    let review = json!({"workflow": "order-review", "key": key, "step": "manual-review",
        "outcome": "succeeded", "data": {"decision": "approve"}});
    let (status, body) = system.callback(&format!("{key}-review"), &review).await;
    assert_eq!(status, 200, "{body}");
    wait_for(system, key, State::Waiting { step: 1 }).await;
    if i.is_multiple_of(2) {
        let paid = json!({"workflow": "order-review", "key": key, "step": "payment",
            "outcome": "succeeded", "data": {"payment_ref": "pay-1"}});
        let (status, body) = system.callback(&format!("{key}-paid"), &paid).await;
        assert_eq!(status, 200, "{body}");
    } else {
        system
            .send_event(&event(format!("{key}-settled"), "payment.settled", json!({"payment_ref": "pay-1"})))
            .await;
    }
    wait_for(system, key, State::Succeeded).await;
    let paid_by_event = u64::from(i % 2 == 1);
    Load { events: 1 + paid_by_event, callbacks: 2 - paid_by_event }
}

async fn wait_for(system: &System, key: &str, state: State) {
    wait_in(system, Shape::TwoStep.workflow(), key, state).await;
}

async fn wait_in(system: &System, workflow: &str, key: &str, state: State) {
    system
        .until(&format!("{key} {state:?}"), || async {
            system.record(workflow, key).await.filter(|r| r.state == state).map(|_| ())
        })
        .await;
}

/// The state transitions Step Functions bills these workflows' executions: one per state
/// entered, read from each execution's history.
async fn transitions(system: &System, workflow: &str, keys: &[String]) -> f64 {
    let mut total = 0;
    for execution in system.executions(workflow).await {
        if !keys.iter().any(|k| execution.name.contains(k.as_str())) {
            continue;
        }
        let history = system
            .sfn
            .get_execution_history()
            .execution_arn(&execution.execution_arn)
            .max_results(1000)
            .send()
            .await
            .expect("execution history");
        total += history.events.iter().filter(|e| e.r#type.as_str().ends_with("StateEntered")).count();
    }
    total as f64
}

fn print(shape: Shape, per: &PerWorkflow) {
    println!("{} {}, per workflow:", per.workflows, shape.title());
    println!("  API calls by operation (the functions' and the state machines'):");
    for (operation, n) in &per.calls {
        println!("    {operation:<32} {n:>6.2}");
    }
    let d = &per.dynamodb;
    println!("  Step Functions state transitions   {:>6.2}", per.state_transitions);
    println!("  DynamoDB write units (table)       {:>6.2}", d.table_writes);
    println!("  DynamoDB write units (index)       {:>6.2}", d.index_writes);
    println!("  DynamoDB read units                {:>6.2}", d.reads);
    println!("  SQS requests                       {:>6.2}", per.sqs_requests);
    println!("  Lambda invocations                 {:>6.2}", per.lambda_invocations);
    println!("  HTTP API requests                  {:>6.2}", per.http_requests);
    println!("  dollars per million workflows (on-demand, us-east-1, docs/COST.md):");
    for (service, d) in &per.dollars_per_million() {
        println!("    {service:<16} {d:>9.2}");
    }
    println!("    {:<16} {:>9.2}", "total", per.total_per_million());
    println!("  above Step Functions' own transitions: {:.1}%", 100.0 * per.above_step_functions());
}
