//! SQS batches the way Lambda hands them over: per-message verdicts, partial batch failures, and
//! dead-lettering of messages that can never succeed.
//!
//! The rule: a message that fails for a reason that can pass (a throttle, an
//! outage) is reported in `batchItemFailures`, so SQS redelivers it after the visibility
//! timeout and, after `maxReceiveCount`, the redrive policy moves it to the dead-letter queue.
//! A message that can never succeed (unparseable, invalid) is sent to the dead-letter queue
//! straight away, with its reason in message attributes, and then acknowledged, so it does not
//! loop through retries first. If the dead-letter send itself fails, the message is reported as
//! failed: nothing is lost.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::future::{BoxFuture, Either, select};
use tracing::{error, info, warn};

use crate::domain::error::{Classified, error_chain};

use crate::limits::{ANSWER_MARGIN, DEADLINE_RESERVE, FUNCTION_TIMEOUT};
use crate::mutants::{self, Mutation};
use crate::ports::dead_letters::{DeadLetterQueue, REQUEUE_FAILED, RETRIES_EXHAUSTED, requeues};

/// What became of one message.
#[derive(Debug)]
pub enum Verdict {
    /// Handled: delete it.
    Done,
    /// It can never succeed: dead-letter it now with this reason (a stable code) and detail.
    Poison { reason: &'static str, detail: String },
    /// It may succeed later: leave it for redelivery. `throttled`: AWS refused for rate or
    /// quota, which says nothing about the message: it is never dead-lettered.
    Retry { error_type: &'static str, detail: String, throttled: bool },
}

impl Verdict {
    /// The verdict for a classified error: retry what may pass, dead-letter the rest.
    pub fn from_error<E: Classified + std::error::Error>(e: &E) -> Verdict {
        let detail = error_chain(e);
        if e.retryable() {
            Verdict::Retry { error_type: e.error_type(), detail, throttled: e.throttled() }
        } else {
            Verdict::Poison { reason: e.error_type(), detail }
        }
    }
}

/// A handler of SQS batches, as Lambda's event source mapping (or the local runtime) calls it.
#[async_trait::async_trait]
pub trait SqsHandler: Send + Sync {
    /// Handles a batch, answering before `deadline` (Lambda's, or the local runtime's timeout).
    async fn handle_within(&self, event: SqsEvent, deadline: &dyn Deadline) -> SqsBatchResponse;

    /// Handles a batch with no deadline: for tests and tools that drive a handler directly.
    /// Lambda, the local runtime and the simulation call [`SqsHandler::handle_within`].
    async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        self.handle_within(event, &NoDeadline).await
    }
}

/// How long an invocation has left before it is killed: Lambda's `Context::deadline`, the local
/// runtime's per-function timeout, or the simulation's virtual clock. A port, because the
/// simulation runs the handlers on its own executor, where no tokio timer ever fires.
pub trait Deadline: Send + Sync {
    /// The time left before the invocation is killed.
    fn remaining(&self) -> Duration;
    /// Completes once no more than `left` remains (at once if that is already so).
    fn down_to(&self, left: Duration) -> BoxFuture<'_, ()>;
}

/// A deadline on tokio's clock: Lambda's and the local runtime's (and a paused clock in tests).
#[derive(Debug, Clone, Copy)]
pub struct TimerDeadline {
    at: tokio::time::Instant,
}

impl TimerDeadline {
    /// The deadline `timeout` from now.
    pub fn after(timeout: Duration) -> Self {
        TimerDeadline { at: tokio::time::Instant::now() + timeout }
    }

    /// Lambda's deadline (`Context::deadline`: milliseconds since the Unix epoch) on this clock.
    pub fn from_epoch_millis(deadline_ms: u64) -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::after(Duration::from_millis(deadline_ms.saturating_sub(now_ms)))
    }
}

impl Deadline for TimerDeadline {
    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(tokio::time::Instant::now())
    }

    fn down_to(&self, left: Duration) -> BoxFuture<'_, ()> {
        let at = self.at.checked_sub(left).unwrap_or_else(tokio::time::Instant::now);
        Box::pin(tokio::time::sleep_until(at))
    }
}

/// No deadline at all (see [`SqsHandler::handle`]).
#[derive(Debug, Clone, Copy)]
pub struct NoDeadline;

impl Deadline for NoDeadline {
    fn remaining(&self) -> Duration {
        Duration::MAX
    }

    fn down_to(&self, _: Duration) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// What one message may take when its dependencies are well, for sizing batches: a start is
/// about five sequential calls of at most 50 ms at p99.
pub const MESSAGE_BUDGET: Duration = Duration::from_millis(250);

/// The most messages a batch may hold (template.yaml's `QueueBatchSize` `MaxValue`): what the
/// time before the reserve carries at [`MESSAGE_BUDGET`] each.
pub const MAX_BATCH_SIZE: u32 =
    ((FUNCTION_TIMEOUT.as_millis() - DEADLINE_RESERVE.as_millis()) / MESSAGE_BUDGET.as_millis()) as u32;

/// The longest batching window (template.yaml's `QueueBatchingWindowSeconds` `MaxValue`): the
/// received messages wait that long before the invocation, within their visibility timeout.
pub const MAX_BATCHING_WINDOW: Duration = Duration::from_secs(30);

/// The dead-letter reason of a message on its last receive that the deadline cut off and that
/// could not be sent back to its queue either (RUNBOOK.md).
pub const DEADLINE_REACHED: &str = "deadline_reached";

/// Is this the message's last receive before SQS's redrive policy takes it?
fn on_last_receive(message: &SqsMessage, max_receive_count: u32) -> bool {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n >= max_receive_count)
}

/// Runs `handle` on each message of the batch, in order, and reports the failures; answers
/// before `deadline`.
///
/// ```text
///  remaining:  30 s ───────────────── DEADLINE_RESERVE (5 s) ──── ANSWER_MARGIN (1 s) ── 0
///              take, settle, take, …  │ no new message; the one   │ unfinished ones     │ killed
///                                     │ in flight is given up     │ given back by here  │
/// ```
///
/// A message given up in flight may have made some of its writes: the use cases tolerate a
/// crash between two writes, and this is one. Every message not finished is reported in
/// `batchItemFailures`, except one on its last receive: that one is sent back to its queue as a
/// fresh copy, so that the redrive policy never dead-letters a message nobody looked at.
pub async fn process_batch<F, Fut>(
    event: SqsEvent,
    dead_letters: &dyn DeadLetterQueue,
    deadline: &dyn Deadline,
    handle: F,
) -> SqsBatchResponse
where
    F: Fn(SqsMessage) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let heed = !mutants::active(Mutation::IgnoreDeadline);
    let mut response = SqsBatchResponse::default();
    // Those on their last receive first: should the deadline cut the batch short, the others
    // are redelivered, and only the last-receive ones would need sending back, which a slow
    // dependency can leave undone (SQS then dead-letters them with no reason: found by the
    // simulation, in a crowd's batches). A standard queue promises no order anyway.
    let max = dead_letters.max_receive_count();
    let mut records = event.records;
    records.sort_by_key(|m| !on_last_receive(m, max));
    let mut records = records.into_iter();
    let mut unfinished = Vec::new();
    let mut in_flight = None;
    for message in records.by_ref() {
        if heed && deadline.remaining() <= DEADLINE_RESERVE {
            unfinished.push(message);
            break;
        }
        let settled = settle(message.clone(), dead_letters, &handle);
        let failed = if heed {
            // Polled first, so a message that finishes as the cut-off comes counts as finished.
            match select(pin!(settled), deadline.down_to(DEADLINE_RESERVE)).await {
                Either::Left((failed, _)) => failed,
                Either::Right(_) => {
                    in_flight = message.message_id.clone();
                    unfinished.push(message);
                    break;
                }
            }
        } else {
            settled.await
        };
        if let Some(id) = failed {
            response.add_failure(id);
        }
    }
    unfinished.extend(records);
    if !unfinished.is_empty() {
        give_back(unfinished, in_flight, dead_letters, deadline, &mut response).await;
    }
    response
}

/// Settles the messages the deadline left unfinished: each is reported for redelivery, or, on
/// its last receive, sent back to its queue (dead-lettered with [`DEADLINE_REACHED`] if that
/// fails); all by [`ANSWER_MARGIN`] before the deadline.
async fn give_back(
    unfinished: Vec<SqsMessage>,
    in_flight: Option<String>,
    dead_letters: &dyn DeadLetterQueue,
    deadline: &dyn Deadline,
    response: &mut SqsBatchResponse,
) {
    let left = unfinished.len();
    let remaining_ms = u64::try_from(deadline.remaining().as_millis()).unwrap_or(u64::MAX);
    let max = dead_letters.max_receive_count();
    let (last, others): (Vec<SqsMessage>, Vec<SqsMessage>) =
        unfinished.into_iter().partition(|m| on_last_receive(m, max));
    for m in &others {
        response.add_failure(m.message_id.clone().unwrap_or_default());
    }
    // Every send is polled at each wake, all of them at once: `FuturesUnordered` yields after
    // two of its futures wake themselves, which under a slow dependency let the answer margin
    // come before most sends had begun (found by the simulation, in a crowd's batches: nine
    // messages on their last receive, two sent at a time, seven never tried).
    let mut sends: Vec<(String, SendBack<'_>)> = last
        .iter()
        .map(|m| {
            (m.message_id.clone().unwrap_or_default(), SendBack::Going(Box::pin(send_back(m, dead_letters))))
        })
        .collect();
    let all_settled = std::future::poll_fn(|cx| {
        let mut going = false;
        for (_, send) in &mut sends {
            if let SendBack::Going(future) = send {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(true) => *send = SendBack::Landed,
                    std::task::Poll::Ready(false) => *send = SendBack::Failed,
                    std::task::Poll::Pending => going = true,
                }
            }
        }
        if going { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    });
    // Out of time: a send still under way may land, and the message is redelivered too. A
    // duplicate is safe; a message lost is not.
    let _ = select(pin!(all_settled), deadline.down_to(ANSWER_MARGIN)).await;
    let sent_back = sends.iter().filter(|(_, send)| matches!(send, SendBack::Landed)).count();
    let unsent: Vec<String> =
        sends.into_iter().filter(|(_, send)| !matches!(send, SendBack::Landed)).map(|(id, _)| id).collect();
    let unsent_count = unsent.len();
    for id in unsent {
        response.add_failure(id);
    }
    warn!(
        left,
        in_flight = in_flight.as_deref().unwrap_or(""),
        redelivered = others.len(),
        sent_back,
        unsent = unsent_count,
        remaining_ms,
        reserve_ms = u64::try_from(DEADLINE_RESERVE.as_millis()).unwrap_or(u64::MAX),
        "batch cut short by the invocation's deadline: messages left unfinished are redelivered \
         (those on their last receive sent back to their queue); a dependency is slow or the \
         batch is too large for the function's timeout"
    );
}

/// Where one message's send back stands.
enum SendBack<'a> {
    Going(BoxFuture<'a, bool>),
    Landed,
    Failed,
}

/// Sends a message the deadline cut off on its last receive back to its queue; if that fails,
/// dead-letters it with its reason. Whether either landed.
async fn send_back(message: &SqsMessage, dead_letters: &dyn DeadLetterQueue) -> bool {
    let id = message.message_id.as_deref().unwrap_or("");
    let Err(e) = dead_letters.requeue(message).await else { return true };
    let detail = format!(
        "the invocation's deadline came before it was finished, on its last receive, and {REQUEUE_FAILED} ({})",
        error_chain(&e)
    );
    match dead_letters.send(message, DEADLINE_REACHED, &detail).await {
        Ok(()) => {
            error!(message_id = %id, error = %error_chain(&e),
                "cut off by the deadline on its last receive and cannot be sent back to its queue; dead-lettered with its reason");
            true
        }
        Err(dead) => {
            error!(message_id = %id, error = %error_chain(&e), dead_letter_error = %error_chain(&dead),
                "cut off by the deadline on its last receive, and neither sent back nor dead-lettered; leaving it for redelivery");
            false
        }
    }
}

/// Handles one message and carries out its verdict: the id to report for redelivery, if any.
async fn settle<F, Fut>(message: SqsMessage, dead_letters: &dyn DeadLetterQueue, handle: &F) -> Option<String>
where
    F: Fn(SqsMessage) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let id = message.message_id.clone().unwrap_or_default();
    let mut verdict = handle(message.clone()).await;
    // On its last receive, a message failing for a reason that can pass is dead-lettered by
    // baton, with that reason, rather than moved there anonymously by the redrive policy:
    // every dead letter says why it is there.
    let receives = message.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse::<u32>().ok());
    let last = on_last_receive(&message, dead_letters.max_receive_count());
    // A throttle on the last receive is no reason to give up on the message: a copy goes back
    // to the queue, to be tried again once the rate allows (docs/SCALE.md). Only if that copy
    // cannot be sent is it dead-lettered, saying both.
    let mut requeue_failed = None;
    if let Verdict::Retry { error_type, detail, throttled: true } = &verdict
        && last
    {
        match dead_letters.requeue(&message).await {
            Ok(()) => {
                warn!(message_id = %id, error_type, error = %detail, requeues = requeues(&message) + 1,
                    "throttled on every receive; sent back to its queue");
                return None;
            }
            Err(e) => {
                error!(message_id = %id, error_type, error = %error_chain(&e),
                    "throttled on every receive and cannot be sent back to its queue; dead-lettering it");
                requeue_failed = Some(error_chain(&e));
            }
        }
    }
    if let Verdict::Retry { error_type, detail, .. } = &verdict
        && last
    {
        let receives = receives.unwrap_or(0);
        let detail = match &requeue_failed {
            None => format!("{error_type} on each of {receives} receives; the last: {detail}"),
            Some(e) => format!(
                "{error_type} on each of {receives} receives, and {REQUEUE_FAILED} ({e}); the last: {detail}"
            ),
        };
        verdict = Verdict::Poison { reason: RETRIES_EXHAUSTED, detail };
    }
    match verdict {
        Verdict::Done => None,
        Verdict::Retry { error_type, detail, .. } => {
            warn!(message_id = %id, error_type, error = %detail, "message failed; SQS will redeliver it");
            Some(id)
        }
        Verdict::Poison { reason, detail } => match dead_letters.send(&message, reason, &detail).await {
            Ok(()) => {
                info!(message_id = %id, reason, detail = %detail, "poison message moved to the dead-letter queue");
                None
            }
            Err(e) => {
                error!(message_id = %id, reason, error = %error_chain(&e), retryable = e.retryable,
                    "cannot dead-letter a poison message; leaving it for redelivery");
                Some(id)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::ports::dead_letters::DeadLetterError;

    /// What a handler's queue port was asked to do.
    #[derive(Default)]
    struct Recorded {
        dead: Mutex<Vec<String>>,
        requeued: Mutex<Vec<String>>,
        requeue_fails: bool,
        /// SQS does not answer the requeue at all (a slow dependency on the way out).
        requeue_hangs: bool,
        /// Each requeue yields once before it is sent, as a call under way does; `started`
        /// counts those begun.
        requeue_yields: bool,
        started: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl DeadLetterQueue for Recorded {
        async fn send(&self, message: &SqsMessage, reason: &str, _: &str) -> Result<(), DeadLetterError> {
            self.dead
                .lock()
                .unwrap()
                .push(format!("{}:{reason}", message.message_id.clone().unwrap_or_default()));
            Ok(())
        }
        async fn requeue(&self, message: &SqsMessage) -> Result<(), DeadLetterError> {
            if self.requeue_hangs {
                std::future::pending::<()>().await;
            }
            self.started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.requeue_yields {
                let mut yielded = false;
                std::future::poll_fn(|cx| {
                    if std::mem::replace(&mut yielded, true) {
                        return std::task::Poll::Ready(());
                    }
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                })
                .await;
            }
            if self.requeue_fails {
                return Err(DeadLetterError { retryable: true, source: "unavailable".into() });
            }
            self.requeued.lock().unwrap().push(message.message_id.clone().unwrap_or_default());
            Ok(())
        }
        fn max_receive_count(&self) -> u32 {
            5
        }
    }

    fn message(id: &str, receives: u32) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some(id.to_owned());
        m.body = Some("{}".to_owned());
        m.attributes.insert("ApproximateReceiveCount".to_owned(), receives.to_string());
        m
    }

    async fn run(port: &Recorded, messages: Vec<SqsMessage>, throttled: bool) -> Vec<String> {
        let mut event = SqsEvent::default();
        event.records = messages;
        let verdict =
            || Verdict::Retry { error_type: "store_throttled", detail: "slow down".into(), throttled };
        let response = process_batch(event, port, &NoDeadline, |_| async { verdict() }).await;
        response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
    }

    #[tokio::test]
    async fn a_throttle_on_the_last_receive_sends_the_message_back_never_to_the_dead_letter_queue() {
        let port = Recorded::default();
        let failed = run(&port, vec![message("early", 2), message("last", 5)], true).await;
        assert_eq!(failed, ["early"], "before the last receive, SQS redelivers it as for any retry");
        assert_eq!(*port.requeued.lock().unwrap(), ["last"], "on the last, a copy goes back to the queue");
        assert!(port.dead.lock().unwrap().is_empty(), "and nothing is dead-lettered");

        let port = Recorded { requeue_fails: true, ..Recorded::default() };
        let failed = run(&port, vec![message("last", 5)], true).await;
        assert!(failed.is_empty());
        assert_eq!(
            *port.dead.lock().unwrap(),
            ["last:retries_exhausted"],
            "a copy that cannot be sent: dead-lettered with its reason, not moved there without one"
        );

        let port = Recorded::default();
        let failed = run(&port, vec![message("last", 5)], false).await;
        assert!(failed.is_empty());
        assert_eq!(
            *port.dead.lock().unwrap(),
            ["last:retries_exhausted"],
            "an outage that lasts is dead-lettered, with why"
        );
        assert!(port.requeued.lock().unwrap().is_empty());
    }

    #[test]
    fn every_message_on_its_last_receive_is_sent_back_at_once_not_two_at_a_time() {
        // Given nine messages on their last receive left by the deadline, each send a call that
        // yields while under way (as every call does, and as a slow one does for long)
        let port = Recorded { requeue_yields: true, ..Recorded::default() };
        let last: Vec<SqsMessage> = (0..9).map(|i| message(&format!("last{i}"), 5)).collect();
        let mut response = SqsBatchResponse::default();
        let mut give = Box::pin(give_back(last, None, &port, &NoDeadline, &mut response));
        // When the give-back is polled once
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(give.as_mut().poll(&mut cx).is_pending());
        // Then every send has begun, not two of them (the answer margin may come before the
        // next poll: a send never begun leaves its message to be dead-lettered without a reason)
        assert_eq!(port.started.load(std::sync::atomic::Ordering::Relaxed), 9);
        // And once they land, all nine are back in their queue
        assert!(give.as_mut().poll(&mut cx).is_ready());
        assert_eq!(port.requeued.lock().unwrap().len(), 9);
        drop(give);
        assert!(response.batch_item_failures.is_empty());
    }

    /// What each message of [`lambda`]'s batches does, by its id: `slow…` takes 4 s, `hang…`
    /// waits for a dependency that never answers, `throttled…` is throttled; the rest are done.
    async fn by_id(message: SqsMessage) -> Verdict {
        let id = message.message_id.unwrap_or_default();
        if id.starts_with("slow") {
            tokio::time::sleep(Duration::from_secs(4)).await;
        } else if id.starts_with("hang") {
            std::future::pending::<()>().await;
        } else if id.starts_with("throttled") {
            return Verdict::Retry {
                error_type: "store_throttled",
                detail: "slow down".into(),
                throttled: true,
            };
        }
        Verdict::Done
    }

    /// Runs a batch as Lambda does: with the function's deadline, killed when it passes (`None`:
    /// no batch response at all). Else the ids reported for redelivery.
    async fn lambda(port: &Recorded, messages: Vec<SqsMessage>) -> Option<Vec<String>> {
        let mut event = SqsEvent::default();
        event.records = messages;
        let deadline = TimerDeadline::after(FUNCTION_TIMEOUT);
        let batch = process_batch(event, port, &deadline, by_id);
        let response = tokio::time::timeout(FUNCTION_TIMEOUT, batch).await.ok()?;
        assert!(
            deadline.remaining() >= ANSWER_MARGIN,
            "answered {:?} before the deadline",
            deadline.remaining()
        );
        Some(response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect())
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_slower_than_its_deadline_answers_in_time_and_reports_what_it_did_not_finish() {
        // Given ten messages of 4 s each, against a 30 s timeout
        let port = Recorded::default();
        let batch = (0..10).map(|i| message(&format!("slow{i}"), 1)).collect();
        // When Lambda runs the batch
        let failed = lambda(&port, batch).await;
        // Then six finish (24 s), the seventh is given up at the reserve, and the rest are
        // reported for redelivery: in time, with no message lost
        assert_eq!(
            failed.expect("a batch response before the deadline"),
            ["slow6", "slow7", "slow8", "slow9"]
        );
        assert!(port.dead.lock().unwrap().is_empty() && port.requeued.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dependency_that_never_answers_is_given_up_at_the_reserve() {
        let port = Recorded::default();
        let failed = lambda(&port, vec![message("hang", 1), message("after", 1)]).await;
        assert_eq!(failed.expect("a batch response before the deadline"), ["hang", "after"]);
    }

    #[tokio::test(start_paused = true)]
    async fn messages_on_their_last_receive_are_sent_back_never_dead_lettered_unread() {
        // Given a slow batch with some messages on their last receive
        let port = Recorded::default();
        let mut batch: Vec<SqsMessage> = (0..7).map(|i| message(&format!("slow{i}"), 1)).collect();
        batch.extend([message("last-a", 5), message("early", 3), message("last-b", 5)]);
        // When the deadline cuts the batch short
        let failed = lambda(&port, batch).await.expect("a batch response before the deadline");
        // Then those on their last receive were handled first, so none was left to send back;
        // the others are redelivered by SQS; nothing reaches the dead-letter queue
        assert_eq!(failed, ["slow6", "early"]);
        assert!(port.requeued.lock().unwrap().is_empty());
        assert!(port.dead.lock().unwrap().is_empty());

        // And one on its last receive that the deadline still cuts off (it hangs) goes back to
        // its queue as a fresh copy
        let port = Recorded::default();
        let failed = lambda(&port, vec![message("hang", 1), message("hang-last", 5)]).await;
        assert_eq!(failed.expect("a batch response before the deadline"), ["hang"]);
        assert_eq!(*port.requeued.lock().unwrap(), ["hang-last"]);

        // And a copy that cannot be sent is dead-lettered with its reason
        let port = Recorded { requeue_fails: true, ..Recorded::default() };
        let batch = vec![message("hang", 1), message("hang-last", 5)];
        let failed = lambda(&port, batch).await.expect("a batch response before the deadline");
        assert_eq!(failed, ["hang"]);
        assert_eq!(*port.dead.lock().unwrap(), ["hang-last:deadline_reached"]);

        // And a send that does not finish by the answer margin leaves the message for redelivery,
        // the batch still answered in time
        let port = Recorded { requeue_hangs: true, ..Recorded::default() };
        let failed = lambda(&port, vec![message("hang", 1), message("hang-last", 5)]).await;
        assert_eq!(failed.expect("a batch response before the deadline"), ["hang", "hang-last"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_message_behind_a_slow_one_is_still_sent_back_on_its_last_receive() {
        // Given a sustained slowdown: a first message that hangs, a throttled one on its last
        // receive behind it
        let port = Recorded::default();
        let failed = lambda(&port, vec![message("hang", 2), message("throttled", 5)]).await;
        // Then the throttled one is requeued, not killed with the batch and redriven unread
        assert_eq!(failed.expect("a batch response before the deadline"), ["hang"]);
        assert_eq!(*port.requeued.lock().unwrap(), ["throttled"]);
        assert!(port.dead.lock().unwrap().is_empty());
    }
}
