//! Simulated SQS, and Lambda's event source mapping over it.
//!
//! What baton relies on, and what the model does:
//! - at-least-once delivery, in any order: a receive takes visible messages in seeded order;
//! - the visibility timeout: a received message is invisible until it passes, then comes back
//!   (a crashed invocation never deletes it);
//! - `maxReceiveCount`: a message received more often than that is moved to the queue's
//!   dead-letter queue by the redrive policy, with no reason attached;
//! - partial batch failures: the mapping deletes only the messages the handler did not report.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use baton::sqs::{
    DETAIL_ATTRIBUTE, DeadLetterError, DeadLetterQueue, REASON_ATTRIBUTE, SOURCE_ATTRIBUTE, SqsHandler,
};
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
    pub fn send(
        &mut self,
        queue: QueueId,
        body: String,
        attributes: BTreeMap<String, String>,
        now: OffsetDateTime,
    ) -> String {
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
        });
        id
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
            m.visible_at = now + visibility;
            m.receipt = self.next;
            taken.push(m.clone());
        }
        redriven.sort_unstable();
        let moved: Vec<Message> = redriven.into_iter().rev().map(|i| q.messages.remove(i)).collect();
        if let Some(dlq) = dlq {
            for mut m in moved.into_iter().rev() {
                if m.handled + 1 < m.receive_count {
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

    /// Messages visible now.
    pub fn visible(&self, queue: QueueId, now: OffsetDateTime) -> usize {
        self.queues[&queue].messages.iter().filter(|m| m.visible_at <= now).count()
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

/// One invocation of a function by its event source mapping: receive a batch, hand it to the
/// handler, delete what the handler did not report as failed. Crashing it leaves the batch in
/// flight, to come back after the visibility timeout.
pub async fn invoke(
    world: Arc<World>,
    sqs: Arc<std::sync::Mutex<Sqs>>,
    queue: QueueId,
    handler: Arc<dyn SqsHandler>,
) {
    let now = world.now();
    let batch = {
        let mut order = |n: usize| world.below(n as u64) as usize;
        lock(&sqs).receive(queue, 10, now, &mut order)
    };
    if batch.is_empty() {
        return;
    }
    world.note(|| format!("  {queue:?} batch {:?}", batch.iter().map(|m| m.id.as_str()).collect::<Vec<_>>()));
    let response = handler.handle(event(&batch)).await;
    let failed: Vec<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    let mut sqs = lock(&sqs);
    for m in &batch {
        sqs.handled(queue, &m.id, m.receive_count);
        if !failed.contains(&m.id) {
            sqs.delete(queue, &m.id, m.receipt);
        }
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

/// A dead-letter queue as the handlers see it: the port, with a point and faults.
pub struct SimDeadLetters {
    pub world: Arc<World>,
    pub sqs: Arc<std::sync::Mutex<Sqs>>,
    pub queue: QueueId,
}

#[async_trait::async_trait]
impl DeadLetterQueue for SimDeadLetters {
    async fn send(&self, message: &SqsMessage, reason: &str, detail: &str) -> Result<(), DeadLetterError> {
        self.world.point("sqs.SendMessage(dlq)").await;
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
        lock(&self.sqs).send(
            self.queue,
            message.body.clone().unwrap_or_default(),
            attributes,
            self.world.now(),
        );
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
        let delay_seconds = baton::sqs::REQUEUE_DELAY_SECONDS;
        self.world.point("sqs.SendMessage(requeue)").await;
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
        let id = sqs.send(source, message.body.clone().unwrap_or_default(), BTreeMap::new(), now);
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
