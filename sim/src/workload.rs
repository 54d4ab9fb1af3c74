//! What happens in a schedule, chosen by the seed: the inputs from outside (event producers,
//! callback senders, operators) and how hard the faults strike.
//!
//! Senders behave as Standard Webhooks senders do: each attempt signed afresh with the same
//! `webhook-id`, and a 5xx, a timeout or a dropped connection retried after a pause. Producers
//! send duplicates; some inputs come before their step waits, some after the end; a few reuse an
//! id with another payload.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Poll;

use baton_core::domain::ids::payload_hash;
use baton_core::domain::ids::{CorrelationKey, EventId};
use baton_core::domain::lifecycle::{Input, State};
use baton_core::use_cases::replay::{self, Classification, Origin};
use http::HeaderMap;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

use crate::sqs::QueueId;
use crate::world::{ActorKind, Mutex, Rates, World, lock, sleep_until};
use crate::{SECRET, Stack};

/// One event a producer sends (possibly several times).
#[derive(Debug, Clone)]
pub struct EventSend {
    pub at: Duration,
    pub body: String,
    pub copies: u32,
}

/// One callback a sender delivers.
#[derive(Debug, Clone)]
pub struct CallbackSend {
    pub at: Duration,
    pub id: String,
    pub key: String,
    pub step: String,
    pub body: Value,
    /// The published task it answers, for a task worker's answer (`crate::workers`).
    pub task: Option<TaskRef>,
}

/// The task a worker's answer is for, as the outbound queue delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub id: String,
    pub attempt: u32,
    pub generation: u32,
    pub published_at: OffsetDateTime,
}

/// A schedule's workload and fault settings.
#[derive(Debug, Clone)]
pub struct Plan {
    pub keys: Vec<String>,
    pub events: Vec<EventSend>,
    pub callbacks: Vec<CallbackSend>,
    pub cancels: Vec<(Duration, String)>,
    /// Operators' `baton cancel --compensate` of the `saga` workflow.
    pub compensating_cancels: Vec<(Duration, String)>,
    pub replays: Vec<Duration>,
    pub sweeps: Vec<Duration>,
    pub rates: Rates,
    pub cursed: Option<String>,
    /// When the cursed key turns bad (after its record exists, usually).
    pub cursed_from: Duration,
    pub horizon: Duration,
    /// The keys of the schedule's crowd (`crate::CROWD_WORKFLOW`), if it has one.
    pub crowd: Vec<String>,
    /// The crowd's events, sent by one producer in order of time.
    pub crowd_events: Vec<EventSend>,
    /// Executions stopped from the console, outside baton: when, and whose (workflow, key).
    pub console_stops: Vec<(Duration, String, String)>,
    /// The (workflow, key) whose first execution's final report is lost (dropped past the DLQ).
    pub lost_reports: Vec<(String, String)>,
    /// Once everything has settled, the clock jumps this far (past the receipts' and the
    /// inbox's TTLs, so DynamoDB's TTL deletes them at some time after), and these event
    /// bodies arrive once more, late.
    pub long_jump: Option<(Duration, Vec<String>)>,
}

fn event(id: &str, kind: &str, key: &str, data: Value) -> String {
    let event =
        json!({"specversion": "1.0", "id": id, "source": "sim", "type": kind, "subject": key, "data": data});
    serde_json::to_string(&event).expect("a value's JSON")
}

impl Plan {
    #[expect(clippy::too_many_lines, reason = "one workload's actions drawn in turn from the seed")]
    pub fn generate(world: &World) -> Plan {
        let mut rng = lock(&world.rng);
        let keys: Vec<String> = (0..rng.range(1, 3)).map(|i| format!("k{i}")).collect();
        let mut plan = Plan {
            keys: keys.clone(),
            events: Vec::new(),
            callbacks: Vec::new(),
            cancels: Vec::new(),
            compensating_cancels: Vec::new(),
            replays: Vec::new(),
            sweeps: Vec::new(),
            rates: Rates::default(),
            cursed: None,
            cursed_from: Duration::ZERO,
            horizon: Duration::minutes(25),
            long_jump: None,
            crowd: Vec::new(),
            crowd_events: Vec::new(),
            console_stops: Vec::new(),
            lost_reports: Vec::new(),
        };
        let minute = |rng: &mut crate::rng::Rng| Duration::seconds(rng.range(0, 20 * 60));
        for key in &keys {
            // Start events: one, sometimes a second (a restart), each delivered up to 3 times.
            let starts = if rng.chance(0.3) { 2 } else { 1 };
            let first_start = Duration::seconds(rng.range(0, 120));
            for s in 0..starts {
                let at = if s == 0 { first_start } else { minute(&mut rng) + Duration::minutes(10) };
                let body = event(&format!("start-{key}-{s}"), "order.placed", key, json!({}));
                plan.events.push(EventSend { at, body, copies: rng.range(1, 3) as u32 });
            }
            // The review step: callbacks (partial, complete, heartbeat, failure) or an event.
            let big = rng.chance(0.1);
            let reviews = if big { rng.range(3, 8) } else { rng.range(1, 3) };
            for n in 0..reviews {
                let id = format!("cb-{key}-r{n}");
                let outcome = match rng.below(10) {
                    0 => "failed",
                    1 | 2 => "in_progress",
                    _ => "succeeded",
                };
                // Large partial data, from several callbacks of one step, in some schedules.
                let data = match rng.below(4) {
                    _ if big && n + 1 < reviews => json!({format!("part{n}"): "x".repeat(60 * 1024)}),
                    0 => json!({"note": format!("partial {n}")}),
                    _ => json!({"decision": if rng.chance(0.5) { "approve" } else { "reject" }}),
                };
                let outcome = if big && n + 1 < reviews { "succeeded" } else { outcome };
                let mut body = json!({"workflow": "review", "key": key, "step": "manual-review", "outcome": outcome, "data": data});
                if outcome == "failed" {
                    body["error"] = json!("Rejected");
                    body["cause"] = json!("the reviewer said no");
                }
                // Some right at the start: racing the step's first wait.
                let at = if rng.chance(0.4) {
                    first_start + Duration::seconds(rng.range(0, 8))
                } else {
                    minute(&mut rng)
                };
                plan.callbacks.push(CallbackSend {
                    at,
                    id: id.clone(),
                    key: key.clone(),
                    step: "manual-review".into(),
                    task: None,
                    body: body.clone(),
                });
                // The same webhook-id again: a duplicate, or rarely another payload.
                if rng.chance(0.3) {
                    let mut again = body.clone();
                    if rng.chance(0.2) {
                        again["data"] = json!({"decision": "changed my mind"});
                    }
                    let at = minute(&mut rng);
                    plan.callbacks.push(CallbackSend {
                        at,
                        id,
                        key: key.clone(),
                        step: "manual-review".into(),
                        task: None,
                        body: again,
                    });
                }
            }
            // A burst of partial callbacks right as the workflow starts: each races the step's
            // first wait (the inbox handshake's hardest case).
            if rng.chance(0.4) {
                for b in 0..rng.range(2, 5) {
                    let body = json!({"workflow": "review", "key": key, "step": "manual-review", "outcome": "succeeded",
                        "data": {format!("note{b}"): "early"}});
                    let at = first_start + Duration::milliseconds(rng.range(0, 4000));
                    plan.callbacks.push(CallbackSend {
                        at,
                        id: format!("cb-{key}-burst{b}"),
                        key: key.clone(),
                        step: "manual-review".into(),
                        task: None,
                        body,
                    });
                }
            }
            if rng.chance(0.3) {
                let body =
                    event(&format!("review-{key}"), "review.done", key, json!({"decision": "approve"}));
                plan.events.push(EventSend { at: minute(&mut rng), body, copies: rng.range(1, 2) as u32 });
            }
            // The payment step: events (duplicated) or a callback.
            if rng.chance(0.7) {
                let body = event(
                    &format!("pay-{key}"),
                    "payment.settled",
                    key,
                    json!({"payment_ref": format!("p-{key}")}),
                );
                plan.events.push(EventSend { at: minute(&mut rng), body, copies: rng.range(1, 3) as u32 });
            } else {
                let body = json!({"workflow": "review", "key": key, "step": "payment", "outcome": "succeeded",
                    "data": {"payment_ref": "p-cb"}});
                plan.callbacks.push(CallbackSend {
                    at: minute(&mut rng),
                    id: format!("cb-{key}-pay"),
                    key: key.clone(),
                    step: "payment".into(),
                    task: None,
                    body,
                });
            }
            // An event two steps accept.
            if rng.chance(0.2) {
                let body = event(
                    &format!("note-{key}"),
                    "order.note",
                    key,
                    json!({"decision": "approve", "payment_ref": "p-note"}),
                );
                plan.events.push(EventSend { at: minute(&mut rng), body, copies: 1 });
            }
            // The audit workflow's only step.
            if rng.chance(0.6) {
                let body = json!({"workflow": "audit", "key": key, "step": "check", "outcome": "succeeded", "data": {"ok": true}});
                plan.callbacks.push(CallbackSend {
                    at: minute(&mut rng),
                    id: format!("cb-{key}-audit"),
                    key: key.clone(),
                    step: "check".into(),
                    task: None,
                    body,
                });
            }
            // An event reusing an id with another payload.
            if rng.chance(0.1) {
                let body = event(
                    &format!("pay-{key}"),
                    "payment.settled",
                    key,
                    json!({"payment_ref": "a different one"}),
                );
                plan.events.push(EventSend { at: minute(&mut rng), body, copies: 1 });
            }
            if rng.chance(0.15) {
                plan.cancels.push((minute(&mut rng), key.clone()));
            }
        }
        for _ in 0..rng.range(0, 2) {
            plan.replays.push(minute(&mut rng) + Duration::minutes(5));
        }
        for _ in 0..rng.range(1, 6) {
            plan.sweeps.push(minute(&mut rng));
        }
        // How hard faults strike: calm, light or heavy.
        let level = [0.0, 0.005, 0.015, 0.04][rng.below(4) as usize];
        // A crash is per point, and a batch passes a hundred points: a few in a thousand.
        plan.rates = Rates {
            before: level,
            after: level / 2.0,
            retried: level / 2.0,
            crash: level / 20.0,
            latency: level * 2.0,
            throttled: level,
        };
        if rng.chance(0.25) {
            let days = Duration::days(rng.range(8, 45));
            let late = plan.events.iter().filter(|_| rng.chance(0.3)).map(|e| e.body.clone()).collect();
            plan.long_jump = Some((days, late));
        }
        if rng.chance(0.08) && keys.len() > 1 {
            plan.cursed = Some(keys[rng.below(keys.len() as u64) as usize].clone());
            plan.cursed_from = Duration::seconds(rng.range(0, 15 * 60));
        }
        plan
    }
}

impl Plan {
    /// The senders of the `checks` workflow's parallel group ([`crate::GROUP_WORKFLOW`]), drawn
    /// from `rng`: for each key, its first step's callback, then each branch's answer (mostly a
    /// success; some fail, some never come, so that a required branch fails or times out the
    /// workflow and the optional one leaves it degraded), heartbeats, duplicates and early
    /// answers, and (`ship`) the last step's callback.
    pub fn add_groups(&mut self, rng: &mut crate::rng::Rng, ship: bool) {
        let keys = self.keys.clone();
        let minute = |rng: &mut crate::rng::Rng| Duration::seconds(rng.range(0, 20 * 60));
        for key in &keys {
            let send = |plan: &mut Plan,
                        rng: &mut crate::rng::Rng,
                        step: &'static str,
                        outcome: &str,
                        data: Value| {
                let n = plan.callbacks.len();
                let mut body =
                    json!({"workflow": "checks", "key": key, "step": step, "outcome": outcome, "data": data});
                if outcome == "failed" {
                    body["error"] = json!("CheckFailed");
                    body["cause"] = json!(format!("{step} said no"));
                }
                // Some right at the start: before the group (or the workflow) is reached.
                let at = if rng.chance(0.25) { Duration::seconds(rng.range(0, 60)) } else { minute(rng) };
                let id = format!("cb-{key}-{step}-{n}");
                let step = step.to_owned();
                plan.callbacks.push(CallbackSend {
                    at,
                    id: id.clone(),
                    key: key.clone(),
                    step: step.clone(),
                    body: body.clone(),
                    task: None,
                });
                if rng.chance(0.25) {
                    let at = minute(rng);
                    plan.callbacks.push(CallbackSend { at, id, key: key.clone(), step, body, task: None });
                }
            };
            let intake_outcome = if rng.chance(0.05) { "failed" } else { "succeeded" };
            send(self, rng, "intake-review", intake_outcome, json!({"seen": true}));
            match rng.below(20) {
                0 | 1 => send(self, rng, "fraud", "failed", json!({})),
                2 => {}
                _ => {
                    let score = rng.range(0, 100);
                    send(self, rng, "fraud", "succeeded", json!({ "score": score }));
                }
            }
            match rng.below(10) {
                0..=4 => {
                    let body =
                        event(&format!("credit-{key}"), "credit.checked", key, json!({"credit_ok": true}));
                    self.events.push(EventSend { at: minute(rng), body, copies: rng.range(1, 3) as u32 });
                }
                5..=8 => send(self, rng, "credit", "succeeded", json!({"credit_ok": true})),
                _ => {}
            }
            if rng.chance(0.3) {
                send(self, rng, "address", "in_progress", json!({"checked": "street"}));
            }
            match rng.below(10) {
                0..=4 => send(self, rng, "address", "succeeded", json!({"address_ok": true})),
                5 | 6 => send(self, rng, "address", "failed", json!({})),
                _ => {}
            }
            if ship {
                send(self, rng, "ship", "succeeded", json!({"tracking": format!("t-{key}")}));
            }
        }
    }

    /// The senders of the `retried` workflow ([`crate::RETRY_WORKFLOW`]) that no task names:
    /// `close`'s callback, some minutes on (early ones wait in the inbox). Its retried steps'
    /// tasks are answered by task workers (`crate::workers`), as they go out.
    pub fn add_retries(&mut self, rng: &mut crate::rng::Rng) {
        let keys = self.keys.clone();
        for key in &keys {
            let close = json!({"workflow": "retried", "key": key, "step": "close", "outcome": "succeeded",
                "data": {"closed": true}});
            let at = Duration::seconds(rng.range(5 * 60, 45 * 60));
            self.resend_sometimes(rng, key, "close", close, at);
        }
    }

    /// The approvers of the `audit` workflow's `check` step when it asks for two of three
    /// ([`crate::QUORUM_CHECK`]), drawn from `rng`: for each key, `ok2` and `ok3` approve now
    /// and then (beside `ok`, sent with the plan's own senders), and one in three withdraws
    /// (`ok2: null`), which must not count.
    /// Gives each start event a `data.cool_until` for a timer until it to read: mostly a time a
    /// few minutes after the event is sent (`start` is the schedule's clock at zero), some long
    /// past, some later than the timer's timeout lets it wait, some a number it cannot read.
    pub fn date_starts(&mut self, rng: &mut crate::rng::Rng, start: OffsetDateTime) {
        use time::format_description::well_known::Rfc3339;
        for send in self.events.iter_mut().filter(|e| e.body.contains("\"order.placed\"")) {
            let Ok(mut body) = serde_json::from_str::<Value>(&send.body) else { continue };
            let time = |t: OffsetDateTime| json!(t.format(&Rfc3339).unwrap_or_default());
            let until = match rng.below(20) {
                0..=13 => time(start + send.at + Duration::seconds(rng.range(0, 6 * 60))),
                14 | 15 => time(start - Duration::hours(1)),
                16 => time(start + send.at + Duration::hours(2)),
                _ => json!(1_800_000_000),
            };
            body["data"]["cool_until"] = until;
            send.body = body.to_string();
        }
    }

    pub fn add_quorum(&mut self, rng: &mut crate::rng::Rng) {
        let keys = self.keys.clone();
        for key in &keys {
            let approve = |name: &str, value: Value| json!({"workflow": "audit", "key": key, "step": "check", "outcome": "succeeded", "data": {name: value}});
            for (name, chance) in [("ok2", 0.6), ("ok3", 0.4)] {
                if rng.chance(chance) {
                    let at = Duration::seconds(rng.range(0, 15 * 60));
                    self.resend_sometimes(rng, key, "check", approve(name, json!(true)), at);
                }
            }
            if rng.chance(0.35) {
                let at = Duration::seconds(rng.range(0, 15 * 60));
                self.resend_sometimes(rng, key, "check", approve("ok2", Value::Null), at);
            }
        }
    }

    /// A callback sent at `at`, and again (the same webhook-id) in one case in five.
    fn resend_sometimes(
        &mut self,
        rng: &mut crate::rng::Rng,
        key: &str,
        step: &str,
        body: Value,
        at: Duration,
    ) {
        let id = format!("cb-{key}-{step}-{}", self.callbacks.len());
        let step = step.to_owned();
        let send = CallbackSend { at, id, key: key.to_owned(), step, body, task: None };
        if rng.chance(0.2) {
            let again = CallbackSend { at: at + Duration::seconds(rng.range(0, 4 * 60)), ..send.clone() };
            self.callbacks.push(again);
        }
        self.callbacks.push(send);
    }

    /// The senders of the `saga` workflow ([`crate::SAGA_WORKFLOW`]) that no task names, drawn
    /// from `rng`: for each key, `reserve`'s callback, the group's (`charge` mostly, `points`
    /// often), and `ship`'s, mostly a failure, so that what completed is compensated; now and
    /// then an operator's cancel with --compensate instead. The compensations' tasks are
    /// acknowledged by task workers (`crate::workers`), as they go out.
    pub fn add_sagas(&mut self, rng: &mut crate::rng::Rng) {
        let keys = self.keys.clone();
        for key in &keys {
            let start = Duration::seconds(rng.range(0, 3 * 60));
            let step = |outcome: &str, data: Value, name: &str| {
                let mut body =
                    json!({"workflow": "saga", "key": key, "step": name, "outcome": outcome, "data": data});
                if outcome == "failed" {
                    body["error"] = json!("NoCarrier");
                    body["cause"] = json!("no carrier takes it");
                }
                body
            };
            let reserved = start + Duration::seconds(rng.range(0, 4 * 60));
            let hold = step("succeeded", json!({"hold": "h"}), "reserve");
            self.resend_sometimes(rng, key, "reserve", hold, reserved);
            let settled = reserved + Duration::seconds(rng.range(30, 6 * 60));
            if rng.chance(0.9) {
                let charged = step("succeeded", json!({"charge_ref": "c"}), "charge");
                self.resend_sometimes(rng, key, "charge", charged, settled);
            }
            if rng.chance(0.6) {
                let at = settled + Duration::seconds(rng.range(0, 60));
                let points = step("succeeded", json!({"points": 10}), "points");
                self.resend_sometimes(rng, key, "points", points, at);
            }
            let shipped = settled + Duration::seconds(rng.range(60, 6 * 60));
            if rng.chance(0.15) {
                self.compensating_cancels.push((shipped, key.clone()));
            } else {
                let outcome = if rng.chance(0.85) { "failed" } else { "succeeded" };
                let ship = step(outcome, json!({"tracking": "t"}), "ship");
                self.resend_sometimes(rng, key, "ship", ship, shipped);
            }
        }
    }

    /// A crowd of 140 to 220 records of the `crowd` workflow ([`crate::CROWD_WORKFLOW`]), drawn
    /// from `rng`: each started by its own event in the first four minutes, enrolled (mostly) and
    /// welcomed by events a minute or two apart (or not: it times out, and its enrolment is
    /// compensated); and four in five to nearly all of them stuck by what happens
    /// outside baton, one way for the whole crowd: its executions stopped from the console
    /// while they wait (the records wait past their deadlines), its final reports lost past the
    /// DLQ (the records stay advancing), or its executions stopped while they compensate.
    pub fn add_crowd(&mut self, rng: &mut crate::rng::Rng) {
        #[derive(Clone, Copy, PartialEq)]
        enum Stuck {
            Waiting,
            Reported,
            Compensating,
        }
        let n = rng.range(140, 220);
        let share = rng.range(80, 97) as f64 / 100.0;
        let how = *rng.pick(&[Stuck::Waiting, Stuck::Reported, Stuck::Compensating]);
        let welcomed = if how == Stuck::Compensating { 0.1 } else { 0.8 };
        for i in 0..n {
            let key = format!("c{i}");
            let joined = Duration::seconds(rng.range(0, 4 * 60));
            let body = event(&format!("join-{key}"), "member.joined", &key, json!({}));
            self.crowd_events.push(EventSend { at: joined, body, copies: 1 });
            let enrolled = joined + Duration::seconds(rng.range(20, 3 * 60));
            if rng.chance(0.95) {
                let body = event(&format!("enrol-{key}"), "member.enrolled", &key, json!({"enrolled": true}));
                self.crowd_events.push(EventSend { at: enrolled, body, copies: 1 });
            }
            if rng.chance(welcomed) {
                let at = enrolled + Duration::seconds(rng.range(20, 3 * 60));
                let body =
                    event(&format!("welcome-{key}"), "member.welcomed", &key, json!({"welcomed": true}));
                self.crowd_events.push(EventSend { at, body, copies: 1 });
            }
            if rng.chance(share) {
                match how {
                    Stuck::Waiting => {
                        let at = joined + Duration::seconds(rng.range(10, 4 * 60));
                        self.console_stops.push((at, "crowd".into(), key.clone()));
                    }
                    Stuck::Reported => self.lost_reports.push(("crowd".into(), key.clone())),
                    Stuck::Compensating => {
                        let at = joined + Duration::seconds(rng.range(9 * 60, 20 * 60));
                        self.console_stops.push((at, "crowd".into(), key.clone()));
                    }
                }
            }
            self.crowd.push(key);
        }
        self.crowd_events.sort_by_key(|e| e.at);
    }

    /// Every event the plan sends: its producers', then the crowd's.
    pub fn all_events(&self) -> impl Iterator<Item = &EventSend> {
        self.events.iter().chain(&self.crowd_events)
    }

    /// Adds, in some schedules, inputs that AWS's limits bite on, drawn from `rng` (a generator
    /// of their own, so the rest of a seed's schedule stays what it was): event ids of up to 256
    /// characters, four bytes each (a DynamoDB sort key holds 1,024 bytes);
    /// failure callbacks whose `error` or `cause` pass Step Functions' 256 and 32,768
    /// characters; and events with payloads of a hundred kilobytes and more.
    pub fn add_limits(&mut self, rng: &mut crate::rng::Rng) {
        let keys = self.keys.clone();
        let when = |rng: &mut crate::rng::Rng| Duration::seconds(rng.range(0, 20 * 60));
        for key in &keys {
            if rng.chance(0.1) {
                // An event id of 240 to 252 four-byte characters: 964 to 1,012 bytes, across
                // the 1,024 bytes of a sort key once a receipt's, an inbox entry's or a ledger
                // entry's prefix is on it. (A webhook-id is a header: ASCII only.)
                let id = format!("p{key}-{}", "😀".repeat(rng.range(240, 252) as usize));
                let body = event(&id, "payment.settled", key, json!({"payment_ref": "p-long-id"}));
                self.events.push(EventSend { at: when(rng), body, copies: rng.range(1, 2) as u32 });
            }
            if rng.chance(0.1) {
                let (error, cause) = match rng.below(3) {
                    0 => ("E".repeat(rng.range(257, 300) as usize), "c".to_owned()),
                    1 => ("Rejected".to_owned(), "c".repeat(rng.range(32_769, 33_000) as usize)),
                    _ => ("E".repeat(256), "c".repeat(32_768)),
                };
                let body = json!({"workflow": "review", "key": key, "step": "manual-review", "outcome": "failed",
                    "data": {}, "error": error, "cause": cause});
                let id = format!("cb-{key}-longfail");
                self.callbacks.push(CallbackSend {
                    at: when(rng),
                    id,
                    key: key.clone(),
                    step: "manual-review".into(),
                    task: None,
                    body,
                });
            }
            if rng.chance(0.03) {
                let size = rng.range(100, 200) as usize * 1024;
                let body = event(
                    &format!("pay-{key}-big"),
                    "payment.settled",
                    key,
                    json!({"payment_ref": "p-big", "blob": "x".repeat(size)}),
                );
                self.events.push(EventSend { at: when(rng), body, copies: 1 });
            }
        }
    }
}

/// What the senders and operators saw, for the checks.
#[derive(Debug, Default)]
pub struct Evidence {
    pub attempts: Vec<Attempt>,
    pub cancels: Vec<Cancelled>,
    /// The callbacks task workers sent, as they chose them (the plan's are in the plan).
    pub callbacks: Vec<CallbackSend>,
}

/// One callback attempt and its answer (`None`: no answer: a crash or the sender's timeout).
#[derive(Debug, Clone)]
pub struct Attempt {
    pub id: String,
    pub hash: String,
    pub key: String,
    pub workflow: String,
    pub step: String,
    /// The published task it answered (a task worker's answer).
    pub task: Option<TaskRef>,
    pub answer: Option<(u16, Value)>,
    pub facts: Facts,
}

/// What the store held about an input at the moment its answer was given.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The record's history names the input as a transition's cause, or its `applied` list has
    /// it.
    pub in_record: bool,
    pub inbox: bool,
    pub ledger: bool,
    /// A receipt for the id with another payload.
    pub other_receipt: bool,
    /// The record's generation and the attempt running at the callback's step (its
    /// compensation's, while compensating), by name in the record's config version.
    pub running: Option<(u32, u32)>,
}

/// A cancel that an operator saw succeed.
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub workflow: String,
    pub key: String,
    pub generation: u32,
    /// Whether the execution had ended when the operator was told the cancel succeeded.
    pub execution_ended: bool,
}

/// Runs a future the in-memory store returns ready (it never waits).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory store never waits"),
    }
}

/// Spawns every producer, sender and operator of the plan, each waiting for its time.
pub fn spawn_all(stack: &Stack, plan: &Plan) {
    let world = &stack.world;
    let start = world.now();
    for (n, e) in plan.events.iter().enumerate() {
        let (world2, sqs, body, copies) = (world.clone(), stack.sqs.clone(), e.body.clone(), e.copies);
        let at = start + e.at;
        let producer = async move {
            for copy in 0..copies {
                sleep_until(world2.clone(), at + Duration::seconds(i64::from(copy) * 7)).await;
                let now = world2.now();
                let m = lock(&sqs).send(QueueId::Intake, body.clone(), BTreeMap::new(), now);
                world2.note(|| format!("  sent {m}: {}", body.chars().take(110).collect::<String>()));
            }
        };
        world.spawn(format!("producer{n}"), ActorKind::External, Box::pin(producer));
    }
    for (n, c) in plan.callbacks.iter().enumerate() {
        let sender = send_callback(stack_parts(stack), start + c.at, c.clone());
        world.spawn(format!("sender{n}:{}", c.id), ActorKind::External, Box::pin(sender));
    }
    for (at, key) in &plan.cancels {
        let operator = cancel(stack_parts(stack), start + *at, key.clone());
        world.spawn(format!("cancel:{key}"), ActorKind::External, Box::pin(operator));
    }
    for (at, key) in &plan.compensating_cancels {
        let operator = cancel_compensating(stack_parts(stack), start + *at, key.clone());
        world.spawn(format!("cancel-compensate:{key}"), ActorKind::External, Box::pin(operator));
    }
    for (n, at) in plan.replays.iter().enumerate() {
        let operator = replay_dlqs(stack_parts(stack), start + *at);
        world.spawn(format!("replay{n}"), ActorKind::External, Box::pin(operator));
    }
    if !plan.crowd_events.is_empty() {
        let (world2, sqs, events) = (world.clone(), stack.sqs.clone(), plan.crowd_events.clone());
        let producer = async move {
            for e in events {
                sleep_until(world2.clone(), start + e.at).await;
                let now = world2.now();
                let m = lock(&sqs).send(QueueId::Intake, e.body.clone(), BTreeMap::new(), now);
                world2.note(|| format!("  sent {m}: {}", e.body.chars().take(110).collect::<String>()));
            }
        };
        world.spawn("crowd-producer", ActorKind::External, Box::pin(producer));
    }
    if !plan.console_stops.is_empty() {
        let mut stops = plan.console_stops.clone();
        stops.sort_by_key(|(at, _, _)| *at);
        let operator = console_stops(stack_parts(stack), start, stops);
        world.spawn("console", ActorKind::External, Box::pin(operator));
    }
    for at in &plan.sweeps {
        crate::spawn_sweep_at(world, &stack.live, start + *at, "sweep");
    }
}

/// The parts of a stack the actors hold.
#[derive(Clone)]
pub struct Parts {
    pub(crate) world: Arc<World>,
    pub(crate) stack: Arc<StackRefs>,
}

pub(crate) struct StackRefs {
    pub(crate) live: Arc<Mutex<Arc<crate::Deployment>>>,
    memory: Arc<baton_core::ports::store::memory::MemoryStore>,
    store: Arc<crate::store::SimStore>,
    pub(crate) sqs: Arc<Mutex<crate::sqs::Sqs>>,
    pub(crate) sfn: Arc<Mutex<crate::sfn::Model>>,
    pub(crate) evidence: Arc<Mutex<Evidence>>,
}

pub(crate) fn stack_parts(stack: &Stack) -> Parts {
    Parts {
        world: stack.world.clone(),
        stack: Arc::new(StackRefs {
            live: stack.live.clone(),
            memory: stack.memory.clone(),
            store: stack.store.clone(),
            sqs: stack.sqs.clone(),
            sfn: stack.sfn.clone(),
            evidence: stack.evidence.clone(),
        }),
    }
}

impl Parts {
    /// What runs now (a deploy may have replaced what ran when the actor was spawned).
    pub(crate) fn live(&self) -> Arc<crate::Deployment> {
        lock(&self.stack.live).clone()
    }

    /// The store's facts about input `id`, read without a port (the oracle), at once.
    fn facts(&self, workflow: &str, (key, step): (&str, &str), id: &str, hash: &str) -> Facts {
        let Ok(name) = baton_core::domain::ids::WorkflowName::parse(workflow) else {
            return Facts::default();
        };
        let Ok(k) = CorrelationKey::parse(key) else { return Facts::default() };
        // Read in place, not copied: asked after every answer, of records a crowd's make large.
        self.stack.memory.peek_trace(&name, &k, |trace| {
            let in_record = trace.record.is_some_and(|r| {
                r.history.iter().any(|a| a.cause_id.as_deref() == Some(id))
                    || r.applied.iter().any(|a| a.id.as_str() == id)
            });
            let running = trace.record.and_then(|r| {
                let config = self.stack.store.deployed(Some(&r.config_version))?;
                let index = config.workflow(workflow)?.step_index(step)?;
                Some((r.generation, baton_core::domain::lifecycle::running_attempt(r.failed_attempts(index))))
            });
            Facts {
                in_record,
                inbox: trace.inbox.iter().any(|e| e.id.as_str() == id),
                ledger: trace.ledger.iter().any(|l| l.input_id == id),
                other_receipt: trace.receipts.iter().any(|r| r.id.as_str() == id && r.hash != hash),
                running,
            }
        })
    }
}

/// What an attempt's invocation left for its sender.
#[derive(Debug, Clone)]
enum Slot {
    Waiting,
    Answered(u16, Value, Facts),
    Crashed,
}

/// Marks the slot crashed if the invocation is dropped before it answers.
struct CrashGuard(Arc<Mutex<Slot>>);

impl Drop for CrashGuard {
    fn drop(&mut self) {
        let mut slot = lock(&self.0);
        if matches!(*slot, Slot::Waiting) {
            *slot = Slot::Crashed;
        }
    }
}

/// How many times a sender tries one callback.
const SENDER_ATTEMPTS: u32 = 8;

#[expect(
    clippy::too_many_lines,
    reason = "a sender's whole retry loop, each documented answer handled as a real sender would"
)]
pub(crate) async fn send_callback(parts: Parts, at: OffsetDateTime, c: CallbackSend) {
    let world = parts.world.clone();
    sleep_until(world.clone(), at).await;
    let body = serde_json::to_string(&c.body).expect("a value's JSON");
    let hash = payload_hash(body.as_bytes());
    let workflow = c.body["workflow"].as_str().unwrap_or_default().to_owned();
    for attempt in 0..SENDER_ATTEMPTS {
        let slot = Arc::new(Mutex::new(Slot::Waiting));
        let invocation = {
            let (parts, slot, body, c, hash, workflow) =
                (parts.clone(), slot.clone(), body.clone(), c.clone(), hash.clone(), workflow.clone());
            let secrets = baton_core::domain::webhook::Secrets::parse(SECRET).expect("the secret");
            // Made before the first poll: an invocation dropped before it ever ran crashed too.
            let guard = CrashGuard(slot.clone());
            async move {
                // Signed as the request leaves the sender, which is when it reaches baton.
                let now = parts.world.now().unix_timestamp();
                let mut headers = HeaderMap::new();
                headers.insert("webhook-id", c.id.parse().expect("a header value"));
                headers.insert("webhook-timestamp", now.to_string().parse().expect("a header value"));
                headers.insert(
                    "webhook-signature",
                    secrets.sign(&c.id, now, body.as_bytes()).parse().expect("a header value"),
                );
                let answer = parts.live().callbacks.handle(&headers, body.as_bytes()).await;
                let facts = parts.facts(&workflow, (&c.key, &c.step), &c.id, &hash);
                *lock(&slot) = Slot::Answered(answer.status.as_u16(), answer.body, facts);
                drop(guard);
            }
        };
        world.spawn(format!("callback:{}#{attempt}", c.id), ActorKind::Invocation, Box::pin(invocation));
        // Wait for the answer; a sender may also give up waiting (a timeout) while the
        // invocation goes on.
        let gave_up = {
            let (world, slot) = (world.clone(), slot.clone());
            std::future::poll_fn(move |_| match &*lock(&slot) {
                Slot::Waiting if world.chance(lock(&world.rates).crash / 20.0) => Poll::Ready(true),
                Slot::Waiting => Poll::Pending,
                _ => Poll::Ready(false),
            })
            .await
        };
        let outcome = if gave_up { Slot::Crashed } else { lock(&slot).clone() };
        let answer = match &outcome {
            Slot::Answered(status, body, facts) => {
                let a = Attempt {
                    id: c.id.clone(),
                    hash: hash.clone(),
                    key: c.key.clone(),
                    workflow: workflow.clone(),
                    step: c.step.clone(),
                    task: c.task.clone(),
                    answer: Some((*status, body.clone())),
                    facts: facts.clone(),
                };
                lock(&parts.stack.evidence).attempts.push(a);
                Some(*status)
            }
            _ => {
                let a = Attempt {
                    id: c.id.clone(),
                    hash: hash.clone(),
                    key: c.key.clone(),
                    workflow: workflow.clone(),
                    step: c.step.clone(),
                    task: c.task.clone(),
                    answer: None,
                    facts: Facts::default(),
                };
                lock(&parts.stack.evidence).attempts.push(a);
                None
            }
        };
        match answer {
            Some(status) if status < 500 => return,
            _ => {
                sleep_until(world.clone(), world.now() + Duration::seconds(5 * i64::from(attempt + 1))).await
            }
        }
    }
}

async fn cancel(parts: Parts, at: OffsetDateTime, key: String) {
    let world = parts.world.clone();
    sleep_until(world.clone(), at).await;
    let k = CorrelationKey::parse(key.as_str()).expect("a key");
    // An operator runs `baton cancel` again until it succeeds, a few times.
    for _ in 0..5 {
        let live = parts.live();
        let workflow = live.config.workflow("review").expect("the review workflow");
        let input = Input::Cancel { reason: "operator".into() };
        match live.engine.submit(workflow, &k, &input, world.now()).await {
            Ok(done) => {
                if let Some(r) = done.record().filter(|r| r.state == State::Cancelled) {
                    let name =
                        baton_core::ports::orchestrator::execution_name(&workflow.name, &k, r.generation);
                    let arn = format!(
                        "{}:{name}",
                        crate::PREFIX.replace(":stateMachine:", ":execution:") + "review"
                    );
                    let running = lock(&parts.stack.sfn).executions.get(&arn).is_none_or(|e| {
                        e.status == baton_core::ports::orchestrator::ExecutionStatus::Running
                    });
                    let c = Cancelled {
                        workflow: "review".into(),
                        key,
                        generation: r.generation,
                        execution_ended: !running,
                    };
                    lock(&parts.stack.evidence).cancels.push(c);
                }
                return;
            }
            Err(_) => sleep_until(world.clone(), world.now() + Duration::seconds(10)).await,
        }
    }
}

/// Someone stops executions from the Step Functions console, each at its time (after `start`),
/// outside baton: each is aborted at once, and nothing tells baton (no report, no Catch).
async fn console_stops(parts: Parts, start: OffsetDateTime, stops: Vec<(Duration, String, String)>) {
    let world = parts.world.clone();
    for (at, workflow, key) in stops {
        sleep_until(world.clone(), start + at).await;
        let (Ok(w), Ok(k)) = (
            baton_core::domain::ids::WorkflowName::parse(workflow.as_str()),
            CorrelationKey::parse(key.as_str()),
        ) else {
            continue;
        };
        let name = baton_core::ports::orchestrator::execution_name(&w, &k, 1);
        let arn = format!("{}{workflow}:{name}", crate::PREFIX.replace(":stateMachine:", ":execution:"));
        let stopped = lock(&parts.stack.sfn).stop(&arn, ("Console", "stopped from the console"), world.now());
        world.note(|| format!("  console: StopExecution {arn} -> {stopped:?}"));
    }
}

/// `baton cancel saga KEY --compensate` at `at`, run again until it gets an answer (a refusal
/// is an answer: the record was compensating or had ended, or it was between steps).
async fn cancel_compensating(parts: Parts, at: OffsetDateTime, key: String) {
    let world = parts.world.clone();
    sleep_until(world.clone(), at).await;
    let k = CorrelationKey::parse(key.as_str()).expect("a key");
    for _ in 0..5 {
        let live = parts.live();
        let Some(workflow) = live.config.workflow("saga") else { return };
        let input = Input::CancelCompensate { reason: "operator".into() };
        match live.engine.submit(workflow, &k, &input, world.now()).await {
            Ok(_) => return,
            Err(_) => sleep_until(world.clone(), world.now() + Duration::seconds(10)).await,
        }
    }
}

/// The operator answering the DLQ alarm once the faults are over, as the runbook says: one
/// `baton replay --apply` at `at`.
pub fn spawn_alarm_replay(stack: &Stack, at: OffsetDateTime) {
    let operator = replay_dlqs(stack_parts(stack), at);
    stack.world.spawn("replay:alarm", ActorKind::External, Box::pin(operator));
}

/// `baton replay --apply` on both dead-letter queues: safe lines delivered (guarded), noop
/// lines removed, the rest left for a person.
async fn replay_dlqs(parts: Parts, at: OffsetDateTime) {
    let world = parts.world.clone();
    sleep_until(world.clone(), at).await;
    let engine = parts.live().engine.clone();
    for (queue, origin) in [(QueueId::IntakeDlq, Origin::Intake), (QueueId::ProgressDlq, Origin::Progress)] {
        let messages: Vec<crate::sqs::Message> = lock(&parts.stack.sqs).messages(queue).to_vec();
        for m in messages {
            let now = world.now();
            let Ok(line) = replay::plan_message(&engine, origin, &m.id, &m.body, now).await else {
                continue;
            };
            let remove = match line.classification {
                Classification::Safe => {
                    matches!(
                        replay::apply_line(&engine, &line, world.now()).await,
                        Ok(replay::Applied::Applied { .. })
                    )
                }
                Classification::Noop => matches!(
                    replay::settle_noop(&engine, &line, world.now()).await,
                    Ok(replay::Applied::Applied { .. })
                ),
                Classification::NeedsHuman => false,
            };
            if remove {
                lock(&parts.stack.sqs).remove(queue, &m.id);
            }
        }
    }
}

/// The operator answering `StrandedRecordsAlarm` at `at`: every stranded record ended with
/// `baton end` (its plan read, then applied), in its own config version.
pub fn spawn_stranded_end(stack: &Stack, at: OffsetDateTime) {
    let operator = end_stranded(stack_parts(stack), at);
    stack.world.spawn("end:stranded", ActorKind::External, Box::pin(operator));
}

async fn end_stranded(parts: Parts, at: OffsetDateTime) {
    use baton_core::use_cases::ending::{self, ExecutionEnd};
    let world = parts.world.clone();
    sleep_until(world.clone(), at).await;
    let engine = parts.live().engine.clone();
    let stranded: Vec<baton_core::domain::lifecycle::Record> = parts
        .stack
        .memory
        .records()
        .into_iter()
        .filter(|r| r.state.kind() == baton_core::domain::lifecycle::Kind::Stranded)
        .collect();
    for record in stranded {
        let Ok(Some(workflow)) =
            engine.definition(record.workflow.as_str(), Some(record.config_version.as_str())).await
        else {
            continue;
        };
        let Ok(execution) = ExecutionEnd::of(&engine, &workflow, &record).await else { continue };
        if ending::end(&engine, &workflow, &record, &execution, "StrandedRecordsAlarm").await.is_ok() {
            lock(&world.counts).add("stranded_ended");
        }
    }
}

/// The event id of an event body, if it has one.
pub fn event_id(body: &str) -> Option<EventId> {
    let v: Value = serde_json::from_str(body).ok()?;
    EventId::parse(v["id"].as_str()?).ok()
}
