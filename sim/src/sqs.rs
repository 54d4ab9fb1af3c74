//! Simulated SQS, and Lambda's event source mapping over it.
//!
//! What baton relies on, and what the model does:
//! - at-least-once delivery, in any order: a receive takes visible messages in seeded order;
//! - the visibility timeout: a received message is invisible until it passes, then comes back
//!   (a crashed invocation never deletes it);
//! - `maxReceiveCount`: a message received more often than that is moved to the queue's
//!   dead-letter queue by the redrive policy, with no reason attached;
//! - partial batch failures: the mapping deletes only the messages the handler did not report;
//! - Lambda's limits: batches of up to the template's `QueueBatchSize` (`MaxValue`), gathered
//!   through a batching window of up to its `MaxValue` (the messages wait it out, invisible,
//!   before the invocation starts); the function's timeout, a deadline an invocation can run
//!   past, and is killed at (no batch response: every message of the batch comes back after
//!   the visibility timeout with its receive count raised); a message of more than 256 KiB,
//!   attributes counted, is refused.
//!
//! baton answers before the deadline (`baton_core::use_cases::batch::process_batch`): an SQS invocation killed by
//! its timeout while holding a batch is a violation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use baton_core::ports::dead_letters::{
    DETAIL_ATTRIBUTE, DeadLetterError, DeadLetterQueue, REASON_ATTRIBUTE, SOURCE_ATTRIBUTE,
};
use baton_core::use_cases::batch::SqsHandler;
use time::{Duration, OffsetDateTime};

use crate::world::{Fault, World, lock};

/// The queues of a baton stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueId {
    Intake,
    Progress,
    IntakeDlq,
    ProgressDlq,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub body: String,
    pub attributes: BTreeMap<String, String>,
    pub receive_count: u32,
    pub visible_at: OffsetDateTime,
    pub receipt: u64,
    /// The receive whose handler last returned (less than `receive_count`: the invocation died).
    pub handled: u32,
    /// The receive whose invocation Lambda killed at its timeout (baton's fault, not a crash).
    pub timed_out: u32,
}

/// Set on a message SQS redrove after an invocation died on its last receive: baton never got
/// to say why (RUNBOOK.md: a dead letter without `baton_reason`).
pub const DIED_ATTRIBUTE: &str = "sim:died_on_last_receive";
/// Set on a message whose own dead-letter send (with its reason) failed: SQS's redrive moves it
/// later, without one (RUNBOOK.md, the same).
pub const SEND_FAILED_ATTRIBUTE: &str = "sim:dead_letter_send_failed";

#[derive(Debug)]
pub struct Queue {
    pub messages: Vec<Message>,
    pub dlq: Option<QueueId>,
    pub max_receive_count: u32,
    pub visibility: Duration,
}

/// The queues, as the template declares them.
#[derive(Debug)]
pub struct Sqs {
    pub queues: BTreeMap<QueueId, Queue>,
    next: u64,
}

/// The template's `maxReceiveCount` and visibility timeout for the work queues.
pub const MAX_RECEIVE_COUNT: u32 = 5;
pub const VISIBILITY: Duration = Duration::seconds(180);

/// SQS's largest message: body, and each attribute's name, type and value.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// A message's size as SQS counts it (every attribute typed `String` here).
pub fn message_size(body: &str, attributes: &BTreeMap<String, String>) -> usize {
    body.len()
        + attributes.iter().map(|(name, value)| name.len() + "String".len() + value.len()).sum::<usize>()
}

/// SQS refused a send: the message is over [`MAX_MESSAGE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge(pub usize);

impl Default for Sqs {
    fn default() -> Self {
        let work = |dlq| Queue {
            messages: Vec::new(),
            dlq: Some(dlq),
            max_receive_count: MAX_RECEIVE_COUNT,
            visibility: VISIBILITY,
        };
        let dead =
            || Queue { messages: Vec::new(), dlq: None, max_receive_count: u32::MAX, visibility: VISIBILITY };
        Sqs {
            queues: BTreeMap::from([
                (QueueId::Intake, work(QueueId::IntakeDlq)),
                (QueueId::Progress, work(QueueId::ProgressDlq)),
                (QueueId::IntakeDlq, dead()),
                (QueueId::ProgressDlq, dead()),
            ]),
            next: 0,
        }
    }
}

impl Sqs {
    /// Sends a message that fits: for senders outside baton, whose messages are small.
    pub fn send(
        &mut self,
        queue: QueueId,
        body: String,
        attributes: BTreeMap<String, String>,
        now: OffsetDateTime,
    ) -> String {
        match self.try_send(queue, body, attributes, now) {
            Ok(id) => id,
            Err(TooLarge(size)) => panic!("a sender outside baton sent {size} bytes, over SQS's limit"),
        }
    }

    /// Sends a message, or refuses it as SQS does one over [`MAX_MESSAGE_BYTES`].
    pub fn try_send(
        &mut self,
        queue: QueueId,
        body: String,
        attributes: BTreeMap<String, String>,
        now: OffsetDateTime,
    ) -> Result<String, TooLarge> {
        let size = message_size(&body, &attributes);
        if size > MAX_MESSAGE_BYTES {
            return Err(TooLarge(size));
        }
        self.next += 1;
        let id = format!("m{}", self.next);
        let q = self.queues.get_mut(&queue).expect("a queue");
        q.messages.push(Message {
            id: id.clone(),
            body,
            attributes,
            receive_count: 0,
            visible_at: now,
            receipt: 0,
            handled: 0,
            timed_out: 0,
        });
        Ok(id)
    }

    /// Receives up to `max` visible messages, in the order `order` shuffles them into. A message
    /// past `maxReceiveCount` goes to the dead-letter queue instead, as the redrive policy does.
    pub fn receive(
        &mut self,
        queue: QueueId,
        max: usize,
        now: OffsetDateTime,
        order: &mut dyn FnMut(usize) -> usize,
    ) -> Vec<Message> {
        self.receive_held(queue, max, now, Duration::ZERO, order)
    }

    /// [`Sqs::receive`], for a batch the mapping's batching window has `held` that long already
    /// (their visibility timeout started then).
    pub fn receive_held(
        &mut self,
        queue: QueueId,
        max: usize,
        now: OffsetDateTime,
        held: Duration,
        order: &mut dyn FnMut(usize) -> usize,
    ) -> Vec<Message> {
        let q = self.queues.get_mut(&queue).expect("a queue");
        let mut visible: Vec<usize> =
            (0..q.messages.len()).filter(|&i| q.messages[i].visible_at <= now).collect();
        // A seeded shuffle: SQS gives no order.
        for i in (1..visible.len()).rev() {
            visible.swap(i, order(i + 1));
        }
        let (max_receive, visibility, dlq) = (q.max_receive_count, q.visibility, q.dlq);
        let mut taken = Vec::new();
        let mut redriven = Vec::new();
        for i in visible {
            if taken.len() >= max {
                break;
            }
            self.next += 1;
            let m = &mut q.messages[i];
            m.receive_count += 1;
            if m.receive_count > max_receive {
                redriven.push(i);
                continue;
            }
            m.visible_at = now + visibility - held;
            m.receipt = self.next;
            taken.push(m.clone());
        }
        redriven.sort_unstable();
        let moved: Vec<Message> = redriven.into_iter().rev().map(|i| q.messages.remove(i)).collect();
        if let Some(dlq) = dlq {
            for mut m in moved.into_iter().rev() {
                // Died on its last receive: a crash, not Lambda's timeout, which baton answers
                // before (the killed invocation is a violation of its own).
                if m.handled + 1 < m.receive_count && m.timed_out + 1 < m.receive_count {
                    m.attributes.insert(DIED_ATTRIBUTE.to_owned(), "true".to_owned());
                }
                m.visible_at = now;
                m.receive_count = 0;
                self.queues.get_mut(&dlq).expect("a dlq").messages.push(m);
            }
        }
        taken
    }

    /// Deletes a received message, if `receipt` is still its latest receipt.
    pub fn delete(&mut self, queue: QueueId, id: &str, receipt: u64) {
        let q = self.queues.get_mut(&queue).expect("a queue");
        q.messages.retain(|m| !(m.id == id && m.receipt == receipt));
    }

    /// Notes that Lambda killed the invocation holding receive `count` of a message.
    pub fn timed_out(&mut self, queue: QueueId, id: &str, count: u32) {
        if let Some(m) = self.queues.get_mut(&queue).and_then(|q| q.messages.iter_mut().find(|m| m.id == id))
        {
            m.timed_out = m.timed_out.max(count);
        }
    }

    /// Notes that the handler returned for receive `count` of a message.
    pub fn handled(&mut self, queue: QueueId, id: &str, count: u32) {
        if let Some(m) = self.queues.get_mut(&queue).and_then(|q| q.messages.iter_mut().find(|m| m.id == id))
        {
            m.handled = m.handled.max(count);
        }
    }

    /// Removes a message outright (an operator's delete from a dead-letter queue).
    pub fn remove(&mut self, queue: QueueId, id: &str) {
        self.queues.get_mut(&queue).expect("a queue").messages.retain(|m| m.id != id);
    }

    pub fn messages(&self, queue: QueueId) -> &[Message] {
        &self.queues[&queue].messages
    }

    /// Whether a message is visible now.
    pub fn any_visible(&self, queue: QueueId, now: OffsetDateTime) -> bool {
        self.queues[&queue].messages.iter().any(|m| m.visible_at <= now)
    }

    /// When the next invisible message becomes visible again.
    pub fn next_visible(&self, queue: QueueId, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.queues[&queue].messages.iter().map(|m| m.visible_at).filter(|&t| t > now).min()
    }
}

/// The event Lambda builds from received messages.
pub fn event(messages: &[Message]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for m in messages {
        let mut record = SqsMessage::default();
        record.message_id = Some(m.id.clone());
        record.receipt_handle = Some(m.receipt.to_string());
        record.body = Some(m.body.clone());
        record.attributes =
            HashMap::from([("ApproximateReceiveCount".to_owned(), m.receive_count.to_string())]);
        record.event_source = Some("aws:sqs".into());
        event.records.push(record);
    }
    event
}

/// One invocation of a function by its event source mapping: receive a batch (of up to the
/// template's largest, held through a window of up to its longest), hand it to the handler with
/// the invocation's `deadline`, delete what the handler did not report as failed. Crashing it
/// leaves the batch in flight, to come back after the visibility timeout; so does Lambda killing
/// it at its deadline, which is also a violation.
pub async fn invoke(
    world: Arc<World>,
    sqs: Arc<crate::world::Mutex<Sqs>>,
    queue: QueueId,
    handler: Arc<dyn SqsHandler>,
    violations: Arc<crate::world::Mutex<Vec<String>>>,
) {
    let now = world.now();
    // Lambda's clock starts with the invocation, as the executor's timeout does.
    let deadline = now + crate::world::FUNCTION_TIMEOUT;
    // Mostly the template's default of 10; now and then a larger batch, through a window.
    let (size, held) = if world.chance(0.2) {
        let window = Duration::seconds(
            world.below(baton_core::use_cases::batch::MAX_BATCHING_WINDOW.as_secs() + 1) as i64,
        );
        (world.below(u64::from(baton_core::use_cases::batch::MAX_BATCH_SIZE)) as usize + 1, window)
    } else {
        (10, Duration::ZERO)
    };
    let batch = {
        let mut order = |n: usize| world.below(n as u64) as usize;
        lock(&sqs).receive_held(queue, size, now, held, &mut order)
    };
    if batch.is_empty() {
        return;
    }
    world.note(|| format!("  {queue:?} batch {:?}", batch.iter().map(|m| m.id.as_str()).collect::<Vec<_>>()));
    let actor = world.actor().to_string();
    let mut watch =
        Unanswered { world: world.clone(), actor, sqs: sqs.clone(), queue, batch, deadline, violations };
    let limit = SimDeadline { world: world.clone(), at: deadline };
    let response = handler.handle_within(event(&watch.batch), &limit).await;
    let batch = std::mem::take(&mut watch.batch);
    let failed: Vec<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    let mut sqs = lock(&sqs);
    for m in &batch {
        sqs.handled(queue, &m.id, m.receive_count);
        if !failed.contains(&m.id) {
            sqs.delete(queue, &m.id, m.receipt);
        }
    }
}

/// A batch in the hands of an invocation that has not answered yet. Dropped so, past its
/// deadline, it was killed by Lambda's timeout: baton took no notice of its deadline.
struct Unanswered {
    world: Arc<World>,
    actor: String,
    sqs: Arc<crate::world::Mutex<Sqs>>,
    queue: QueueId,
    batch: Vec<Message>,
    deadline: OffsetDateTime,
    violations: Arc<crate::world::Mutex<Vec<String>>>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if self.batch.is_empty() || self.world.now() <= self.deadline {
            return;
        }
        let mut sqs = lock(&self.sqs);
        for m in &self.batch {
            sqs.timed_out(self.queue, &m.id, m.receive_count);
        }
        let ids: Vec<&str> = self.batch.iter().map(|m| m.id.as_str()).collect();
        lock(&self.violations).push(format!(
            "[batch_answers_before_its_deadline] {} was killed by Lambda's timeout (deadline {}) holding {ids:?}: no batch response, every message back with its receive count raised",
            self.actor,
            self.deadline.time()
        ));
    }
}

/// An invocation's deadline on the virtual clock. Its cut-offs are armed in the world, so that
/// no latency jumps past one unseen (`World::arm`).
pub struct SimDeadline {
    pub world: Arc<World>,
    pub at: OffsetDateTime,
}

impl baton_core::use_cases::batch::Deadline for SimDeadline {
    fn remaining(&self) -> std::time::Duration {
        (self.at - self.world.now()).try_into().unwrap_or(std::time::Duration::ZERO)
    }

    fn down_to(
        &self,
        left: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        let at = self.at - Duration::try_from(left).unwrap_or(Duration::MAX);
        Box::pin(CutOff { id: self.world.arm(at), world: self.world.clone(), at })
    }
}

/// A cut-off armed in the world until it is seen or dropped.
struct CutOff {
    world: Arc<World>,
    id: u64,
    at: OffsetDateTime,
}

impl std::future::Future for CutOff {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.world.now() >= self.at {
            self.world.disarm(self.id);
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

impl Drop for CutOff {
    fn drop(&mut self) {
        self.world.disarm(self.id);
    }
}

impl SimDeadLetters {
    /// Marks the source message: baton's own send for it failed, so a move by the redrive
    /// policy without a reason is expected (the checks allow it).
    fn mark_send_failed(&self, message: &SqsMessage) {
        let Some(id) = &message.message_id else { return };
        let mut sqs = lock(&self.sqs);
        for queue in [QueueId::Intake, QueueId::Progress] {
            if let Some(m) =
                sqs.queues.get_mut(&queue).and_then(|q| q.messages.iter_mut().find(|m| &m.id == id))
            {
                m.attributes.insert(SEND_FAILED_ATTRIBUTE.to_owned(), "true".to_owned());
            }
        }
    }
}

/// A requeue under way: dropped before it went out, its message is marked as one whose
/// send failed.
struct Unsent<'a> {
    dlq: &'a SimDeadLetters,
    message: Option<&'a SqsMessage>,
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.message {
            self.dlq.mark_send_failed(m);
        }
    }
}

/// A dead-letter queue as the handlers see it: the port, with a point and faults.
pub struct SimDeadLetters {
    pub world: Arc<World>,
    pub sqs: Arc<crate::world::Mutex<Sqs>>,
    pub queue: QueueId,
}

#[async_trait::async_trait]
impl DeadLetterQueue for SimDeadLetters {
    async fn send(&self, message: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError> {
        // Given up on at the invocation's deadline before it went out (a requeue that failed,
        // then this send, both slow): as for a requeue dropped so.
        let mut unsent = Unsent { dlq: self, message: Some(message) };
        self.world.point("sqs.SendMessage(dlq)").await;
        unsent.message = None;
        let fault = self.world.fault("sqs.SendMessage(dlq)");
        let unavailable = || DeadLetterError { retryable: true, source: "injected: SQS unavailable".into() };
        if matches!(fault, Fault::Before | Fault::Throttled) {
            self.mark_send_failed(message);
            return Err(unavailable());
        }
        let mut attributes = BTreeMap::from([
            (REASON_ATTRIBUTE.to_owned(), reason.to_owned()),
            (DETAIL_ATTRIBUTE.to_owned(), detail.chars().take(1024).collect()),
        ]);
        if let Some(id) = &message.message_id {
            attributes.insert(SOURCE_ATTRIBUTE.to_owned(), id.clone());
        }
        let body = message.body.clone().unwrap_or_default();
        if let Err(TooLarge(size)) = lock(&self.sqs).try_send(self.queue, body, attributes, self.world.now())
        {
            return Err(too_large(size));
        }
        match fault {
            Fault::After => {
                // The reasoned copy landed, but the function does not know: it fails the
                // receive, and on the last one the redrive policy moves the original too, by
                // when an operator's replay may have taken the copy.
                self.mark_send_failed(message);
                Err(unavailable())
            }
            _ => Ok(()),
        }
    }

    async fn requeue(&self, message: &SqsMessage) -> Result<(), DeadLetterError> {
        let delay_seconds = baton_core::ports::dead_letters::REQUEUE_DELAY_SECONDS;
        // A send the invocation gives up on at its deadline (the future dropped before it went
        // out): the message comes back, and on its last receive SQS's redrive moves it without
        // a reason, as for a failed dead-letter send.
        let mut unsent = Unsent { dlq: self, message: Some(message) };
        self.world.point("sqs.SendMessage(requeue)").await;
        unsent.message = None;
        let fault = self.world.fault("sqs.SendMessage(requeue)");
        let unavailable = || DeadLetterError { retryable: true, source: "injected: SQS unavailable".into() };
        if matches!(fault, Fault::Before | Fault::Throttled) {
            return Err(unavailable());
        }
        let source = match self.queue {
            QueueId::IntakeDlq => QueueId::Intake,
            QueueId::ProgressDlq => QueueId::Progress,
            other => other,
        };
        // The copy becomes visible after the delay, as SQS's DelaySeconds makes it.
        let now = self.world.now();
        let mut sqs = lock(&self.sqs);
        let count = (baton_core::ports::dead_letters::requeues(message) + 1).to_string();
        let attributes =
            BTreeMap::from([(baton_core::ports::dead_letters::REQUEUES_ATTRIBUTE.to_owned(), count)]);
        let id = match sqs.try_send(source, message.body.clone().unwrap_or_default(), attributes, now) {
            Ok(id) => id,
            Err(TooLarge(size)) => return Err(too_large(size)),
        };
        if let Some(copy) =
            sqs.queues.get_mut(&source).and_then(|q| q.messages.iter_mut().find(|m| m.id == id))
        {
            copy.visible_at = now + time::Duration::seconds(i64::from(delay_seconds));
        }
        drop(sqs);
        match fault {
            Fault::After => Err(unavailable()),
            _ => Ok(()),
        }
    }

    fn max_receive_count(&self) -> u32 {
        MAX_RECEIVE_COUNT
    }
}

/// SQS's answer to a message over its limit: a client error, never retried.
fn too_large(size: usize) -> DeadLetterError {
    DeadLetterError {
        retryable: false,
        source: format!("InvalidParameterValue: message of {size} bytes, attributes counted, is longer than {MAX_MESSAGE_BYTES}").into(),
    }
}

#[cfg(test)]
mod tests {
    use baton_core::use_cases::batch::Deadline;

    use super::*;

    fn world() -> Arc<World> {
        World::new(1, OffsetDateTime::from_unix_timestamp(crate::EPOCH).expect("a time"), false)
    }

    #[test]
    fn a_message_over_256_kib_with_its_attributes_is_refused_as_sqs_refuses_it() {
        let (mut sqs, now) = (Sqs::default(), OffsetDateTime::UNIX_EPOCH);
        let fits = "x".repeat(MAX_MESSAGE_BYTES - 20);
        assert!(sqs.try_send(QueueId::IntakeDlq, fits.clone(), BTreeMap::new(), now).is_ok());
        let reason = BTreeMap::from([(REASON_ATTRIBUTE.to_owned(), "malformed_event".to_owned())]);
        let over = sqs.try_send(QueueId::IntakeDlq, fits, reason, now);
        assert_eq!(over, Err(TooLarge(MAX_MESSAGE_BYTES - 20 + "baton_reasonStringmalformed_event".len())));
        assert_eq!(sqs.messages(QueueId::IntakeDlq).len(), 1, "the refused one is not there");
    }

    #[test]
    fn no_latency_jumps_past_an_armed_cut_off_until_its_racer_sees_it() {
        // Given an invocation racing its work against a cut-off 5 s before its deadline
        let world = world();
        let start = world.now();
        let deadline = SimDeadline { world: world.clone(), at: start + Duration::seconds(30) };
        let mut cut = deadline.down_to(std::time::Duration::from_secs(5));
        // When a slow call would take the clock past it
        world.advance(Duration::seconds(40));
        // Then the clock stops at the cut-off, the racer sees it, and time goes on
        assert_eq!(world.now(), start + Duration::seconds(25));
        assert_eq!(deadline.remaining(), std::time::Duration::from_secs(5));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(cut.as_mut().poll(&mut cx).is_ready());
        world.advance(Duration::seconds(40));
        assert_eq!(world.now(), start + Duration::seconds(65));
        assert_eq!(deadline.remaining(), std::time::Duration::ZERO);
        // And a cut-off dropped unseen (its racer finished first) stops nothing
        drop(deadline.down_to(std::time::Duration::from_secs(1)));
        let deadline = SimDeadline { world: world.clone(), at: world.now() + Duration::seconds(30) };
        drop(deadline.down_to(std::time::Duration::from_secs(5)));
        world.advance(Duration::seconds(40));
        assert_eq!(world.now(), start + Duration::seconds(105));
    }
}
