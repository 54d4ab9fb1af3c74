//! A local stand-in for Lambda's SQS event source mapping.
//!
//! It does what the mapping does, with the same handler code Lambda calls: long-polls the
//! queue for a batch (up to the template's `BatchSize`), hands it over as an `SqsEvent`, deletes
//! the messages the handler did not report in `batchItemFailures`, and leaves the failures to
//! reappear after the visibility timeout. Each batch has the function's timeout from the
//! template as its deadline, as on Lambda. The queue's redrive policy (from the template) moves a
//! message that keeps failing to its dead-letter queue after `maxReceiveCount`; SQS does that,
//! not this code.
//!
//! Like Lambda, it runs several batches of one queue at once ([`concurrency`]). Idle, it sits in
//! a 20-second long poll: no busy loop.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, MessageSystemAttributeName,
};
use tokio::sync::watch;
use tracing::{info, warn};

use baton_aws::sdk::{SDK_ATTEMPT_TIMEOUT, SDK_OPERATION_TIMEOUT};
use baton_core::domain::error::error_chain;
use baton_core::use_cases::batch::{SqsHandler, TimerDeadline};

/// Batches in flight at once for one queue: as many as Lambda starts with for a standard queue
/// (five), or fewer when the template's `ScalingConfig.MaximumConcurrency` says so. Lambda adds
/// more while messages wait; locally five keep both cores of a laptop busy, and a handler that
/// is wrong under concurrency shows it here as it would on AWS.
pub const LAMBDA_INITIAL_BATCHES: u32 = 5;

/// How many batches [`run`] keeps in flight for a mapping with this `MaximumConcurrency`. One,
/// when the visibility timeout is overridden below the function's timeout (the tests set 2 s, to
/// see redelivery soon): a message still being handled would become visible again, and a second
/// batch's poll would take it too, raising its receive count towards the dead-letter queue (seen
/// when throttled starts, retried with backoff, outlasted it). Lambda's mappings never meet this:
/// the template's visibility timeouts are six function timeouts.
pub fn concurrency(
    maximum_concurrency: Option<u32>,
    visibility_timeout: Option<i32>,
    timeout: Duration,
) -> u32 {
    if visibility_timeout.is_some_and(|v| u64::try_from(v).unwrap_or(0) < timeout.as_secs()) {
        return 1;
    }
    maximum_concurrency.map_or(LAMBDA_INITIAL_BATCHES, |m| m.clamp(1, LAMBDA_INITIAL_BATCHES))
}

/// One queue wired to one handler.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub queue_url: String,
    pub queue_arn: String,
    pub batch_size: i32,
    /// Long-poll wait, 1 to 20 seconds. Shorter stops faster; longer polls less.
    pub wait_seconds: i32,
    /// Overrides the queue's visibility timeout for received messages (tests use a short one to
    /// see redelivery without waiting minutes).
    pub visibility_timeout: Option<i32>,
    /// The function's timeout (template.yaml): each batch answers before it, as on Lambda.
    pub timeout: Duration,
    /// Batches in flight at once ([`concurrency`]).
    pub concurrency: u32,
}

/// Polls until `stop` turns true, with up to `mapping.concurrency` batches in flight (one long
/// poll at a time: a second poller would leave a second long poll open on the way out, and each
/// one still open takes a message, raises its receive count and hands it back, towards the
/// dead-letter queue). Errors talking to SQS are logged and retried after a pause. On the way
/// out it waits for the batches in flight, as Lambda lets an invocation finish.
pub async fn run(
    sqs: aws_sdk_sqs::Client,
    mapping: Mapping,
    handler: Arc<dyn SqsHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let wait = mapping.wait_seconds.clamp(0, 20);
    // A long poll holds the request open for `wait` seconds by design: its attempt may take
    // that much longer than the shared timeouts allow any other call.
    let long_poll = aws_sdk_sqs::config::Builder::default().timeout_config(
        aws_config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(SDK_ATTEMPT_TIMEOUT + Duration::from_secs(wait.unsigned_abs().into()))
            .operation_timeout(SDK_OPERATION_TIMEOUT + Duration::from_secs(wait.unsigned_abs().into()))
            .build(),
    );
    let mapping = Arc::new(mapping);
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        while in_flight.len() >= mapping.concurrency.max(1) as usize {
            tokio::select! {
                _ = in_flight.join_next() => {}
                _ = stop.changed() => break,
            }
        }
        if *stop.borrow() {
            while in_flight.join_next().await.is_some() {}
            return;
        }
        let mut receive = Box::pin(
            sqs.receive_message()
                .queue_url(&mapping.queue_url)
                .max_number_of_messages(mapping.batch_size.clamp(1, 10))
                .wait_time_seconds(wait)
                .set_visibility_timeout(mapping.visibility_timeout)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .customize()
                .config_override(long_poll.clone())
                .send(),
        );
        let received = tokio::select! {
            r = &mut receive => r,
            _ = stop.changed() => {
                // The long poll stays open on the queue's side until its wait ends, and may still
                // take messages: they are handed back, visible at once to whoever polls next,
                // not left invisible for the visibility timeout (`baton local`'s reload lost a
                // report for three minutes that way).
                let (sqs, url) = (sqs.clone(), mapping.queue_url.clone());
                tokio::spawn(async move {
                    if let Ok(out) = receive.await {
                        release(&sqs, &url, &out.messages.unwrap_or_default()).await;
                    }
                });
                while in_flight.join_next().await.is_some() {}
                return;
            }
        };
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                warn!(queue = %mapping.queue_url, error = %error_chain(&e), "cannot receive; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if !messages.is_empty() {
            in_flight.spawn(invoke(sqs.clone(), mapping.clone(), handler.clone(), messages));
        }
    }
}

/// One invocation: the batch handed to the handler, then the messages it did not report failed
/// deleted.
async fn invoke(
    sqs: aws_sdk_sqs::Client,
    mapping: Arc<Mapping>,
    handler: Arc<dyn SqsHandler>,
    messages: Vec<aws_sdk_sqs::types::Message>,
) {
    let event = to_event(&messages, &mapping.queue_arn);
    // Lambda's clock starts at the invocation: so does this one.
    let deadline = TimerDeadline::after(mapping.timeout);
    let response = handler.handle_within(event, &deadline).await;
    let failed: HashSet<String> =
        response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    let done: Vec<DeleteMessageBatchRequestEntry> = messages
        .iter()
        .filter(|m| m.message_id.as_ref().is_some_and(|id| !failed.contains(id)))
        .filter_map(|m| {
            DeleteMessageBatchRequestEntry::builder()
                .id(m.message_id.clone()?)
                .receipt_handle(m.receipt_handle.clone()?)
                .build()
                .ok()
        })
        .collect();
    if !failed.is_empty() {
        info!(queue = %mapping.queue_url, failed = failed.len(), "batch item failures left for redelivery");
    }
    if !done.is_empty()
        && let Err(e) =
            sqs.delete_message_batch().queue_url(&mapping.queue_url).set_entries(Some(done)).send().await
    {
        warn!(queue = %mapping.queue_url, error = %error_chain(&e), "cannot delete handled messages; they will be redelivered");
    }
}

/// Makes received messages visible again at once, unhandled.
async fn release(sqs: &aws_sdk_sqs::Client, queue_url: &str, messages: &[aws_sdk_sqs::types::Message]) {
    let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = messages
        .iter()
        .filter_map(|m| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(m.message_id.clone()?)
                .receipt_handle(m.receipt_handle.clone()?)
                .visibility_timeout(0)
                .build()
                .ok()
        })
        .collect();
    if entries.is_empty() {
        return;
    }
    let released = entries.len();
    match sqs.change_message_visibility_batch().queue_url(queue_url).set_entries(Some(entries)).send().await {
        Ok(_) => {
            info!(queue = %queue_url, released, "stopping: messages received on the way out handed back")
        }
        Err(e) => {
            warn!(queue = %queue_url, error = %error_chain(&e), "stopping: cannot hand back received messages; they reappear after the visibility timeout")
        }
    }
}

/// The event Lambda would build from these messages.
pub fn to_event(messages: &[aws_sdk_sqs::types::Message], queue_arn: &str) -> SqsEvent {
    let region = queue_arn.split(':').nth(3).unwrap_or("us-east-1").to_owned();
    let mut event = SqsEvent::default();
    for m in messages {
        let mut record = SqsMessage::default();
        record.message_id = m.message_id.clone();
        record.receipt_handle = m.receipt_handle.clone();
        record.body = m.body.clone();
        record.md5_of_body = m.md5_of_body.clone();
        record.attributes = m
            .attributes
            .as_ref()
            .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
            .unwrap_or_default();
        record.message_attributes = m
            .message_attributes
            .as_ref()
            .map(|attrs| {
                attrs
                    .iter()
                    .map(|(k, v)| {
                        let mut a = SqsMessageAttribute::default();
                        a.string_value = v.string_value.clone();
                        a.data_type = Some(v.data_type.clone());
                        (k.clone(), a)
                    })
                    .collect::<HashMap<_, _>>()
            })
            .unwrap_or_default();
        record.event_source = Some("aws:sqs".into());
        record.event_source_arn = Some(queue_arn.to_owned());
        record.aws_region = Some(region.clone());
        event.records.push(record);
    }
    event
}

#[cfg(test)]
mod tests {
    use baton_core::limits::{DEADLINE_RESERVE, FUNCTION_TIMEOUT, SWEEPER_TIMEOUT};
    use baton_core::use_cases::batch::{MAX_BATCH_SIZE, MAX_BATCHING_WINDOW};
    use serde_json::Value;

    use crate::template::Template;

    const TEMPLATE: &str = include_str!("../../template.yaml");

    /// A parameter's `MaxValue` in template.yaml.
    fn max_value(doc: &Value, parameter: &str) -> u64 {
        let max = &doc["Parameters"][parameter]["MaxValue"];
        max.as_u64()
            .or_else(|| max.as_str()?.parse().ok())
            .unwrap_or_else(|| panic!("{parameter} has a MaxValue"))
    }

    #[test]
    fn the_template_keeps_the_timeouts_and_batch_limits_the_deadline_budget_assumes() {
        let doc: Value = serde_saphyr::from_str(TEMPLATE).expect("template.yaml parses as YAML");
        let template = Template::parse(TEMPLATE).expect("template.yaml parses");
        // The batch size and window cannot be raised past what the budget carries.
        assert_eq!(max_value(&doc, "QueueBatchSize"), u64::from(MAX_BATCH_SIZE));
        let window = max_value(&doc, "QueueBatchingWindowSeconds");
        assert_eq!(window, MAX_BATCHING_WINDOW.as_secs());
        let sqs_functions: Vec<_> = template.functions.iter().filter(|f| !f.sqs_events.is_empty()).collect();
        assert!(sqs_functions.len() >= 2, "intake and progress are fed by SQS");
        // The lag a retried step's next attempt may take (ATTEMPT_OPEN_LAG, which `baton
        // validate` holds below a heartbeat) is reckoned on the sweeper's schedule.
        let sweeper =
            template.functions.iter().find(|f| f.logical_id == "SweeperFunction").expect("a sweeper");
        let every = sweeper.schedule_events.first().and_then(|s| crate::in_process::rate(&s.expression));
        assert_eq!(every, Some(baton_core::limits::SWEEP_INTERVAL), "the sweeper's schedule");
        // The leases in baton_core::limits are reckoned on these timeouts.
        for function in &template.functions {
            let expected =
                if function.logical_id == "SweeperFunction" { SWEEPER_TIMEOUT } else { FUNCTION_TIMEOUT };
            assert_eq!(u64::from(function.timeout_seconds), expected.as_secs(), "{}", function.logical_id);
        }
        for function in sqs_functions {
            let timeout = u64::from(function.timeout_seconds);
            // process_batch's reserve and const asserts are reckoned on this timeout.
            assert_eq!(timeout, FUNCTION_TIMEOUT.as_secs(), "{}", function.logical_id);
            assert!(timeout > DEADLINE_RESERVE.as_secs());
            for event in &function.sqs_events {
                assert!(event.report_batch_item_failures, "{}: partial batch responses", function.logical_id);
                let queue = template
                    .queues
                    .iter()
                    .find(|q| q.logical_id == event.queue_logical_id)
                    .expect("the event's queue is in the template");
                let visibility = u64::from(queue.visibility_timeout.unwrap_or(30));
                // A message held through the longest window and then five invocations (AWS's
                // six times the timeout) is not received again meanwhile.
                assert!(
                    visibility >= window + 5 * timeout,
                    "{}: visibility {visibility} s < window {window} s + 5 x {timeout} s",
                    queue.logical_id
                );
            }
        }
    }

    #[test]
    fn a_mapping_runs_five_batches_or_its_maximum_and_one_under_a_short_visibility() {
        use super::concurrency;
        let timeout = std::time::Duration::from_secs(30);
        assert_eq!(concurrency(None, None, timeout), 5);
        assert_eq!(concurrency(Some(20), None, timeout), 5);
        assert_eq!(concurrency(Some(2), None, timeout), 2);
        assert_eq!(concurrency(Some(0), None, timeout), 1);
        assert_eq!(concurrency(None, Some(180), timeout), 5, "the template's visibility: six timeouts");
        assert_eq!(concurrency(None, Some(2), timeout), 1, "a test's short visibility: one batch at a time");
    }
}
