//! DynamoDB-specific: how a record with its task token kept out of line reads back. Token items
//! sort under the record's own sort key (`RECORD#T#<!generation><!step>#<ref>`), the record
//! names its item by `token_sk`. Written by a review that set out to break it (2026-12-02).
//!
//! After every write each scenario checks, for the partition, against the raw items:
//! 1. the loaded token is exactly the one in the item the record names (none when it is gone);
//! 2. no RECORD item, no record, whatever token items remain;
//! 3. `trace(...).record == load(...)`;
//! 4. the in-memory store, given the same writes, loads the same record (and answers the same
//!    `Applied`, the lost write's `current` included);
//! 5. a load is one Query when the item right after `RECORD` is the record's token item (and,
//!    in runs without races, that it is); otherwise a Query and a GetItem.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use baton_aws::dynamodb::{DynamoDbStore, parse_token, token_ref, token_sk};
use baton_core::domain::ids::{EventId, TaskToken};
use baton_core::domain::lifecycle::{Cause, Finish, Input, Record, State, Write};
use baton_core::ports::store::memory::MemoryStore;
use baton_core::ports::store::{Applied, WorkflowStore};
use baton_tests::calls::Calls;
use baton_tests::lifecycle_fixtures::{
    aws_length_token, decide_at, names, set_token, step_input, t0, token_of, write_of,
};
use baton_tests::{Emulator, dynamo_store};
use serde_json::json;
use time::{Duration, OffsetDateTime};

type Item = HashMap<String, AttributeValue>;

fn tok(seed: u8) -> TaskToken {
    TaskToken::parse(aws_length_token(seed)).unwrap()
}

fn start(id: &str) -> Input {
    Input::start(EventId::parse(id).unwrap())
}

fn ready(generation: u32, step: u32, token: TaskToken) -> Input {
    Input::StepReady { generation, step, token, deadline: t0() + Duration::days(30) }
}

fn cancel() -> Input {
    Input::Cancel { reason: "attack".into() }
}

fn sk_of(item: &Item) -> &str {
    item.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str).unwrap_or_default()
}

/// The sort key of the token item a stored record item names (its `token_sk`).
fn named_sk(item: &Item) -> Option<String> {
    item.get("token_sk").and_then(|v| v.as_s().ok()).cloned()
}

/// One table, the in-memory store as the reference, a DynamoDB writer (every token out of line),
/// and fresh, counted readers.
struct Rig {
    config: aws_config::SdkConfig,
    client: aws_sdk_dynamodb::Client,
    table: String,
    memory: MemoryStore,
    writer: DynamoDbStore,
    calls: Calls,
    clock: AtomicI64,
}

impl Rig {
    async fn new() -> Rig {
        let emulator = Emulator::from_env();
        let table = dynamo_store(&emulator).await.table().to_owned();
        let config = emulator.sdk_config().await;
        let client = aws_sdk_dynamodb::Client::new(&config);
        let writer = DynamoDbStore::new(client.clone(), table.clone()).with_token_inline_max(0);
        Rig {
            config,
            client,
            table,
            memory: MemoryStore::new().with_item_sizes(baton_aws::dynamodb::ITEM_SIZES),
            writer,
            calls: Calls::default(),
            clock: AtomicI64::new(0),
        }
    }

    fn now(&self) -> OffsetDateTime {
        t0() + Duration::seconds(self.clock.fetch_add(7, Ordering::Relaxed))
    }

    /// A store of its own (no known tokens), every token out of line, its calls counted.
    fn fresh(&self) -> DynamoDbStore {
        DynamoDbStore::new(self.calls.dynamodb(&self.config), self.table.clone()).with_token_inline_max(0)
    }

    /// A store of its own, uncounted, as built by `build`.
    fn other(&self, build: impl Fn(DynamoDbStore) -> DynamoDbStore) -> DynamoDbStore {
        build(DynamoDbStore::new(self.client.clone(), self.table.clone()))
    }

    /// Applies `write` to the in-memory store and through `store`; both must answer alike.
    async fn apply_on(&self, store: &DynamoDbStore, write: &Write, at: &str) -> Applied {
        let expected = self.memory.apply(write).await.unwrap();
        let got = store.apply(write).await.unwrap();
        assert_eq!(got, expected, "{at}: invariant 4: DynamoDB's Applied differs from the in-memory store's");
        got
    }

    /// Decides `input` on the reference record and writes it through `store`; it must win.
    async fn step_on(&self, store: &DynamoDbStore, key: &str, input: &Input, at: &str) -> Record {
        let (w, k) = names(key);
        let current = self.memory.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone);
        let write = write_of(decide_at(key, current.as_ref(), input, self.now()));
        assert_eq!(self.apply_on(store, &write, at).await, Applied::Written, "{at}");
        write.to
    }

    async fn step(&self, key: &str, input: &Input, at: &str) -> Record {
        self.step_on(&self.writer, key, input, at).await
    }

    /// Every item of the partition, in sort-key order.
    async fn partition(&self, key: &str) -> Vec<Item> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", Self::pk(key))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        assert!(out.last_evaluated_key.is_none(), "one page");
        out.items.unwrap_or_default()
    }

    /// The partition key of `key`'s items.
    fn pk(key: &str) -> AttributeValue {
        let (w, k) = names(key);
        AttributeValue::S(format!("WF#{w}#{k}"))
    }

    async fn delete_raw(&self, key: &str, sk: &str) {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", Self::pk(key))
            .key("sk", AttributeValue::S(sk.to_owned()))
            .send()
            .await
            .unwrap();
    }

    /// Checks the invariants for `key` against `expected` (the in-memory store's record when
    /// None is passed as `reference`). `strict`: the item after `RECORD` must be the record's own
    /// token item (a run without lost races). Returns the calls the load made.
    async fn check_against(
        &self,
        key: &str,
        reference: Option<Option<Record>>,
        strict: bool,
        at: &str,
    ) -> Vec<String> {
        let (w, k) = names(key);
        let expected = match reference {
            Some(r) => r,
            None => self.memory.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone),
        };
        let reader = self.fresh();
        self.calls.take();
        let loaded = reader.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone);
        let ops = self.calls.take();
        assert_eq!(loaded, expected, "{at}: invariant 4: DynamoDB's load differs from the reference");
        let trace = self.fresh().trace(&w, &k).await.unwrap();
        self.calls.take();
        assert_eq!(trace.record, loaded, "{at}: invariant 3: trace's record differs from load");

        let items = self.partition(key).await;
        let sks: Vec<&str> = items.iter().map(sk_of).collect();
        match items.iter().find(|i| sk_of(i) == "RECORD") {
            None => assert!(loaded.is_none(), "{at}: invariant 2: a record without a RECORD item ({sks:?})"),
            Some(record) => {
                let named = named_sk(record);
                let inline = record.get("token").and_then(|v| v.as_s().ok()).cloned();
                let named_item = named.as_ref().and_then(|sk| items.iter().find(|i| sk_of(i) == sk));
                let stored_token = match (&inline, &named) {
                    (Some(t), _) => Some(TaskToken::parse(t.clone()).unwrap()),
                    (None, Some(_)) => named_item.map(|i| parse_token(i).unwrap()),
                    (None, None) => None,
                };
                let loaded_token = loaded.as_ref().and_then(|r| token_of(r).cloned());
                assert_eq!(
                    loaded_token.as_ref().map(token_ref),
                    stored_token.as_ref().map(token_ref),
                    "{at}: invariant 1: the loaded token is not the one the record names ({named:?}; {sks:?})"
                );
                let after = items.iter().map(sk_of).find(|sk| sk.starts_with("RECORD") && *sk != "RECORD");
                let want: &[&str] = match (&inline, &named, named_item) {
                    (None, Some(sk), Some(_)) if after == Some(sk.as_str()) => &["Query"],
                    (None, Some(_), _) => &["Query", "GetItem"],
                    _ => &["Query"],
                };
                assert_eq!(ops, want, "{at}: invariant 5: calls of a load (named {named:?}, {sks:?})");
                if strict && inline.is_none() && named_item.is_some() {
                    assert_eq!(
                        after,
                        named.as_deref(),
                        "{at}: invariant 5: the item after RECORD is not the record's token item ({sks:?})"
                    );
                }
            }
        }
        // The other reads of a record (GetItem of its token item) agree.
        if let Some(r) = &loaded {
            let far = t0() + Duration::days(365 * 50);
            let due = self.fresh().due(baton_core::ports::store::DueList::of(r), far, 1000).await.unwrap();
            let mine: Vec<&Record> = due.iter().filter(|d| d.key == r.key).map(|d| &**d).collect();
            assert_eq!(mine, vec![r], "{at}: due() reads the record otherwise than load()");
            let recent = self.fresh().recent_records(1000).await.unwrap();
            let mine: Vec<&Record> = recent.iter().filter(|d| d.key == r.key).collect();
            assert_eq!(mine, vec![r], "{at}: recent_records() reads the record otherwise than load()");
            self.calls.take();
        }
        ops
    }

    async fn check(&self, key: &str, strict: bool, at: &str) -> Vec<String> {
        self.check_against(key, None, strict, at).await
    }
}

// ---- invariants 1, 3, 4, 5: steps, generations, cancels, without races ---------------------

/// Three generations: two steps to success; a step, then a cancel from waiting; a cancel from
/// advancing; each opened by a restart; the same tokens reused across generations.
#[tokio::test]
async fn steps_generations_and_cancels_read_back_with_their_token_in_one_query() {
    let rig = Rig::new().await;
    let key = "k-life";
    let (ta, tb, tc) = (tok(1), tok(2), tok(3));
    let mut n = 0;
    let mut go = |label: &str| {
        n += 1;
        format!("#{n} {label}")
    };
    let script: Vec<(String, Input)> = vec![
        (go("start g1"), start("evt-1")),
        (go("ready g1 s0 ta"), ready(1, 0, ta.clone())),
        (go("merge g1 s0"), step_input("in-1", 0, json!({"note": 1}))),
        (go("complete g1 s0"), step_input("in-2", 0, json!({"decision": "ok"}))),
        (go("ready g1 s1 tb"), ready(1, 1, tb.clone())),
        (go("merge g1 s1"), step_input("in-3", 1, json!({"note": 2}))),
        (go("complete g1 s1"), step_input("in-4", 1, json!({"payment_ref": "p"}))),
        (go("succeeded g1"), Input::Finished { generation: 1, finish: Finish::Succeeded }),
        (go("restart g2"), start("evt-2")),
        (go("ready g2 s0 tc"), ready(2, 0, tc.clone())),
        (go("cancel g2 from waiting"), cancel()),
        (go("restart g3"), start("evt-3")),
        (go("ready g3 s0 ta (reused)"), ready(3, 0, ta.clone())),
        (go("complete g3 s0"), step_input("in-5", 0, json!({"decision": "ok"}))),
        (go("cancel g3 from advancing"), cancel()),
        (go("restart g4"), start("evt-4")),
        (go("ready g4 s0 tb (reused)"), ready(4, 0, tb.clone())),
        (go("complete g4 s0"), step_input("in-6", 0, json!({"decision": "ok"}))),
        (go("ready g4 s1 tc"), ready(4, 1, tc.clone())),
        (go("timed out g4"), Input::Finished { generation: 4, finish: Finish::TimedOut }),
        (go("restart g5"), start("evt-5")),
        (go("ready g5 s0 tc (reused)"), ready(5, 0, tc.clone())),
    ];
    for (at, input) in &script {
        rig.step(key, input, at).await;
        rig.check(key, true, at).await;
    }
    // Cancelled twice (the second a duplicate, no write), then restarted and failed from waiting.
    rig.step(key, &cancel(), "cancel g5").await;
    rig.check(key, true, "cancel g5").await;
    rig.step(key, &start("evt-6"), "restart g6").await;
    rig.step(key, &ready(6, 0, ta.clone()), "ready g6 s0").await;
    rig.step(
        key,
        &Input::Finished { generation: 6, finish: Finish::Failed { error: "e".into(), cause: "c".into() } },
        "failed g6",
    )
    .await;
    rig.check(key, true, "failed g6").await;
}

/// The same script, each write through a store of its own (no known tokens: every write puts
/// its token item again), and a cancel of a record whose writer did know its token item.
#[tokio::test]
async fn every_write_from_a_fresh_instance_reads_back_the_same() {
    let rig = Rig::new().await;
    let key = "k-fresh";
    let inputs = [
        start("evt-1"),
        ready(1, 0, tok(11)),
        step_input("in-1", 0, json!({"decision": "ok"})),
        ready(1, 1, tok(12)),
        cancel(),
        start("evt-2"),
        ready(2, 0, tok(11)),
        step_input("in-2", 0, json!({"decision": "ok"})),
        ready(2, 1, tok(13)),
        step_input("in-3", 1, json!({"payment_ref": "p"})),
        Input::Finished { generation: 2, finish: Finish::Succeeded },
    ];
    for (i, input) in inputs.iter().enumerate() {
        let at = format!("fresh #{i}");
        let store = rig.other(|s| s.with_token_inline_max(0));
        rig.step_on(&store, key, input, &at).await;
        rig.check(key, true, &at).await;
    }
}

// ---- invariant 1, 3, 4 (and 5 measured): lost races ------------------------------------------

/// Two step_ready writes for the same (generation, step) with different tokens, from the same
/// advancing record: both put a token item, one wins. Over several token pairs, so that the
/// loser's item sorts before the winner's in some. The loser puts its item first in time too
/// (its write fails on a stale version), so the record's item is the newest put.
#[tokio::test]
async fn a_lost_step_ready_leaves_an_item_of_the_same_step_and_loads_stay_right() {
    let rig = Rig::new().await;
    let mut two_calls = Vec::new();
    for seed in 0..8u8 {
        let key = format!("k-race-{seed}");
        let key = key.as_str();
        rig.step(key, &start("evt-1"), "start").await;
        rig.step(key, &ready(1, 0, tok(100)), "ready s0").await;
        let advancing = rig.step(key, &step_input("in-1", 0, json!({"decision": "ok"})), "complete s0").await;
        let (winner_token, loser_token) = (tok(2 * seed), tok(2 * seed + 1));
        let now = rig.now();
        let a = write_of(decide_at(key, Some(&advancing), &ready(1, 1, winner_token.clone()), now));
        let b = write_of(decide_at(key, Some(&advancing), &ready(1, 1, loser_token.clone()), now));
        // The loser first: its write is already stale (another writer's version), so it puts its
        // token item and loses; then the winner.
        let stale = Write { expected_version: Some(advancing.version + 7), ..b.clone() };
        let loser = rig.other(|s| s.with_token_inline_max(0));
        let at = format!("race {seed}: stale loser");
        assert!(matches!(rig.apply_on(&loser, &stale, &at).await, Applied::Lost { .. }));
        let winner = rig.other(|s| s.with_token_inline_max(0));
        assert_eq!(rig.apply_on(&winner, &a, &format!("race {seed}: winner")).await, Applied::Written);
        let at = format!("race {seed}: the real loser, after the winner");
        match rig.apply_on(&loser, &b, &at).await {
            Applied::Lost { current: Some(current) } => assert_eq!(*current, a.to, "{at}"),
            other => panic!("{at}: {other:?}"),
        }
        let at = format!("race {seed}: after");
        let ops = rig.check(key, false, &at).await;
        let loser_first = token_sk(&b.to, &loser_token) < token_sk(&a.to, &winner_token);
        if ops.len() > 1 {
            two_calls.push((seed, loser_first));
        }
        // The loser decides again on the winner's record: ignored (the step passed), no write.
        // The record goes on: a merge and a complete at the same step, then the next generation.
        rig.step(key, &step_input("in-2", 1, json!({"note": 1})), "merge s1").await;
        rig.check(key, false, &format!("race {seed}: merge after")).await;
        rig.step(key, &step_input("in-3", 1, json!({"payment_ref": "p"})), "complete s1").await;
        rig.check(key, false, &format!("race {seed}: complete after")).await;
        rig.step(key, &Input::Finished { generation: 1, finish: Finish::Succeeded }, "succeeded").await;
        rig.step(key, &start("evt-2"), "restart").await;
        rig.step(key, &ready(2, 0, loser_token.clone()), "ready g2 with the loser's token").await;
        rig.check(key, true, &format!("race {seed}: g2")).await;
    }
    eprintln!(
        "invariant 5 measurement: loads costing Query + GetItem after a lost step_ready: {two_calls:?}"
    );
}

/// A cancel that loses to a step_ready leaves an unreferenced cancelled-token item (step
/// u32::MAX), which sorts before every step's item of the generation.
#[tokio::test]
async fn a_lost_cancel_leaves_an_item_that_sorts_before_every_step() {
    let rig = Rig::new().await;
    let key = "k-lost-cancel";
    rig.step(key, &start("evt-1"), "start").await;
    rig.step(key, &ready(1, 0, tok(40)), "ready s0").await;
    let advancing = rig.step(key, &step_input("in-1", 0, json!({"decision": "ok"})), "complete s0").await;
    let now = rig.now();
    let cancelled = write_of(decide_at(key, Some(&advancing), &cancel(), now));
    let stepped = write_of(decide_at(key, Some(&advancing), &ready(1, 1, tok(41)), now));
    let canceller = rig.other(|s| s.with_token_inline_max(0));
    let stale = Write { expected_version: Some(advancing.version + 3), ..cancelled.clone() };
    assert!(matches!(rig.apply_on(&canceller, &stale, "stale cancel").await, Applied::Lost { .. }));
    assert_eq!(rig.apply_on(&rig.writer, &stepped, "step_ready wins").await, Applied::Written);
    let ops = rig.check(key, false, "after a lost cancel").await;
    eprintln!("invariant 5 measurement: a waiting record after a lost cancel loads with {ops:?}");
    // The cancel decides again on the winner: now it wins, keeping the step's token.
    let again = rig.step_on(&canceller, key, &cancel(), "cancel again").await;
    assert_eq!(token_of(&again), Some(&tok(41)));
    let ops = rig.check(key, false, "cancelled after the retry").await;
    eprintln!("invariant 5 measurement: the cancelled record loads with {ops:?}");
}

/// Many writers race the same step_ready with different tokens, each through an instance of
/// its own; loads run alongside. Every load returns one of the records written, with its token.
#[tokio::test]
async fn concurrent_step_ready_racers_and_loads_never_mix_tokens() {
    let rig = Rig::new().await;
    let key = "k-many";
    rig.step(key, &start("evt-1"), "start").await;
    rig.step(key, &ready(1, 0, tok(200)), "ready s0").await;
    let advancing = rig.step(key, &step_input("in-1", 0, json!({"decision": "ok"})), "complete s0").await;
    let now = rig.now();
    let writes: Vec<Write> = (0..10u8)
        .map(|i| write_of(decide_at(key, Some(&advancing), &ready(1, 1, tok(150 + i)), now)))
        .collect();
    let (w, k) = names(key);
    let readers: Vec<DynamoDbStore> = (0..4).map(|_| rig.other(|s| s.with_token_inline_max(0))).collect();
    let load_loop = async {
        let mut seen = Vec::new();
        for round in 0..6 {
            for r in &readers {
                let got = r.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone).expect("the record");
                seen.push((round, got));
            }
        }
        seen
    };
    let racers = futures::future::join_all(writes.iter().map(|write| {
        let store = rig.other(|s| s.with_token_inline_max(0));
        async move { store.apply(write).await.unwrap() }
    }));
    let (results, seen) = tokio::join!(racers, load_loop);
    let winners: Vec<&Write> =
        writes.iter().zip(&results).filter(|(_, r)| **r == Applied::Written).map(|(w, _)| w).collect();
    assert_eq!(winners.len(), 1, "exactly one step_ready wins: {results:?}");
    let winner = winners[0];
    for (round, got) in &seen {
        assert!(
            got == &advancing || got == &winner.to,
            "invariant 1: load #{round} returned a record that was never written: version {} token {:?}",
            got.version,
            token_of(got).map(token_ref)
        );
    }
    // Bring the reference in line with the winner (the in-memory store took no part).
    assert_eq!(rig.memory.apply(winner).await.unwrap(), Applied::Written);
    rig.check(key, false, "after ten racers").await;
}

// ---- invariant 2: token items without a record -----------------------------------------------

#[tokio::test]
async fn without_a_record_item_nothing_loads_whatever_token_items_remain() {
    let rig = Rig::new().await;
    let (w, k) = names("k-gone");
    // A lost write on an empty partition puts its token item and writes nothing.
    let mut ghost = write_of(decide_at("k-gone", None, &start("evt-1"), rig.now())).to;
    ghost.state = State::Waiting { step: 0 };
    set_token(&mut ghost, Some(tok(60)));
    ghost.version = 2;
    let write = Write {
        cause: Cause::Merge,
        from: Some(State::Waiting { step: 0 }),
        expected_version: Some(2),
        to: ghost,
    };
    assert_eq!(rig.apply_on(&rig.writer, &write, "ghost").await, Applied::Lost { current: None });
    assert!(
        rig.partition("k-gone").await.iter().any(|i| sk_of(i).starts_with("RECORD#T#")),
        "the token item stays"
    );
    assert_eq!(rig.fresh().load(&w, &k).await.unwrap(), None, "invariant 2");
    rig.check("k-gone", false, "ghost token item only").await;

    // A record's partition whose RECORD item is gone (deleted by hand), token items left.
    let key = "k-deleted";
    rig.step(key, &start("evt-1"), "start").await;
    rig.step(key, &ready(1, 0, tok(61)), "ready").await;
    rig.step(key, &cancel(), "cancel").await;
    rig.delete_raw(key, "RECORD").await;
    let (w, k) = names(key);
    assert_eq!(rig.fresh().load(&w, &k).await.unwrap(), None, "invariant 2");
    assert_eq!(rig.fresh().trace(&w, &k).await.unwrap().record, None, "invariant 3");
    rig.calls.take();
    rig.check_against(key, Some(None), false, "RECORD deleted").await;
    // And the store creates it again on a start (the partition's token items don't stand in
    // the way).
    let fresh_start = write_of(decide_at(key, None, &start("evt-9"), rig.now()));
    assert_eq!(rig.writer.apply(&fresh_start).await.unwrap(), Applied::Written);
    rig.check_against(key, Some(Some(fresh_start.to.clone())), false, "created again").await;
}

// ---- invariants 1, 3, 4: writes the store contract allows that decide does not make ------------

/// The contract is the conditional write: any `to` whose (from, to, cause) is a row of the
/// transition table. Tokens that change at the same step, generations that go back, steps at
/// the ends of u32, the same token at several places.
#[tokio::test]
#[expect(clippy::too_many_lines, reason = "an end-to-end scenario reads as one story, step by step")]
async fn odd_but_allowed_writes_agree_with_the_in_memory_store() {
    let rig = Rig::new().await;
    let key = "k-odd";
    let (w, k) = names(key);
    rig.step(key, &start("evt-1"), "start").await;
    rig.step(key, &ready(1, 0, tok(70)), "ready").await;
    type Change = Box<dyn Fn(&mut Record)>;
    let changes: Vec<(&str, Change)> = vec![
        ("token changes at the same step", Box::new(|r| set_token(r, Some(tok(71))))),
        ("back to the first token (its item known to the writer)", Box::new(|r| set_token(r, Some(tok(70))))),
        ("generation 0", Box::new(|r| r.generation = 0)),
        ("generation u32::MAX", Box::new(|r| r.generation = u32::MAX)),
        (
            "generation back to 1, step u32::MAX (the cancelled sentinel)",
            Box::new(|r| {
                r.generation = 1;
                r.state = State::Waiting { step: u32::MAX };
            }),
        ),
        ("step u32::MAX - 1", Box::new(|r| r.state = State::Waiting { step: u32::MAX - 1 })),
        (
            "a 129-character non-base64 token at step 3",
            Box::new(|r| {
                r.state = State::Waiting { step: 3 };
                set_token(r, Some(TaskToken::parse("x".repeat(129)).unwrap()));
            }),
        ),
        (
            "a 4-character canonical base64 token",
            Box::new(|r| set_token(r, Some(TaskToken::parse("AAAA").unwrap()))),
        ),
        (
            "a base64 token with padding",
            Box::new(|r| set_token(r, Some(TaskToken::parse("QUJDRA==").unwrap()))),
        ),
        ("a non-ASCII token", Box::new(|r| set_token(r, Some(TaskToken::parse("é".repeat(300)).unwrap())))),
        ("no token while token items remain", Box::new(|r| set_token(r, None))),
        (
            "the second token again, at another step",
            Box::new(|r| {
                r.state = State::Waiting { step: 7 };
                set_token(r, Some(tok(71)));
            }),
        ),
        (
            "step 0 of generation 1 again, the first token (its item exists)",
            Box::new(|r| {
                r.state = State::Waiting { step: 0 };
                set_token(r, Some(tok(70)));
            }),
        ),
    ];
    for (label, change) in &changes {
        for (round, writer) in
            [("known", rig.writer.clone()), ("fresh", rig.other(|s| s.with_token_inline_max(0)))]
        {
            let at = format!("{label} ({round} writer)");
            let current = rig.memory.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone).unwrap();
            let mut to = Record {
                version: current.version + 1,
                updated_at: current.updated_at + Duration::seconds(1),
                ..current.clone()
            };
            if round == "known" {
                change(&mut to);
            }
            let write = Write {
                cause: Cause::Merge,
                from: Some(current.state),
                expected_version: Some(current.version),
                to,
            };
            assert_eq!(rig.apply_on(&writer, &write, &at).await, Applied::Written, "{at}");
            rig.check(key, false, &at).await;
        }
    }
}

// ---- invariants 1, 3, 4: mixed writers (inline and out of line) ---------------------------------

#[tokio::test]
async fn writers_with_other_inline_limits_on_one_partition() {
    let rig = Rig::new().await;
    let key = "k-mixed";
    let out_of_line = rig.other(|s| s.with_token_inline_max(0));
    let default = rig.other(|s| s);
    let inline = rig.other(|s| s.with_token_inline_max(TaskToken::MAX_LEN));
    let short = |n: u32| TaskToken::parse(format!("6f1c2a7e-90b4-4d1e-8a3c-{n:012}")).unwrap();
    let edge = |n: usize, c: char| TaskToken::parse(c.to_string().repeat(n)).unwrap();
    rig.step_on(&default, key, &start("evt-1"), "start").await;
    rig.step_on(&out_of_line, key, &ready(1, 0, short(1)), "short token out of line").await;
    rig.check(key, true, "short out of line").await;
    rig.step_on(&default, key, &step_input("in-1", 0, json!({"note": 1})), "merged inline").await;
    rig.check(key, true, "short inline, its item remains").await;
    rig.step_on(&inline, key, &step_input("in-2", 0, json!({"decision": "ok"})), "all inline").await;
    rig.check(key, true, "all inline").await;
    rig.step_on(&default, key, &ready(1, 1, edge(129, 'Q')), "129 chars, default").await;
    rig.check(key, true, "129 default").await;
    rig.step_on(&inline, key, &step_input("in-3", 1, json!({"note": 2})), "129 all inline").await;
    rig.check(key, true, "129 inline").await;
    rig.step_on(&out_of_line, key, &step_input("in-4", 1, json!({"note": 3})), "129 again out").await;
    rig.check(key, true, "129 out of line again").await;
    rig.step_on(&default, key, &cancel(), "cancel default").await;
    rig.check(key, true, "cancelled default").await;
    rig.step_on(&inline, key, &start("evt-2"), "restart all inline").await;
    rig.step_on(&default, key, &ready(2, 0, edge(128, 'Z')), "128 chars default (inline)").await;
    rig.check(key, true, "128 inline").await;
    rig.step_on(&out_of_line, key, &cancel(), "cancel out of line").await;
    rig.check(key, true, "cancel out of line of a 128-char token").await;
}

// ---- the known-token cache across partitions and generations --------------------------------

/// One instance writes many partitions and generations with the same token: the cache is by
/// partition and sort key, so each new item is put.
#[tokio::test]
async fn one_instance_reusing_a_token_across_partitions_and_generations_puts_each_item() {
    let rig = Rig::new().await;
    let t = tok(90);
    for key in ["k-cache-a", "k-cache-b"] {
        rig.step(key, &start("evt-1"), "start").await;
        rig.step(key, &ready(1, 0, t.clone()), "ready").await;
        rig.check(key, true, &format!("{key} ready")).await;
        rig.step(key, &cancel(), "cancel").await;
        rig.check(key, true, &format!("{key} cancel")).await;
        rig.step(key, &start("evt-2"), "restart").await;
        rig.step(key, &ready(2, 0, t.clone()), "ready g2").await;
        rig.check(key, true, &format!("{key} g2")).await;
        rig.step(key, &step_input("in-1", 0, json!({"decision": "ok"})), "complete g2").await;
        rig.step(key, &ready(2, 1, t.clone()), "ready g2 s1 same token").await;
        rig.check(key, true, &format!("{key} g2 s1")).await;
    }
    // Everything the writer referred to exists.
    for key in ["k-cache-a", "k-cache-b"] {
        let items = rig.partition(key).await;
        let record = items.iter().find(|i| sk_of(i) == "RECORD").unwrap();
        let named = named_sk(record).unwrap();
        assert!(items.iter().any(|i| sk_of(i) == named), "{key}: {named} was never put");
    }
}

// ---- invariant 1 under concurrency: loads while the lifecycle runs --------------------------

/// A loader (a fresh instance each time, and one long-lived) loads continuously while a writer
/// runs steps, cancels and restarts: between a token item's put and its record's write, the
/// Query sees the old record and the new item. Every load must be exactly a record written.
#[tokio::test]
async fn loads_during_writes_return_exactly_a_written_record() {
    let rig = Rig::new().await;
    let key = "k-live";
    let (w, k) = names(key);
    let first = rig.step(key, &start("evt-1"), "start").await;
    let script = vec![
        ready(1, 0, tok(120)),
        step_input("in-1", 0, json!({"note": 1})),
        step_input("in-2", 0, json!({"decision": "ok"})),
        ready(1, 1, tok(121)),
        cancel(),
        start("evt-2"),
        ready(2, 0, tok(122)),
        step_input("in-3", 0, json!({"decision": "ok"})),
        ready(2, 1, tok(120)),
        step_input("in-4", 1, json!({"payment_ref": "p"})),
        Input::Finished { generation: 2, finish: Finish::Succeeded },
        start("evt-3"),
        ready(3, 0, tok(121)),
        cancel(),
    ];
    let done = std::sync::atomic::AtomicBool::new(false);
    let writer = async {
        let mut written = vec![first.clone()];
        for (i, input) in script.iter().enumerate() {
            // Fresh writers put every token item: the widest window between put and write.
            let store = rig.other(|s| s.with_token_inline_max(0));
            let (current, _) = (rig.memory.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone), ());
            let write = write_of(decide_at(key, current.as_ref(), input, rig.now()));
            assert_eq!(rig.memory.apply(&write).await.unwrap(), Applied::Written, "#{i}");
            assert_eq!(store.apply(&write).await.unwrap(), Applied::Written, "#{i}");
            written.push(write.to);
            tokio::task::yield_now().await;
        }
        done.store(true, Ordering::Relaxed);
        written
    };
    let long_lived = rig.other(|s| s.with_token_inline_max(0));
    let loader = async {
        let mut seen = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let fresh = rig.other(|s| s.with_token_inline_max(0));
            seen.push(fresh.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone).expect("the record"));
            seen.push(long_lived.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone).expect("the record"));
            seen.push(long_lived.trace(&w, &k).await.unwrap().record.expect("the record"));
        }
        seen
    };
    let (written, seen) = tokio::join!(writer, loader);
    assert!(seen.len() > 4, "the loader ran alongside: {}", seen.len());
    for got in &seen {
        let same = written.iter().find(|r| r.version == got.version).expect("a written version");
        assert_eq!(
            (got.state, token_of(got).map(token_ref)),
            (same.state, token_of(same).map(token_ref)),
            "invariant 1: a load mid-write returned version {} with another token",
            got.version
        );
        assert_eq!(got, same, "invariant 1: a load mid-write returned a record never written");
    }
    rig.check(key, true, "after the live run").await;
}
