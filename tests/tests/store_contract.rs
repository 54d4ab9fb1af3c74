//! The store contract: one suite, run against the in-memory store and against DynamoDB on the
//! emulator. If the two ever disagree, a test here fails for one of them.
//!
//! Each DynamoDB test gets a table of its own. The emulator serializes DynamoDB requests
//! (tools/emulator.py); without that, the concurrency test fails on moto, which is the point of
//! the lock (see docs/DATA_MODEL.md, "Verifying atomicity").

use std::sync::Arc;

use baton_core::domain::ids::{EventId, TaskToken};
use baton_core::domain::lifecycle::{
    Finish, IgnoreReason, Input, Kind, Record, Resume, State, WaitId, WaitStatus, Write,
};
use baton_core::limits::{DRAIN_LEASE, EXPIRY_LEASE};
use baton_core::ports::store::memory::MemoryStore;
use baton_core::ports::store::{
    Applied, COUNT_UP_TO, Claim, Count, DrainTarget, DueList, Hold, InboxClaim, InboxEntry, InboxStatus,
    LedgerEntry, Receipt, ReceiptStatus, RecordHead, RegisteredConfig, Task, TaskKind, WorkflowStore,
};
use baton_tests::lifecycle_fixtures::{
    aws_length_token, decide_at, names, step_input, t0, token_of, without_token, write_of,
};
use baton_tests::{Emulator, dynamo_store};
use serde_json::{Map, json};
use time::Duration;

async fn must_write(store: &dyn WorkflowStore, write: &Write) -> Record {
    assert_eq!(store.apply(write).await.unwrap(), Applied::Written);
    write.to.clone()
}

/// A record waiting on step 0 with a token, written through the store.
async fn waiting_record(store: &dyn WorkflowStore, key: &str) -> Record {
    waiting_with_token(store, key, "token-0").await
}

/// A record waiting on step 0 with `token`, written through the store.
async fn waiting_with_token(store: &dyn WorkflowStore, key: &str, token: &str) -> Record {
    let pending = must_write(
        store,
        &write_of(decide_at(key, None, &Input::start(EventId::parse("evt-1").unwrap()), t0())),
    )
    .await;
    let ready = Input::StepReady {
        generation: 1,
        step: 0,
        token: TaskToken::parse(token).unwrap(),
        deadline: t0() + Duration::days(2),
    };
    must_write(store, &write_of(decide_at(key, Some(&pending), &ready, t0() + Duration::seconds(1)))).await
}

// ---- the contract ----------------------------------------------------------------------------

async fn create_is_idempotent_and_a_lost_create_returns_the_winner(store: Arc<dyn WorkflowStore>) {
    let start = write_of(decide_at("k-create", None, &Input::start(EventId::parse("evt-1").unwrap()), t0()));
    assert_eq!(store.apply(&start).await.unwrap(), Applied::Written);
    let (w, k) = names("k-create");
    assert_eq!(
        store.load(&w, &k).await.unwrap().as_deref(),
        Some(&start.to),
        "the record reads back exactly"
    );

    // A second create (another intake that also saw no record) loses and sees the winner.
    let mut second = start.clone();
    second.to.start_events = vec![EventId::parse("evt-other").unwrap()];
    match store.apply(&second).await.unwrap() {
        Applied::Lost { current: Some(current) } => assert_eq!(*current, start.to),
        other => panic!("expected the winner's record, got {other:?}"),
    }
}

async fn a_lost_transition_returns_the_winners_item(store: Arc<dyn WorkflowStore>) {
    let waiting = waiting_record(&*store, "k-race").await;
    let now = t0() + Duration::seconds(2);
    let a = write_of(decide_at("k-race", Some(&waiting), &step_input("cb-a", 0, json!({"note": "a"})), now));
    let b =
        write_of(decide_at("k-race", Some(&waiting), &step_input("cb-b", 0, json!({"decision": "ok"})), now));
    assert_eq!(store.apply(&a).await.unwrap(), Applied::Written);
    match store.apply(&b).await.unwrap() {
        Applied::Lost { current: Some(current) } => {
            assert_eq!(*current, a.to, "ALL_OLD gives the winner's record, no extra read needed");
            assert_eq!(current.version, waiting.version + 1);
        }
        other => panic!("expected Lost with the winner, got {other:?}"),
    }
    // Deciding again on the returned record gives a write that wins.
    let (w, k) = names("k-race");
    let current = store.load(&w, &k).await.unwrap().unwrap();
    let retry =
        write_of(decide_at("k-race", Some(&current), &step_input("cb-b", 0, json!({"decision": "ok"})), now));
    let advanced = must_write(&*store, &retry).await;
    assert_eq!(advanced.state, State::Advancing { step: 0 });
    assert_eq!(
        *advanced.waits[0].inputs,
        Map::from_iter([("note".into(), json!("a")), ("decision".into(), json!("ok"))])
    );
}

async fn a_write_from_a_state_the_table_forbids_is_refused(store: Arc<dyn WorkflowStore>) {
    let waiting = waiting_record(&*store, "k-table").await;
    let (w, k) = names("k-table");
    // A terminal record cannot be moved by a cancel decided on its earlier state.
    let finished = write_of(decide_at(
        "k-table",
        Some(&waiting),
        &Input::Finished { generation: 1, finish: Finish::TimedOut },
        t0(),
    ));
    must_write(&*store, &finished).await;
    let cancel =
        write_of(decide_at("k-table", Some(&waiting), &Input::Cancel { reason: "late".into() }, t0()));
    assert!(
        matches!(store.apply(&cancel).await.unwrap(), Applied::Lost { current: Some(c) } if c.state == State::TimedOut)
    );
    assert_eq!(
        store.load(&w, &k).await.unwrap().unwrap().state,
        State::TimedOut,
        "a terminal record never changes"
    );

    // Same version, but a state the table does not allow for this cause: still refused.
    let mut forged = cancel.clone();
    forged.expected_version = Some(finished.to.version);
    forged.from = Some(State::TimedOut);
    assert!(store.apply(&forged).await.is_err(), "a write outside the table never reaches the store");
}

async fn restart_opens_a_new_generation_from_a_terminal_record(store: Arc<dyn WorkflowStore>) {
    let waiting = waiting_record(&*store, "k-restart").await;
    let cancelled = must_write(
        &*store,
        &write_of(decide_at("k-restart", Some(&waiting), &Input::Cancel { reason: "x".into() }, t0())),
    )
    .await;
    let restart = write_of(decide_at(
        "k-restart",
        Some(&cancelled),
        &Input::start(EventId::parse("evt-2").unwrap()),
        t0(),
    ));
    let second = must_write(&*store, &restart).await;
    assert_eq!((second.generation, second.state), (2, State::Pending));
    let (w, k) = names("k-restart");
    assert_eq!(*store.load(&w, &k).await.unwrap().unwrap(), second);
}

fn task(step: u32, title: &str) -> Task {
    let (w, k) = names("k-task");
    Task {
        id: Task::task_id(&w, &k, 1, "manual-review", 1, TaskKind::Step),
        workflow: w,
        key: k,
        generation: 1,
        step,
        step_name: "manual-review".into(),
        title: title.into(),
        queue: "risk-review".into(),
        created_at: t0(),
        published: false,
        attempt: 1,
        previous_error: None,
        kind: TaskKind::Step,
        notice: 0,
    }
}

async fn task_creation_is_idempotent(store: Arc<dyn WorkflowStore>) {
    let first = task(0, "Review order k-task");
    assert_eq!(store.put_task(&first).await.unwrap(), Claim::Acquired);
    let again = task(0, "a different title from a redelivery");
    assert_eq!(store.put_task(&again).await.unwrap(), Claim::Exists(first.clone()));
    assert_eq!(store.put_task(&task(1, "next step")).await.unwrap(), Claim::Acquired);

    store.mark_task_published(&first).await.unwrap();
    store.mark_task_published(&first).await.unwrap();
    let (w, k) = names("k-task");
    let trace = store.trace(&w, &k).await.unwrap();
    assert_eq!(trace.tasks.len(), 2);
    assert_eq!(trace.tasks[0], Task { published: true, ..first });
    assert!(!trace.tasks[1].published);
}

/// A step's compensation task is a task of its own beside the step's (same generation, step and
/// attempt), claimed once, and read back as a compensation.
async fn a_compensation_task_is_claimed_apart_from_its_steps(store: Arc<dyn WorkflowStore>) {
    let (w, k) = names("k-task");
    let step = task(0, "Review order k-task");
    let undo = Task {
        id: Task::task_id(&w, &k, 1, "manual-review", 1, TaskKind::Compensation),
        title: "Undo the review".into(),
        kind: TaskKind::Compensation,
        ..step.clone()
    };
    assert_ne!(undo.id, step.id);
    assert_eq!(store.put_task(&step).await.unwrap(), Claim::Acquired);
    store.mark_task_published(&step).await.unwrap();
    assert_eq!(store.put_task(&undo).await.unwrap(), Claim::Acquired);
    assert_eq!(store.put_task(&undo).await.unwrap(), Claim::Exists(undo.clone()));
    let trace = store.trace(&w, &k).await.unwrap();
    let undone: Vec<&Task> = trace.tasks.iter().filter(|t| t.kind == TaskKind::Compensation).collect();
    assert_eq!(undone, [&undo], "the compensation reads back as one, unpublished");
    assert!(trace.tasks.iter().any(|t| t.kind == TaskKind::Step && t.published));
}

/// The list of the records of `kind` that owe no work: whose deadlines are only watched.
fn watched(kind: Kind) -> DueList {
    DueList { kind, work: false }
}

fn receipt(id: &str, hash: &str) -> Receipt {
    let (w, k) = names("k-receipt");
    Receipt {
        workflow: w,
        key: k,
        target: "review".into(),
        id: EventId::parse(id).unwrap(),
        hash: hash.into(),
        status: ReceiptStatus::Pending,
        answer: None,
        created_at: t0(),
        expires_at: t0() + Duration::days(7),
        repeats: 0,
        last_repeat_at: None,
        lease: None,
    }
}

async fn a_receipt_with_the_same_id_and_another_payload_returns_the_stored_one(
    store: Arc<dyn WorkflowStore>,
) {
    let first = receipt("msg_1", "hash-a");
    assert_eq!(store.put_receipt(&first).await.unwrap(), Claim::Acquired);
    match store.put_receipt(&receipt("msg_1", "hash-b")).await.unwrap() {
        Claim::Exists(stored) => {
            assert_eq!(stored.hash, "hash-a", "the stored payload hash, to detect the reused key");
            assert_eq!(stored.status, ReceiptStatus::Pending);
        }
        Claim::Acquired => panic!("a second receipt for the same id must not be created"),
    }
    store.complete_receipt(&first, json!({"status": "applied"})).await.unwrap();
    store.complete_receipt(&first, json!({"status": "something else"})).await.unwrap();
    match store.put_receipt(&first).await.unwrap() {
        Claim::Exists(stored) => {
            assert_eq!(stored.status, ReceiptStatus::Done);
            assert_eq!(stored.answer, Some(json!({"status": "applied"})), "the first answer stands");
            assert_eq!(stored.expires_at, first.expires_at, "TTL attribute kept");
            assert_eq!((stored.repeats, stored.last_repeat_at), (0, None), "no repeat yet");
        }
        Claim::Acquired => panic!("receipt vanished"),
    }
}

/// Receipts are kept per target (a step, or its compensation): one id sent for another step, or
/// for the step's compensation, is another receipt, so a sender scoped to one step cannot hold
/// another step's task ids and have its worker refused (found by review).
async fn one_id_for_two_targets_is_two_receipts(store: Arc<dyn WorkflowStore>) {
    let review = receipt("task-of-payment", "hash-a");
    let payment =
        Receipt { target: Receipt::target_of("payment", false), hash: "hash-b".into(), ..review.clone() };
    let undo =
        Receipt { target: Receipt::target_of("payment", true), hash: "hash-c".into(), ..review.clone() };
    for r in [&review, &payment, &undo] {
        assert_eq!(store.put_receipt(r).await.unwrap(), Claim::Acquired, "{}", r.target);
    }
    store.complete_receipt(&payment, json!({"status": "applied"})).await.unwrap();
    let (w, k) = names("k-receipt");
    let mut kept: Vec<(String, String)> =
        store.trace(&w, &k).await.unwrap().receipts.into_iter().map(|r| (r.target, r.hash)).collect();
    kept.sort();
    assert_eq!(
        kept,
        [
            ("payment".into(), "hash-b".into()),
            ("payment/undo".into(), "hash-c".into()),
            ("review".into(), "hash-a".into())
        ]
    );
}

/// A receipt its own attempt wrote and left pending, applying nothing, is released: the retry
/// finds no receipt. One taken over, done, or written at another time is left as it is.
async fn only_the_attempt_that_wrote_a_pending_receipt_releases_it(store: Arc<dyn WorkflowStore>) {
    let mine = receipt("msg_release", "hash-a");
    assert_eq!(store.put_receipt(&mine).await.unwrap(), Claim::Acquired);
    let other_time = Receipt { created_at: mine.created_at + Duration::seconds(1), ..mine.clone() };
    store.release_receipt(&other_time).await.unwrap();
    assert!(
        matches!(store.put_receipt(&mine).await.unwrap(), Claim::Exists(_)),
        "another attempt's write kept"
    );
    store.release_receipt(&mine).await.unwrap();
    assert_eq!(store.put_receipt(&mine).await.unwrap(), Claim::Acquired, "released: a retry starts afresh");
    let hold = Hold { by: "retry".into(), at: t0() + Duration::seconds(60) };
    assert_eq!(store.take_over_receipt(&mine, &hold).await.unwrap(), Claim::Acquired);
    store.release_receipt(&mine).await.unwrap();
    assert!(matches!(store.put_receipt(&mine).await.unwrap(), Claim::Exists(_)), "a taken-over receipt kept");
    let done = receipt("msg_release_done", "hash-a");
    store.put_receipt(&done).await.unwrap();
    store.complete_receipt(&done, json!({"status": "applied"})).await.unwrap();
    store.release_receipt(&done).await.unwrap();
    assert!(
        matches!(store.put_receipt(&done).await.unwrap(), Claim::Exists(r) if r.status == ReceiptStatus::Done)
    );
}

async fn a_stale_pending_receipt_is_taken_over_by_one_attempt(store: Arc<dyn WorkflowStore>) {
    let first = receipt("msg_3", "hash-a");
    assert_eq!(store.put_receipt(&first).await.unwrap(), Claim::Acquired);
    let hold = |by: &str| Hold { by: by.into(), at: t0() + Duration::seconds(60) };
    // Two retries read it as created; one takes it over, the other finds it held afresh.
    assert_eq!(store.take_over_receipt(&first, &hold("retry-a")).await.unwrap(), Claim::Acquired);
    match store.take_over_receipt(&first, &hold("retry-b")).await.unwrap() {
        Claim::Exists(r) => {
            assert_eq!(r.lease, Some(hold("retry-a")));
            assert_eq!(r.held_since(), t0() + Duration::seconds(60));
        }
        Claim::Acquired => panic!("two attempts took one receipt over"),
    }
    // A later retry that read it held by A takes it over from A.
    let held = Receipt { lease: Some(hold("retry-a")), ..first.clone() };
    assert_eq!(store.take_over_receipt(&held, &hold("retry-c")).await.unwrap(), Claim::Acquired);
    // Done, it is never taken over.
    store.complete_receipt(&first, json!({"status": "applied"})).await.unwrap();
    let done = Receipt { lease: Some(hold("retry-c")), ..first.clone() };
    match store.take_over_receipt(&done, &hold("retry-d")).await.unwrap() {
        Claim::Exists(r) => assert_eq!(r.answer, Some(json!({"status": "applied"}))),
        Claim::Acquired => panic!("a done receipt was taken over"),
    }
}

async fn a_repeat_is_counted_on_its_receipt_and_never_creates_one(store: Arc<dyn WorkflowStore>) {
    let first = receipt("msg_2", "hash-a");
    assert_eq!(store.put_receipt(&first).await.unwrap(), Claim::Acquired);
    store.complete_receipt(&first, json!({"status": "applied"})).await.unwrap();
    store.note_repeat(&first, t0() + Duration::seconds(5)).await.unwrap();
    store.note_repeat(&first, t0() + Duration::seconds(9)).await.unwrap();
    let trace = store.trace(&first.workflow, &first.key).await.unwrap();
    let stored = trace.receipts.iter().find(|r| r.id == first.id).expect("the receipt");
    assert_eq!((stored.repeats, stored.last_repeat_at), (2, Some(t0() + Duration::seconds(9))));
    assert_eq!(stored.answer, Some(json!({"status": "applied"})), "the answer is untouched");
    // A receipt that is gone (expired) is not created again by a late repeat.
    let gone = receipt("msg_never", "hash-a");
    store.note_repeat(&gone, t0()).await.unwrap();
    let trace = store.trace(&first.workflow, &first.key).await.unwrap();
    assert!(trace.receipts.iter().all(|r| r.id != gone.id), "{:?}", trace.receipts);
}

fn entry(id: &str, step: u32, arrived: i64) -> InboxEntry {
    let (w, k) = names("k-inbox");
    InboxEntry {
        workflow: w,
        key: k,
        step,
        step_name: format!("step-{step}"),
        config_version: "v1".into(),
        id: EventId::parse(id).unwrap(),
        generation: 1,
        arrived_at: t0() + Duration::seconds(arrived),
        input: json!({"id": id}),
        status: InboxStatus::Buffered,
        expires_at: t0() + Duration::seconds(100 + arrived),
        expiry_hold: None,
        drain_target: None,
        drained_at: None,
        callback_key: false,
    }
}

async fn the_inbox_keeps_arrival_order_and_settles_once(store: Arc<dyn WorkflowStore>) {
    // Inserted out of arrival order, with ids that sort against it.
    for e in [
        entry("zz-second", 0, 2),
        entry("aa-third", 0, 3),
        entry("mm-first", 0, 1),
        entry("other-step", 1, 0),
    ] {
        assert_eq!(store.buffer(&e).await.unwrap(), Claim::Acquired);
    }
    assert_eq!(store.buffer(&entry("mm-first", 0, 9)).await.unwrap(), Claim::Exists(entry("mm-first", 0, 1)));
    let (w, k) = names("k-inbox");
    let inbox = store.inbox(&w, &k, "step-0").await.unwrap();
    let ids: Vec<&str> = inbox.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["mm-first", "zz-second", "aa-third"]);

    assert_eq!(
        store.settle(&inbox[0], InboxStatus::Buffered, InboxStatus::Applied).await.unwrap(),
        Claim::Acquired
    );
    match store.settle(&inbox[0], InboxStatus::Buffered, InboxStatus::Expired).await.unwrap() {
        Claim::Exists(e) => assert_eq!(e.status, InboxStatus::Applied, "the loser sees how it was settled"),
        Claim::Acquired => panic!("an entry settles once"),
    }
    // Expired and still buffered: the two entries due at t0+102 and t0+103 (not the applied one).
    let expired = store.expired_buffers(t0() + Duration::seconds(103), 10).await.unwrap();
    let ids: Vec<&str> = expired.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["other-step", "zz-second", "aa-third"]);
    assert_eq!(store.expired_buffers(t0() + Duration::seconds(103), 1).await.unwrap().len(), 1, "limit");
}

/// An early event and an early callback with one id are two entries (their ids are chosen by
/// different parties); each settles on its own.
async fn an_event_and_a_callback_with_one_id_are_two_entries(store: Arc<dyn WorkflowStore>) {
    let from = |source: &str, callback_key: bool| InboxEntry {
        input: json!({"id": "same", "source": source}),
        callback_key,
        ..entry("same", 0, 1)
    };
    let (event, callback) = (from("event", false), from("callback", true));
    assert_eq!(store.buffer(&event).await.unwrap(), Claim::Acquired);
    assert_eq!(
        store.buffer(&callback).await.unwrap(),
        Claim::Acquired,
        "the callback is an entry of its own"
    );
    assert_eq!(store.buffer(&callback).await.unwrap(), Claim::Exists(callback.clone()));
    let (w, k) = names("k-inbox");
    let inbox = store.inbox(&w, &k, "step-0").await.unwrap();
    assert_eq!(inbox.len(), 2, "{inbox:?}");
    assert!(inbox.contains(&event) && inbox.contains(&callback));
    assert_eq!(
        store.settle(&callback, InboxStatus::Buffered, InboxStatus::Applied).await.unwrap(),
        Claim::Acquired
    );
    let inbox = store.inbox(&w, &k, "step-0").await.unwrap();
    let status = |e: &InboxEntry| inbox.iter().find(|x| x.same_input(e)).map(|x| x.status);
    assert_eq!(
        (status(&event), status(&callback)),
        (Some(InboxStatus::Buffered), Some(InboxStatus::Applied))
    );
}

/// The claims that keep a drain and the sweeper from both deciding one entry (InboxClaim).
async fn a_drain_and_the_sweeper_never_hold_an_entry_at_once(store: Arc<dyn WorkflowStore>) {
    let hold = |by: &str, at: i64| Hold { by: by.into(), at: t0() + Duration::seconds(at) };
    let (drained, expired) = (entry("cb-drained", 0, 0), entry("cb-expired", 0, 1));
    for e in [&drained, &expired] {
        assert_eq!(store.buffer(e).await.unwrap(), Claim::Acquired);
    }
    let status_of = |id: &'static str| {
        let store = store.clone();
        async move {
            let (w, k) = names("k-inbox");
            let inbox = store.inbox(&w, &k, "step-0").await.unwrap();
            inbox.into_iter().find(|e| e.id.as_str() == id).expect("the entry")
        }
    };
    // Drains share their claim; the sweeper cannot take an entry a drain holds.
    let drain = InboxClaim::Drain(DrainTarget { generation: 1, step: 0 }, t0());
    assert!(drain.held(&store.claim(&drained, &drain).await.unwrap()));
    assert_eq!(store.claim(&drained, &drain).await.unwrap(), Claim::Acquired, "a second drain shares it");
    assert_eq!(status_of("cb-drained").await.drain_target, Some(DrainTarget { generation: 1, step: 0 }));
    let sweep_a = InboxClaim::Expire(hold("sweep-a", 200));
    let answer = store.claim(&drained, &sweep_a).await.unwrap();
    assert!(!sweep_a.held(&answer), "{answer:?}");
    assert!(matches!(answer, Claim::Exists(e) if e.status == InboxStatus::Draining));

    // One sweep holds an expiry; a drain cannot take it, nor another sweep inside the lease.
    assert_eq!(store.claim(&expired, &sweep_a).await.unwrap(), Claim::Acquired);
    assert!(sweep_a.held(&store.claim(&expired, &sweep_a).await.unwrap()), "its holder takes it again");
    assert!(!drain.held(&store.claim(&expired, &drain).await.unwrap()), "a drain leaves it");
    let inside = InboxClaim::Expire(hold("sweep-b", 200 + EXPIRY_LEASE.whole_seconds() - 1));
    assert!(!inside.held(&store.claim(&expired, &inside).await.unwrap()), "taken over inside the lease");
    let stored = status_of("cb-expired").await;
    assert_eq!((stored.status, stored.expiry_hold), (InboxStatus::Expiring, Some(hold("sweep-a", 200))));
    // Only the holder gives it back.
    let not_mine = InboxClaim::Release(hold("sweep-b", 300));
    assert!(!not_mine.held(&store.claim(&expired, &not_mine).await.unwrap()));
    // Past the lease, another sweep takes it over.
    let after = InboxClaim::Expire(hold("sweep-b", 200 + EXPIRY_LEASE.whole_seconds()));
    assert_eq!(store.claim(&expired, &after).await.unwrap(), Claim::Acquired);
    assert_eq!(
        status_of("cb-expired").await.expiry_hold,
        Some(hold("sweep-b", 200 + EXPIRY_LEASE.whole_seconds()))
    );
    let release = InboxClaim::Release(hold("sweep-b", 0));
    assert_eq!(store.claim(&expired, &release).await.unwrap(), Claim::Acquired);
    let back = status_of("cb-expired").await;
    assert_eq!((back.status, back.expiry_hold), (InboxStatus::Buffered, None), "given back, unheld");

    // Both are still due for the sweeper while open; only the holder's status settles.
    let due: Vec<String> = store
        .expired_buffers(t0() + Duration::seconds(500), 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id.to_string())
        .collect();
    assert_eq!(due, ["cb-drained", "cb-expired"]);
    assert_eq!(store.claim(&drained, &InboxClaim::Undrain).await.unwrap(), Claim::Acquired);
    let back = status_of("cb-drained").await;
    assert_eq!((back.status, back.drain_target), (InboxStatus::Buffered, None));
    assert_eq!(store.claim(&drained, &drain).await.unwrap(), Claim::Acquired);
    let answer = store.settle(&drained, InboxStatus::Expiring, InboxStatus::Expired).await.unwrap();
    assert!(
        matches!(answer, Claim::Exists(e) if e.status == InboxStatus::Draining),
        "only its holder settles it"
    );
    assert_eq!(
        store.settle(&drained, InboxStatus::Draining, InboxStatus::Applied).await.unwrap(),
        Claim::Acquired
    );
    assert!(!drain.held(&store.claim(&drained, &drain).await.unwrap()), "a settled entry is never claimed");
    let due = store.expired_buffers(t0() + Duration::seconds(500), 10).await.unwrap();
    assert_eq!(
        due.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["cb-expired"],
        "settled leaves the index"
    );
}

/// A drain holds an entry for `DRAIN_LEASE`. Past it, the entry is due for the sweeper (which
/// finishes a drain that died) long before its own expiry; given back, it is due at its expiry
/// again.
async fn a_drain_that_outlives_its_lease_is_due_before_the_entry_expires(store: Arc<dyn WorkflowStore>) {
    let mut long = entry("cb-long", 0, 0);
    long.expires_at = t0() + Duration::days(1);
    assert_eq!(store.buffer(&long).await.unwrap(), Claim::Acquired);
    let due = |after: Duration| {
        let store = store.clone();
        async move {
            let due = store.expired_buffers(t0() + after, 10).await.unwrap();
            due.into_iter().map(|e| e.id.to_string()).collect::<Vec<_>>()
        }
    };
    assert!(due(DRAIN_LEASE).await.is_empty(), "buffered: due at its expiry");
    let drain = InboxClaim::Drain(DrainTarget { generation: 1, step: 0 }, t0());
    assert_eq!(store.claim(&long, &drain).await.unwrap(), Claim::Acquired);
    assert!(due(DRAIN_LEASE - Duration::seconds(1)).await.is_empty(), "inside the drain's lease");
    assert_eq!(due(DRAIN_LEASE).await, ["cb-long"], "the drain's lease ran out");
    let (w, k) = names("k-inbox");
    let stored = store.inbox(&w, &k, "step-0").await.unwrap();
    assert_eq!(stored[0].drained_at, Some(t0()));
    assert_eq!(store.claim(&long, &InboxClaim::Undrain).await.unwrap(), Claim::Acquired);
    assert!(due(DRAIN_LEASE).await.is_empty(), "given back: due at its expiry again");
    assert_eq!(due(Duration::days(1)).await, ["cb-long"]);
}

async fn ledger_entries_are_idempotent_and_traced(store: Arc<dyn WorkflowStore>) {
    let waiting = waiting_record(&*store, "k-ledger").await;
    let (w, k) = names("k-ledger");
    let ledger = LedgerEntry {
        workflow: w.clone(),
        key: k.clone(),
        input_id: "cb-late".into(),
        reason: IgnoreReason::Terminal,
        generation: Some(1),
        state: Some("timed_out".into()),
        detail: json!({"kind": "callback", "step": "manual-review"}),
        config_version: Some("v1".into()),
        at: t0() + Duration::seconds(5),
        expires_at: t0() + Duration::days(90),
    };
    store.put_ledger(&ledger).await.unwrap();
    store.put_ledger(&LedgerEntry { at: t0() + Duration::seconds(9), ..ledger.clone() }).await.unwrap();
    store
        .put_receipt(&Receipt { workflow: w.clone(), key: k.clone(), ..receipt("cb-late", "h") })
        .await
        .unwrap();
    store
        .buffer(&InboxEntry { workflow: w.clone(), key: k.clone(), ..entry("cb-early", 1, 0) })
        .await
        .unwrap();

    assert!(store.ledgered(&w, &k, "cb-late", IgnoreReason::Terminal).await.unwrap());
    assert!(
        !store.ledgered(&w, &k, "cb-late", IgnoreReason::AlreadyRunning).await.unwrap(),
        "another reason"
    );
    assert!(!store.ledgered(&w, &k, "cb-other", IgnoreReason::Terminal).await.unwrap(), "another input");
    let (_, elsewhere) = names("k-ledger-other");
    assert!(!store.ledgered(&w, &elsewhere, "cb-late", IgnoreReason::Terminal).await.unwrap(), "another key");

    let trace = store.trace(&w, &k).await.unwrap();
    assert_eq!(trace.ledger, vec![ledger], "one entry per (input, reason), the first kept");
    assert_eq!(trace.record, Some(waiting));
    assert_eq!(trace.receipts.len(), 1);
    assert_eq!(trace.inbox.len(), 1);
    assert!(trace.tasks.is_empty());
    let history: Vec<Kind> = trace
        .record
        .unwrap()
        .history
        .iter()
        .map(|a| Kind::parse(a.to.split('{').next().unwrap()).unwrap())
        .collect();
    assert_eq!(history, [Kind::Pending, Kind::Waiting], "the audit trail is in the record");
}

async fn due_records_and_counts_by_state(store: Arc<dyn WorkflowStore>) {
    let waiting = waiting_record(&*store, "k-due-1").await; // deadline t0 + 2d
    let pending = must_write(
        &*store,
        &write_of(decide_at("k-due-2", None, &Input::start(EventId::parse("evt-9").unwrap()), t0())),
    )
    .await;
    let due_pending = store.due(DueList { kind: Kind::Pending, work: true }, t0(), 10).await.unwrap();
    assert_eq!(due_pending, vec![Arc::new(pending.clone())]);
    assert!(
        store
            .due(DueList { kind: Kind::Pending, work: true }, t0() - Duration::seconds(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store.due(watched(Kind::Waiting), t0() + Duration::days(1), 10).await.unwrap().is_empty(),
        "not past its deadline"
    );
    assert_eq!(
        store.due(watched(Kind::Waiting), t0() + Duration::days(2), 10).await.unwrap(),
        vec![Arc::new(waiting)]
    );
    let counts = store.count_by_state(COUNT_UP_TO).await.unwrap();
    assert_eq!(counts.get(&Kind::Pending), Some(&Count::Exact(1)));
    assert_eq!(counts.get(&Kind::Waiting), Some(&Count::Exact(1)));
    assert_eq!(counts.get(&Kind::Succeeded), None, "a state with none is left out");
    let bounded = store.count_by_state(0).await.unwrap();
    assert_eq!(bounded.get(&Kind::Waiting), Some(&Count::MoreThan(0)), "past the bound, it says so");
    assert_eq!(store.count_by_state(1).await.unwrap(), counts, "at the bound, exact");
}

/// Owed work has a list of its own in the index (`DueList`): a waiting record whose next
/// attempt is due is listed there on time, apart from the waits whose deadlines are only
/// watched; a stranded record is on neither of the sweeper's lists and is counted as stranded.
async fn owed_work_has_a_list_of_its_own(store: Arc<dyn WorkflowStore>) {
    let watched_wait = waiting_record(&*store, "k-list-watch").await; // deadline t0 + 2d
    let owing = waiting_record(&*store, "k-list-work").await;
    let heartbeat = Input::StepInput {
        id: EventId::parse("hb-1").unwrap(),
        hash: "h".into(),
        source: baton_core::domain::lifecycle::Source::Callback,
        step: 0,
        outcome: baton_core::domain::lifecycle::StepOutcome::InProgress,
        data: Default::default(),
        generation: None,
        attempt: None,
    };
    let mut write = write_of(decide_at("k-list-work", Some(&owing), &heartbeat, t0() + Duration::seconds(2)));
    write.to.waits[0].status = WaitStatus::TaskDue { at: t0() + Duration::minutes(10) };
    let owing = must_write(&*store, &write).await;
    let gone = waiting_record(&*store, "k-list-gone").await;
    let stranded = Input::ExecutionGone { generation: 1, status: "ABORTED".into(), error: None };
    let stranded =
        must_write(&*store, &write_of(decide_at("k-list-gone", Some(&gone), &stranded, t0()))).await;
    assert_eq!(stranded.state.kind(), Kind::Stranded);

    let hour = t0() + Duration::hours(1);
    let work = DueList { kind: Kind::Waiting, work: true };
    assert_eq!(
        store.due(work, hour, 10).await.unwrap(),
        vec![Arc::new(owing.clone())],
        "the attempt due is on the work list"
    );
    assert!(store.due(watched(Kind::Waiting), hour, 10).await.unwrap().is_empty());
    assert_eq!(
        store.due(watched(Kind::Waiting), t0() + Duration::days(3), 10).await.unwrap(),
        vec![Arc::new(watched_wait)]
    );
    assert!(
        store.due(work, t0() + Duration::minutes(9), 10).await.unwrap().is_empty(),
        "not before it is due"
    );
    let counts = store.count_by_state(COUNT_UP_TO).await.unwrap();
    assert_eq!(counts.get(&Kind::Waiting), Some(&Count::Exact(2)), "both lists count as waiting");
    assert_eq!(counts.get(&Kind::Stranded), Some(&Count::Exact(1)));
    let heads = store.due_heads(Kind::Waiting, t0() + Duration::days(3), 10).await.unwrap();
    assert_eq!(heads.len(), 2, "the live records of a state, on either list");
}

/// 50 writers decide from the same record at the same moment; exactly one may win, 100 times.
async fn exactly_one_of_fifty_concurrent_transitions_wins(store: Arc<dyn WorkflowStore>) {
    const WRITERS: usize = 50;
    const ROUNDS: usize = 100;
    for round in 0..ROUNDS {
        let key = format!("k-concurrent-{round}");
        let waiting = waiting_record(&*store, &key).await;
        let mut handles = Vec::with_capacity(WRITERS);
        for writer in 0..WRITERS {
            let store = store.clone();
            let mut write = write_of(decide_at(
                &key,
                Some(&waiting),
                &step_input(&format!("cb-{writer}"), 0, json!({"note": writer})),
                t0(),
            ));
            write.to.write_id = Some(format!("w-{round}-{writer}"));
            handles.push(tokio::spawn(async move { (store.apply(&write).await, write.to.write_id) }));
        }
        let mut winners = 0;
        for h in handles {
            let (applied, mine) = h.await.unwrap();
            match applied.unwrap() {
                Applied::Written => winners += 1,
                // A write whose answer was lost, found in place by the SDK's retry: it won (the
                // engine counts it so, by its write id).
                Applied::Lost { current: Some(c) } if c.write_id == mine => winners += 1,
                Applied::Lost { current: Some(c) } => {
                    assert_eq!(c.version, waiting.version + 1, "round {round}")
                }
                Applied::Lost { current: None } => panic!("round {round}: the record vanished"),
            }
        }
        assert_eq!(winners, 1, "round {round}: {winners} writers won the same transition");
        let (w, k) = names(&key);
        let stored = store.load(&w, &k).await.unwrap().unwrap();
        assert_eq!(stored.applied.len(), 1, "round {round}: exactly one merge landed");
    }
}

async fn config_versions_are_registered_once_and_listed_oldest_first(store: Arc<dyn WorkflowStore>) {
    let at = |s| t0() + Duration::seconds(s);
    let v1 = RegisteredConfig {
        version: "v1".into(),
        canonical: "{\"a\":1}".into(),
        registered_at: at(0),
        started_at: at(0),
    };
    store.register_config(&v1, true).await.unwrap();
    let again = RegisteredConfig {
        canonical: "changed".into(),
        registered_at: at(5),
        started_at: at(5),
        ..v1.clone()
    };
    store.register_config(&again, true).await.unwrap();
    let v2 = RegisteredConfig {
        version: "v2".into(),
        canonical: "{}".into(),
        registered_at: at(9),
        started_at: at(9),
    };
    store.register_config(&v2, true).await.unwrap();
    let all = store.configs().await.unwrap();
    let v1_restarted = RegisteredConfig { started_at: at(5), ..v1.clone() };
    assert_eq!(
        all,
        vec![v1_restarted.clone(), v2.clone()],
        "the first registration of a version stands; its start time moves"
    );
    // An operator's write on v1 (a replay from a v1 checkout) registers it, but started nothing.
    store.register_config(&RegisteredConfig { started_at: at(15), ..v1.clone() }, false).await.unwrap();
    assert_eq!(store.configs().await.unwrap(), vec![v1_restarted, v2.clone()], "no start moved");
    // A version never registered is, with the time it was first seen.
    let v3 =
        RegisteredConfig { version: "v3".into(), registered_at: at(16), started_at: at(16), ..v2.clone() };
    store.register_config(&v3, false).await.unwrap();
    assert_eq!(store.configs().await.unwrap().last(), Some(&v3));
    // A rollback: v1 starts again after v2.
    store.register_config(&RegisteredConfig { started_at: at(20), ..v1.clone() }, true).await.unwrap();
    let all = store.configs().await.unwrap();
    assert_eq!(
        all,
        vec![RegisteredConfig { started_at: at(20), ..v1 }, v2, v3],
        "still listed by first registration"
    );
}

/// A token as long as AWS's, in base64 or not, reads back from every read of the record: a load,
/// the record a lost write returns, the trace, the due records; through a resume owed and a
/// cancel, which keeps it.
async fn a_long_task_token_reads_back_from_every_read(store: Arc<dyn WorkflowStore>) {
    let not_base64 = format!("{}!", "t".repeat(TaskToken::MAX_LEN - 1));
    assert_eq!((aws_length_token(7).len(), not_base64.len()), (2048, 2048), "the API's longest");
    for (key, token) in [("k-token-b64", aws_length_token(7)), ("k-token-text", not_base64)] {
        let (w, k) = names(key);
        let waiting = waiting_with_token(&*store, key, &token).await;
        assert_eq!(waiting.waits[0].token.as_ref().map(TaskToken::expose), Some(token.as_str()));
        assert_eq!(store.load(&w, &k).await.unwrap().as_deref(), Some(&waiting), "{key}: load");
        assert_eq!(store.trace(&w, &k).await.unwrap().record.as_ref(), Some(&waiting), "{key}: trace");
        let due = store.due(watched(Kind::Waiting), t0() + Duration::days(3), 100).await.unwrap();
        assert!(due.iter().any(|r| **r == waiting), "{key}: due");
        let heads = store.due_heads(Kind::Waiting, t0() + Duration::days(3), 100).await.unwrap();
        assert_eq!(heads, due.iter().map(|r| RecordHead::of(r)).collect::<Vec<_>>(), "{key}: due_heads");

        let now = t0() + Duration::seconds(2);
        let advance = write_of(decide_at(
            key,
            Some(&waiting),
            &step_input(&format!("{key}-a"), 0, json!({"decision": "ok"})),
            now,
        ));
        let advancing = must_write(&*store, &advance).await;
        assert_eq!(advancing.state, State::Advancing { step: 0 });
        assert_eq!(store.load(&w, &k).await.unwrap().as_deref(), Some(&advancing), "{key}: the resume owed");
        let stale = write_of(decide_at(key, Some(&waiting), &Input::Cancel { reason: "late".into() }, now));
        match store.apply(&stale).await.unwrap() {
            Applied::Lost { current: Some(current) } => assert_eq!(*current, advancing, "{key}: ALL_OLD"),
            other => panic!("{key}: expected Lost with the winner, got {other:?}"),
        }
        let cancel = write_of(decide_at(key, Some(&advancing), &Input::Cancel { reason: "x".into() }, now));
        let cancelled = must_write(&*store, &cancel).await;
        assert_eq!(cancelled.state, State::Cancelled);
        assert_eq!(
            cancelled.waits[0].token.as_ref().map(TaskToken::expose),
            Some(token.as_str()),
            "{key}: kept"
        );
        assert_eq!(store.load(&w, &k).await.unwrap().as_deref(), Some(&cancelled), "{key}: cancelled");
    }
}

/// A workflow with a compensated step and a parallel group, for the long-token path.
const LONG_TOKENS: &str = r#"
workflows:
  order-review:
    start: { when: { type: ["order.placed"] }, key: /subject }
    steps:
      - name: reserve
        requires: [hold]
        timeout: 2d
        compensate: { task: { title: "Release {key}", queue: q }, timeout: 2d }
      - parallel:
          name: checks
          branches:
            - { name: fraud, requires: [score], timeout: 2d }
            - { name: credit, requires: [credit_ok], timeout: 2d }
"#;

/// A report as the generated state machine sends it, parked on `token`.
fn parked_report(kind: &str, key: &str, step: (u32, &str), token: &str) -> String {
    let mut report = json!({
        "kind": kind, "workflow": "order-review", "key": key, "generation": 1,
        "step": step.0, "step_name": step.1, "config_version": "v1", "token": token,
        "entered_at": "2026-12-01T09:00:00Z", "timeout_seconds": 172_800,
    });
    if kind == "undo_ready" {
        report["failure"] = json!({"Error": "Rejected", "Cause": "fraud"});
    }
    report.to_string()
}

/// Found by review: Step Functions' API takes tokens of up to 2,048 characters, and baton refused
/// those over 1,024, so their step_ready was dead-lettered on every replay. A 2,048-character
/// token now takes every path, on both stores: a step's step_ready (its token in a token item on
/// DynamoDB), the callback that resumes it (the resume carries the whole token), a parallel
/// group's branches (their tokens inline in the record's JSON, base64 or not), a failed branch's
/// resume, a compensation's undo_ready and the acknowledgement that resumes it, and a cancel with
/// compensation, which fails every parked token.
#[expect(clippy::too_many_lines, reason = "a contract case reads as one story, step by step")]
async fn a_2048_character_token_takes_every_path(store: Arc<dyn WorkflowStore>) {
    use baton_core::domain::config::Config;
    use baton_core::domain::lifecycle::{Effect, StepOutcome, decide};
    use baton_core::use_cases::progress::parse_report;
    let config = Config::parse(LONG_TOKENS).unwrap();
    let workflow = &config.workflows[0];
    let plan = workflow.plan();
    let longest = |seed: u8| aws_length_token(seed);
    let text = format!("{}!", "t".repeat(TaskToken::MAX_LEN - 1));
    assert_eq!((longest(1).len(), text.len()), (2048, 2048));
    let now = t0() + Duration::seconds(5);
    for key in ["k-2048", "k-2048-cancel"] {
        let (w, k) = names(key);
        // Writes the decision on `r` for `input`, reads it back from the store, and returns it
        // with the decision's resumes (token, success or failure).
        let step = |r: Option<Record>, input: Input| {
            let (store, plan, w, k) = (store.clone(), plan.clone(), w.clone(), k.clone());
            async move {
                let d = decide(&plan, (&w, &k), r.as_ref(), &input, now);
                let resumes: Vec<(String, bool)> = d
                    .effects
                    .iter()
                    .filter_map(|e| match e {
                        Effect::Resume { token, resume, .. } | Effect::Answer { token, resume } => {
                            Some((token.expose().to_owned(), matches!(resume, Resume::Success { .. })))
                        }
                        _ => None,
                    })
                    .collect();
                let written =
                    must_write(&*store, &d.write.unwrap_or_else(|| panic!("{input:?} writes"))).await;
                assert_eq!(store.load(&w, &k).await.unwrap().as_deref(), Some(&written), "{input:?}: load");
                assert_eq!(store.trace(&w, &k).await.unwrap().record.as_ref(), Some(&written), "trace");
                (written, resumes)
            }
        };
        let report = |kind: &str, at: (u32, &str), token: &str| {
            let (_, _, input) = parse_report(&config, &parked_report(kind, key, at, token))
                .unwrap_or_else(|e| panic!("a {kind} with a {}-character token: {e}", token.len()));
            input
        };
        let (r, _) = step(None, Input::start(EventId::parse("evt-2048").unwrap())).await;
        let (r, _) = step(Some(r), report("step_ready", (0, "reserve"), &longest(1))).await;
        assert_eq!(r.waits[0].token.as_ref().map(TaskToken::expose), Some(longest(1).as_str()));
        let (r, resumes) = step(Some(r), step_input("cb-hold", 0, json!({"hold": "h-1"}))).await;
        assert_eq!(resumes, [(longest(1), true)], "the callback resumes the whole token");
        let (r, _) = step(Some(r), report("step_ready", (1, "fraud"), &longest(2))).await;
        let (r, _) = step(Some(r), report("step_ready", (2, "credit"), &text)).await;
        let tokens: Vec<Option<&str>> =
            r.branches().map(|b| b.token.as_ref().map(TaskToken::expose)).collect();
        assert_eq!(tokens, [Some(longest(2).as_str()), Some(text.as_str())], "inline in the record");
        if key == "k-2048-cancel" {
            let cancel = Input::CancelCompensate { reason: "operator".into() };
            let (r, resumes) = step(Some(r), cancel).await;
            assert_eq!(r.state, State::Compensating);
            assert_eq!(resumes, [(longest(2), false), (text.clone(), false)], "every parked token failed");
            continue;
        }
        let failed =
            StepOutcome::Failed { error: "Rejected".into(), cause: "fraud".into(), retryable: false };
        let failure = match step_input("cb-fraud", 1, json!({})) {
            Input::StepInput { id, hash, source, step, data, generation, attempt, .. } => {
                Input::StepInput { id, hash, source, step, outcome: failed, data, generation, attempt }
            }
            other => other,
        };
        let (r, resumes) = step(Some(r), failure).await;
        assert_eq!(resumes, [(longest(2), false)], "the failed branch's resume");
        let (r, _) = step(Some(r), report("undo_ready", (0, "reserve"), &longest(3))).await;
        assert_eq!(r.state, State::Compensating);
        let undo = r.compensation.as_ref().and_then(|c| c.undo(0));
        assert_eq!(
            undo.and_then(|u| u.wait.token.as_ref()).map(TaskToken::expose),
            Some(longest(3).as_str())
        );
        let (r, _) = step(
            Some(r),
            Input::AttemptOpened { wait: WaitId { generation: 1, step: 0, compensation: true }, attempt: 1 },
        )
        .await;
        let ack = Input::UndoInput {
            id: EventId::parse("ack-1").unwrap(),
            hash: "hash-ack-1".into(),
            source: baton_core::domain::lifecycle::Source::Callback,
            step: 0,
            outcome: StepOutcome::Succeeded,
            generation: Some(1),
            attempt: Some(1),
        };
        let (_, resumes) = step(Some(r), ack).await;
        assert_eq!(resumes, [(longest(3), true)], "the acknowledgement resumes the compensation's token");
    }
    // One character more is what the API refuses: the report names its field.
    let over = format!("{}A", longest(1));
    let err =
        parse_report(&config, &parked_report("step_ready", "k-2048", (0, "reserve"), &over)).unwrap_err();
    assert_eq!(err.reason(), "invalid_field", "{err}");
    assert!(err.to_string().contains("2049 characters long; the limit is 2048"), "{err}");
}

/// The error both stores give for what DynamoDB refuses with a ValidationException.
fn refused<T: std::fmt::Debug>(answer: Result<T, baton_core::ports::store::StoreError>, what: &str) {
    use baton_core::domain::error::Classified;
    match answer {
        Err(e) => assert_eq!((e.error_type(), e.retryable()), ("store_rejected", false), "{what}: {e:?}"),
        Ok(t) => panic!("{what}: taken ({t:?}), though DynamoDB refuses it"),
    }
}

/// DynamoDB's key limits count UTF-8 bytes: a sort key of 1,024 bytes is taken, one of 1,025
/// is refused, whichever item carries it (the step name and the ledger's input id are what a
/// test can make that long; an input id is bounded at the edge, `EventId`).
async fn sort_keys_over_1024_bytes_are_refused(store: Arc<dyn WorkflowStore>) {
    // INBOX#<step name>#<id>: 6 + 1 + 2 bytes around the name.
    let at_limit = format!("{}x", "é".repeat(507));
    let fits = InboxEntry { step_name: at_limit.clone(), ..entry("e1", 0, 0) };
    assert_eq!(store.buffer(&fits).await.unwrap(), Claim::Acquired, "1,024 bytes");
    let over = InboxEntry { step_name: "é".repeat(508), ..entry("e1", 0, 0) };
    refused(store.buffer(&over).await, "an inbox key of 1,025 bytes");
    let (w, k) = names("k-inbox");
    assert_eq!(store.inbox(&w, &k, &at_limit).await.unwrap(), vec![fits]);

    // LEDGER#buffer_expired#<id>: 22 bytes before the id.
    let ledger = |input_id: String| LedgerEntry {
        workflow: w.clone(),
        key: k.clone(),
        input_id,
        reason: IgnoreReason::BufferExpired,
        generation: Some(1),
        state: None,
        detail: json!({}),
        config_version: None,
        at: t0(),
        expires_at: t0() + Duration::days(1),
    };
    let fits = format!("{}ab", "😀".repeat(250));
    store.put_ledger(&ledger(fits.clone())).await.unwrap();
    assert!(store.ledgered(&w, &k, &fits, IgnoreReason::BufferExpired).await.unwrap());
    refused(
        store.put_ledger(&ledger(format!("{}abc", "😀".repeat(250)))).await,
        "a ledger key of 1,025 bytes",
    );
}

/// DynamoDB's 400 KB item limit holds for every item, not only records: an inbox entry and a
/// ledger entry well past it are refused; one well under it is taken. (The emulator's own
/// threshold and size rules differ slightly near the limit: docs/EMULATOR_DEVIATIONS.md.)
async fn items_over_400_kb_are_refused_whatever_the_item(store: Arc<dyn WorkflowStore>) {
    let big = |kb: usize| json!({"blob": "x".repeat(kb * 1024)});
    let under = InboxEntry { input: big(300), ..entry("big-under", 0, 0) };
    assert_eq!(store.buffer(&under).await.unwrap(), Claim::Acquired);
    let over = InboxEntry { input: big(450), ..entry("big-over", 0, 0) };
    refused(store.buffer(&over).await, "an inbox entry of 450 KB");
    let (w, k) = names("k-inbox");
    let ids: Vec<String> =
        store.inbox(&w, &k, "step-0").await.unwrap().iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, ["big-under"]);
    let ledger = LedgerEntry {
        workflow: w.clone(),
        key: k.clone(),
        input_id: "big-ledger".into(),
        reason: IgnoreReason::InputsTooLarge,
        generation: Some(1),
        state: None,
        detail: big(450),
        config_version: None,
        at: t0(),
        expires_at: t0() + Duration::days(1),
    };
    refused(store.put_ledger(&ledger).await, "a ledger entry of 450 KB");
    assert!(!store.ledgered(&w, &k, "big-ledger", IgnoreReason::InputsTooLarge).await.unwrap());
}

// ---- one suite, two stores -------------------------------------------------------------------

macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(Arc::new(MemoryStore::new().with_item_sizes(baton_aws::dynamodb::ITEM_SIZES))).await;
                }
            )*
        }
        mod dynamodb {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let store = dynamo_store(&Emulator::from_env()).await;
                    super::$case(Arc::new(store)).await;
                }
            )*
        }
    };
}

contract!(
    create_is_idempotent_and_a_lost_create_returns_the_winner,
    a_lost_transition_returns_the_winners_item,
    a_write_from_a_state_the_table_forbids_is_refused,
    restart_opens_a_new_generation_from_a_terminal_record,
    task_creation_is_idempotent,
    a_compensation_task_is_claimed_apart_from_its_steps,
    a_receipt_with_the_same_id_and_another_payload_returns_the_stored_one,
    a_repeat_is_counted_on_its_receipt_and_never_creates_one,
    one_id_for_two_targets_is_two_receipts,
    only_the_attempt_that_wrote_a_pending_receipt_releases_it,
    a_stale_pending_receipt_is_taken_over_by_one_attempt,
    the_inbox_keeps_arrival_order_and_settles_once,
    an_event_and_a_callback_with_one_id_are_two_entries,
    a_drain_and_the_sweeper_never_hold_an_entry_at_once,
    a_drain_that_outlives_its_lease_is_due_before_the_entry_expires,
    ledger_entries_are_idempotent_and_traced,
    due_records_and_counts_by_state,
    owed_work_has_a_list_of_its_own,
    exactly_one_of_fifty_concurrent_transitions_wins,
    config_versions_are_registered_once_and_listed_oldest_first,
    a_long_task_token_reads_back_from_every_read,
    a_2048_character_token_takes_every_path,
    sort_keys_over_1024_bytes_are_refused,
    items_over_400_kb_are_refused_whatever_the_item,
);

/// DynamoDB-specific: a token longer than `TOKEN_INLINE_MAX` lives in a token item of its own,
/// put before the record that refers to it, and the record stays within one write unit. A load
/// reads the record and its current token item with one Query, a later step's too. An
/// instance that has read or written the token item does not put it again; one that has not puts
/// it first (idempotent). A record whose token item is gone reads without its token. A store
/// told a limit of 2,048 keeps every token inline.
#[tokio::test]
#[expect(clippy::too_many_lines, reason = "a contract case reads as one story, step by step")]
async fn dynamodb_a_long_token_is_kept_in_its_own_item_put_before_the_record() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use baton_aws::dynamodb::{DynamoDbStore, item_size, token_sk};
    let emulator = Emulator::from_env();
    let table = dynamo_store(&emulator).await.table().to_owned();
    let config = emulator.sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let calls = baton_tests::calls::Calls::default();
    let store = DynamoDbStore::new(calls.dynamodb(&config), table.clone());
    let token = aws_length_token(3);
    let waiting = waiting_with_token(&store, "k-own", &token).await;
    assert_eq!(calls.take(), ["PutItem", "PutItem", "PutItem"], "the start, the token item, the record");
    let (w, k) = names("k-own");
    let pk = AttributeValue::S(format!("WF#{w}#{k}"));
    let get = |key: &str, sk: String| {
        let (client, table) = (client.clone(), table.clone());
        let pk = AttributeValue::S(format!("WF#order-review#{key}"));
        async move {
            client
                .get_item()
                .table_name(table)
                .key("pk", pk)
                .key("sk", AttributeValue::S(sk))
                .send()
                .await
                .unwrap()
                .item
        }
    };
    let record = get("k-own", "RECORD".into()).await.expect("the record");
    let sk = token_sk(&waiting, token_of(&waiting).unwrap());
    assert_eq!(record.get("token_sk").and_then(|v| v.as_s().ok()), Some(&sk));
    assert!(!record.contains_key("token"), "the token is not in the record");
    assert!(item_size(&record) <= 1024, "the record is one write unit: {} bytes", item_size(&record));
    let token_item = get("k-own", sk.clone()).await.expect("the token item");
    assert!(
        matches!(token_item.get("token"), Some(AttributeValue::B(b)) if b.as_ref().len() == 1536),
        "kept as bytes"
    );
    assert!(item_size(&token_item) <= 2048, "the token item is two write units: {}", item_size(&token_item));
    assert!(token_item.contains_key("expires_at"), "it expires, long after any execution ends");

    // Another instance, which loads first (as every handler does), reads the token item and does
    // not put it again; one that writes without having read it puts it first.
    let loader = DynamoDbStore::new(calls.dynamodb(&config), table.clone());
    let loaded = loader.load(&w, &k).await.unwrap().unwrap();
    assert_eq!(*loaded, waiting);
    assert_eq!(calls.take(), ["Query"], "the record and its token item, together");
    let now = t0() + Duration::seconds(2);
    let merge =
        write_of(decide_at("k-own", Some(&loaded), &step_input("own-a", 0, json!({"note": "a"})), now));
    must_write(&loader, &merge).await;
    assert_eq!(calls.take(), ["PutItem"], "the record only");
    let fresh = DynamoDbStore::new(calls.dynamodb(&config), table.clone());
    let advance = write_of(decide_at(
        "k-own",
        Some(&merge.to),
        &step_input("own-b", 0, json!({"decision": "ok"})),
        now,
    ));
    let advancing = must_write(&fresh, &advance).await;
    assert_eq!(calls.take(), ["PutItem", "PutItem"], "the token item again, then the record");
    assert_eq!(fresh.load(&w, &k).await.unwrap().as_deref(), Some(&advancing));
    calls.take();

    // The next step's token item sorts before the first's: a load still reads the record and
    // its current token with one Query.
    let next = Input::StepReady {
        generation: 1,
        step: 1,
        token: TaskToken::parse(aws_length_token(4)).unwrap(),
        deadline: t0() + Duration::days(2),
    };
    let second = must_write(&fresh, &write_of(decide_at("k-own", Some(&advancing), &next, now))).await;
    calls.take();
    let reader = DynamoDbStore::new(calls.dynamodb(&config), table.clone());
    assert_eq!(reader.load(&w, &k).await.unwrap().as_deref(), Some(&second));
    assert_eq!(calls.take(), ["Query"], "the record and the second step's token item");

    // Once its token item is gone (its TTL is longer than an execution can run), a record
    // reads without its token, live or ended.
    let expire = |sk: String| {
        let (client, table, pk) = (client.clone(), table.clone(), pk.clone());
        async move {
            let sk = AttributeValue::S(sk);
            client.delete_item().table_name(&table).key("pk", pk).key("sk", sk).send().await.unwrap();
        }
    };
    expire(token_sk(&second, token_of(&second).unwrap())).await;
    let read = DynamoDbStore::new(client.clone(), table.clone()).load(&w, &k).await.unwrap().unwrap();
    assert_eq!(*read, without_token(&second));
    // A cancelled record keeps its token, in a token item of its own (it has no step).
    let cancel = write_of(decide_at("k-own", Some(&second), &Input::Cancel { reason: "x".into() }, now));
    let ended = DynamoDbStore::new(client.clone(), table.clone());
    let cancelled = must_write(&ended, &cancel).await;
    let read = DynamoDbStore::new(client.clone(), table.clone()).load(&w, &k).await.unwrap().unwrap();
    assert_eq!(*read, cancelled);
    expire(token_sk(&cancelled, token_of(&cancelled).unwrap())).await;
    let read = DynamoDbStore::new(client.clone(), table.clone()).load(&w, &k).await.unwrap().unwrap();
    assert_eq!((read.state, token_of(&read)), (State::Cancelled, None));

    // A store told the longest token's limit keeps the token inline.
    let inline_store =
        DynamoDbStore::new(client.clone(), table.clone()).with_token_inline_max(TaskToken::MAX_LEN);
    let inline = waiting_with_token(&inline_store, "k-inline", &token).await;
    let (w, k) = names("k-inline");
    let record = get("k-inline", "RECORD".into()).await.expect("the record");
    assert_eq!(record.get("token").and_then(|v| v.as_s().ok()), Some(&token));
    assert!(!record.contains_key("token_sk"));
    assert_eq!(inline_store.load(&w, &k).await.unwrap().as_deref(), Some(&inline));
}

/// A DynamoDB store on a table of its own whose client counts the calls it sends.
async fn counted_store() -> (baton_tests::calls::Calls, baton_aws::dynamodb::DynamoDbStore) {
    let emulator = Emulator::from_env();
    let table = dynamo_store(&emulator).await.table().to_owned();
    let calls = baton_tests::calls::Calls::default();
    let store = baton_aws::dynamodb::DynamoDbStore::new(calls.dynamodb(&emulator.sdk_config().await), table);
    (calls, store)
}

/// DynamoDB-specific: what the sweeper and `baton status` read, counted at the client. Each due
/// kind is a Query of each `by_due` partition (one a shard), a bounded count
/// stops at its bound, and nothing is a Scan, however many records the table holds.
#[tokio::test]
async fn dynamodb_due_reads_and_bounded_counts_are_index_queries_never_a_scan() {
    let (calls, store) = counted_store().await;
    for i in 0..40 {
        waiting_record(&store, &format!("read-{i}")).await;
    }
    calls.take();
    let partitions = baton_aws::dynamodb::DEFAULT_DUE_SHARDS as usize;
    let query = "Query";

    let far = t0() + Duration::days(365);
    assert_eq!(store.due(watched(Kind::Waiting), far, 5).await.unwrap().len(), 5);
    assert!(store.due(DueList { kind: Kind::Pending, work: true }, far, 5).await.unwrap().is_empty());
    assert!(store.expired_buffers(far, 5).await.unwrap().is_empty());
    assert_eq!(calls.take(), vec![query; 3 * partitions], "one Query a partition for each due kind");

    // Counted up to 4: each waiting shard is asked for its share of 5 (one entry), and the
    // 40 records spread over 8 shards answer in that first round; every other state is empty.
    let counts = store.count_by_state(4).await.unwrap();
    assert_eq!(counts, std::collections::BTreeMap::from([(Kind::Waiting, Count::MoreThan(4))]));
    let sent = calls.take();
    assert!(sent.iter().all(|op| op == query), "{sent:?}");
    // A state that may owe work is on two lists (`DueList`): each is counted.
    let lists: usize = Kind::ALL.iter().map(|k| DueList::of_state(*k).len()).sum();
    assert_eq!(sent.len(), lists * partitions, "one round: a Query a partition");
}

/// DynamoDB-specific: counting the live records (`baton rollout plan`) reads the index and
/// nothing else; a task token kept in its own item is not read, where the sweeper's `due`, which
/// resumes with it, reads each one.
#[tokio::test]
async fn dynamodb_counting_live_records_reads_no_token_item() {
    let (calls, store) = counted_store().await;
    for i in 0..3 {
        waiting_with_token(&store, &format!("live-{i}"), &aws_length_token(i)).await;
    }
    calls.take();
    let live = baton_core::use_cases::rollout::count_live(&store, t0()).await.unwrap();
    let partitions = baton_aws::dynamodb::DEFAULT_DUE_SHARDS as usize;
    let lists: usize =
        baton_core::use_cases::rollout::LIVE_KINDS.iter().map(|k| DueList::of_state(*k).len()).sum();
    assert_eq!(
        calls.take(),
        vec!["Query"; lists * partitions],
        "one Query a partition for each list of each live state"
    );
    assert_eq!(live.by_version().expect("counted").iter().map(|v| v.records).sum::<u64>(), 3);

    let far = t0() + Duration::days(3650);
    assert_eq!(store.due(watched(Kind::Waiting), far, 10).await.unwrap().len(), 3);
    let sent = calls.take();
    assert_eq!(sent.iter().filter(|op| *op == "GetItem").count(), 3, "a token item each: {sent:?}");
}

/// DynamoDB-specific: the TTL attribute is on the items and TTL is enabled on the table.
#[tokio::test]
async fn dynamodb_items_carry_the_ttl_attribute_and_the_table_has_ttl_enabled() {
    let emulator = Emulator::from_env();
    let store = dynamo_store(&emulator).await;
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let ttl = client.describe_time_to_live().table_name(store.table()).send().await.unwrap();
    let desc = ttl.time_to_live_description.unwrap();
    assert_eq!(desc.attribute_name.as_deref(), Some(baton_aws::dynamodb::TTL_ATTRIBUTE));

    store.put_receipt(&receipt("msg_ttl", "h")).await.unwrap();
    store.buffer(&entry("early", 0, 0)).await.unwrap();
    let items = client.scan().table_name(store.table()).send().await.unwrap().items.unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        let ttl = item.get("expires_at").and_then(|v| v.as_n().ok()).expect("a numeric expires_at");
        let at: i64 = ttl.parse().unwrap();
        assert!(at > t0().unix_timestamp(), "expires in the future: {at}");
    }
}

/// DynamoDB-specific: each state's `by_due` entries are spread over shards (no hot partition),
/// and every read covers them all.
#[tokio::test]
async fn dynamodb_due_entries_are_sharded_and_read_from_every_shard() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use baton_aws::dynamodb::{DEFAULT_DUE_SHARDS, due_shard};
    let emulator = Emulator::from_env();
    let store = dynamo_store(&emulator).await;
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let keys: Vec<String> = (0..24).map(|i| format!("shard-{i}")).collect();
    for key in &keys {
        waiting_record(&store, key).await;
    }
    let kind_of = |item: &std::collections::HashMap<String, AttributeValue>| {
        item.get("due_kind").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
    };
    let items = client.scan().table_name(store.table()).send().await.unwrap().items.unwrap_or_default();
    let shards: std::collections::BTreeSet<String> = items.iter().map(kind_of).collect();
    assert!(shards.len() > 1, "the waiting records are spread over shards: {shards:?}");
    for item in &items {
        let pk = item["pk"].as_s().unwrap();
        assert_eq!(kind_of(item), format!("record#waiting#{}", due_shard(pk, DEFAULT_DUE_SHARDS)));
    }
    let far = t0() + Duration::days(365);
    let due = store.due(watched(Kind::Waiting), far, 100).await.unwrap();
    assert_eq!(due.len(), keys.len(), "every shard is read");
    assert!(due.windows(2).all(|w| w[0].due_at() <= w[1].due_at()), "merged oldest first");
    assert_eq!(store.due(watched(Kind::Waiting), far, 5).await.unwrap().len(), 5, "and cut to the limit");
    let waiting = |counts: std::collections::BTreeMap<Kind, Count>| counts[&Kind::Waiting];
    let n = keys.len() as u64;
    assert_eq!(waiting(store.count_by_state(n).await.unwrap()), Count::Exact(n), "every partition counted");
    assert_eq!(waiting(store.count_by_state(n - 1).await.unwrap()), Count::MoreThan(n - 1));
    // More than the bound in all, whether or not one partition alone holds more.
    assert_eq!(waiting(store.count_by_state(2).await.unwrap()), Count::MoreThan(2));
}

/// DynamoDB-specific: the functions register the shard count they write `by_due` with beside
/// their config version, and a reader that knows nothing (an operator command without
/// `BATON_DUE_SHARDS`) reads that many: a record on a shard above the default is counted.
#[tokio::test]
async fn dynamodb_a_reader_finds_every_shard_the_functions_registered() {
    use baton_aws::dynamodb::{DEFAULT_DUE_SHARDS, DynamoDbStore, due_shard};
    let emulator = Emulator::from_env();
    let table = dynamo_store(&emulator).await.table().to_owned();
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let reader = DynamoDbStore::new(client.clone(), table.clone());
    assert_eq!(reader.registered_due_shards().await.unwrap(), None, "nothing registered yet");
    let registered = |version: &str| RegisteredConfig {
        version: version.into(),
        canonical: "{}".into(),
        registered_at: t0(),
        started_at: t0(),
    };
    let wide = DynamoDbStore::new(client.clone(), table.clone()).with_due_shards(32);
    wide.register_config(&registered("v1"), true).await.unwrap();
    // A later deploy with the default count does not shrink what readers must cover.
    reader.register_config(&registered("v1"), true).await.unwrap();
    reader.register_config(&registered("v2"), true).await.unwrap();
    assert_eq!(reader.registered_due_shards().await.unwrap(), Some(32));
    // An operator's command registers its checkout's version without starting on it: the count
    // it was told to read is not one any function writes with, and is not recorded.
    let operator = DynamoDbStore::new(client.clone(), table.clone()).with_due_shards(64);
    operator.register_config(&registered("v3"), false).await.unwrap();
    assert_eq!(reader.registered_due_shards().await.unwrap(), Some(32));

    let key = (0..).map(|i| format!("wide-{i}")).find(|k| {
        let (w, k) = names(k);
        due_shard(&format!("WF#{w}#{k}"), 32) >= DEFAULT_DUE_SHARDS
    });
    let key = key.expect("a key on a high shard");
    waiting_record(&wide, &key).await;
    let far = t0() + Duration::days(365);
    assert!(reader.due(watched(Kind::Waiting), far, 10).await.unwrap().is_empty(), "8 shards miss it");
    let found = DynamoDbStore::new(client, table)
        .with_due_shards(32)
        .due(watched(Kind::Waiting), far, 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "the registered count finds it");
}

/// A token of one of the shapes that matter: the emulator's (a UUID), just over the default
/// limit, AWS's (2,048 characters of base64, the API's longest; 1,024 as older models had it),
/// 2,048 not base64, short base64, multi-byte text (the limit counts bytes), and one shared by
/// every partition.
fn any_token(rng: &mut fastrand::Rng, serial: u64) -> TaskToken {
    use base64::Engine;
    let base64 = |seed: u64, bytes: u64| {
        let bytes: Vec<u8> =
            (0..bytes).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7919) % 251) as u8).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    TaskToken::parse(match rng.u8(0..8) {
        0 => format!("6f1c2a7e-90b4-4d1e-8a3c-{serial:012}"),
        1 => format!("{}-{serial:08}", "x".repeat(121)),
        2 => base64(serial, 1536),
        3 => format!("{}!{serial:08}", "t".repeat(2039)),
        4 => base64(serial, 30),
        5 => base64(424_242, 1536),
        6 => base64(serial, 768),
        _ => format!("{}{serial:06}", "é".repeat(70)),
    })
    .unwrap()
}

/// An input for `record`'s state, so that a walk goes through every state: the step's report
/// (and its redelivery, same token), inputs, a step's completion, the next step, the end, a
/// cancel (which keeps the token), and a restart after it.
fn any_input(rng: &mut fastrand::Rng, key: &str, record: Option<&Record>, serial: u64) -> Input {
    let Some(r) = record else {
        return Input::start(EventId::parse(format!("start-{key}-{serial}")).unwrap());
    };
    let deadline = t0() + Duration::days(2);
    let ready = |step, token| Input::StepReady { generation: r.generation, step, token, deadline };
    match r.state {
        State::Pending => ready(0, any_token(rng, serial)),
        State::Waiting { step } => match rng.u8(0..6) {
            0 => Input::Cancel { reason: "walk".into() },
            1 => step_input(&format!("note-{key}-{serial}"), step, json!({"note": serial})),
            2 => ready(step, token_of(r).cloned().unwrap_or_else(|| any_token(rng, serial))),
            _ if step == 0 => step_input(&format!("d-{key}-{serial}"), 0, json!({"decision": "ok"})),
            _ => step_input(&format!("p-{key}-{serial}"), 1, json!({"payment_ref": "x"})),
        },
        State::Advancing { step } => match (rng.u8(0..4), step) {
            (0, _) => Input::Cancel { reason: "walk".into() },
            (_, 0) => ready(1, any_token(rng, serial)),
            _ => Input::Finished { generation: r.generation, finish: Finish::Succeeded },
        },
        _ if rng.bool() => Input::Cancel { reason: "again".into() },
        _ => Input::start(EventId::parse(format!("start-{key}-{serial}")).unwrap()),
    }
}

/// The table never holds a record of `key` that refers to a token item it does not hold, or to
/// one holding another token.
async fn token_ref_resolves(client: &aws_sdk_dynamodb::Client, table: &str, key: &str, at: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let get = |sk: String| {
        client
            .get_item()
            .table_name(table)
            .key("pk", AttributeValue::S(format!("WF#order-review#{key}")))
            .key("sk", AttributeValue::S(sk))
            .consistent_read(true)
            .send()
    };
    let record = get("RECORD".into()).await.unwrap().item.unwrap();
    let Some(sk) = record.get("token_sk").and_then(|v| v.as_s().ok()) else { return };
    let item = get(sk.clone()).await.unwrap().item;
    let item = item.unwrap_or_else(|| panic!("{at}: the record refers to {sk}, which is not there"));
    let token = baton_aws::dynamodb::parse_token(&item).unwrap();
    assert!(sk.ends_with(&baton_aws::dynamodb::token_ref(&token)), "{at}: {sk}");
}

/// One key's walk for [`dynamodb_token_items_hold_under_a_random_walk_of_instances_layouts_and_races`].
async fn walk(
    stores: Vec<baton_aws::dynamodb::DynamoDbStore>,
    memory: Arc<MemoryStore>,
    client: aws_sdk_dynamodb::Client,
    key: String,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let (w, k) = names(&key);
    let mut expected: Option<Record> = None;
    let mut now = t0();
    for serial in 0..40 {
        let at = format!("{key} step {serial} (seed {seed})");
        now += Duration::seconds(61);
        let (a, b) = (&stores[rng.usize(..stores.len())], &stores[rng.usize(..stores.len())]);
        let current = a.load(&w, &k).await.unwrap().map(Arc::unwrap_or_clone);
        assert_eq!(current, expected, "{at}: load");
        let input = any_input(&mut rng, &key, current.as_ref(), serial);
        let Some(first) = decide_at(&key, current.as_ref(), &input, now).write else { continue };
        // A racing writer decided on the same record, written at once or after.
        let other = any_input(&mut rng, &key, current.as_ref(), serial + 10_000);
        let second = decide_at(&key, current.as_ref(), &other, now).write;
        let (ra, rb) = match &second {
            Some(second) if rng.bool() => {
                let (x, y) = tokio::join!(a.apply(&first), b.apply(second));
                (x.unwrap(), Some(y.unwrap()))
            }
            Some(second) => (a.apply(&first).await.unwrap(), Some(b.apply(second).await.unwrap())),
            None => (a.apply(&first).await.unwrap(), None),
        };
        let (winner, loser) = match (&ra, &rb) {
            (Applied::Written, Some(Applied::Written)) => panic!("{at}: both writes won"),
            (Applied::Written, _) => (&first, second.as_ref().map(|s| (s, rb.as_ref().unwrap()))),
            (_, Some(Applied::Written)) => (second.as_ref().unwrap(), Some((&first, &ra))),
            _ => panic!("{at}: no write won: {ra:?} {rb:?}"),
        };
        assert_eq!(memory.apply(winner).await.unwrap(), Applied::Written, "{at}: memory");
        if let Some((write, lost)) = loser {
            let Applied::Lost { current } = lost else { panic!("{at}: {lost:?}") };
            assert_eq!(current.as_deref(), Some(&winner.to), "{at}: the lost write's record");
            assert_eq!(
                memory.apply(write).await.unwrap(),
                Applied::Lost { current: Some(Box::new(winner.to.clone())) },
                "{at}: memory"
            );
        }
        expected = Some(winner.to.clone());
        token_ref_resolves(&client, a.table(), &key, &at).await;
        let trace = stores[rng.usize(..stores.len())].trace(&w, &k).await.unwrap();
        assert_eq!(trace.record, expected, "{at}: trace");
        if let Some(token) = token_of(&winner.to).filter(|t| t.expose().len() > 40) {
            assert!(!format!("{trace:?}").contains(token.expose()), "{at}: the token shows in a trace");
        }
    }
}

/// DynamoDB-specific: token items under a random walk (an attack on them found it sound).
/// Twelve keys at once through their whole lifecycle, each step written by one of seven store
/// instances of different layouts (clones that share what they know, separate ones; limits 0,
/// 128 and 2,048), with a racing write decided on the same record, at once or
/// after. After each step every read returns the winner (load, the lost write's record, trace),
/// as MemoryStore does for the same writes, and the table never holds a record whose token item
/// is missing; at the end, the due records of every state, from every instance, are
/// MemoryStore's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_token_items_hold_under_a_random_walk_of_instances_layouts_and_races() {
    use baton_aws::dynamodb::DynamoDbStore;
    let emulator = Emulator::from_env();
    let base = dynamo_store(&emulator).await;
    let client = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
    let separate = || DynamoDbStore::new(client.clone(), base.table());
    let stores = vec![
        base.clone(),
        base.clone().with_token_inline_max(0),
        base.clone().with_token_inline_max(1),
        base.clone().with_token_inline_max(TaskToken::MAX_LEN),
        separate().with_token_inline_max(0),
        separate(),
        separate().with_token_inline_max(TaskToken::MAX_LEN),
    ];
    let memory = Arc::new(MemoryStore::new().with_item_sizes(baton_aws::dynamodb::ITEM_SIZES));
    let mut walks = tokio::task::JoinSet::new();
    for i in 0..12 {
        let seed = 0x9e37 + i * 7717;
        walks.spawn(walk(stores.clone(), memory.clone(), client.clone(), format!("walk-{i}"), seed));
    }
    while let Some(walked) = walks.join_next().await {
        walked.unwrap();
    }
    let far = t0() + Duration::days(3650);
    for kind in Kind::ALL {
        let by_key = |mut records: Vec<Arc<Record>>| {
            records.sort_by(|x, y| x.key.as_str().cmp(y.key.as_str()));
            records
        };
        let mut want = Vec::new();
        for list in DueList::of_state(kind) {
            let listed = by_key(memory.due(list, far, 1000).await.unwrap());
            for store in &stores {
                assert_eq!(by_key(store.due(list, far, 1000).await.unwrap()), listed, "due {list:?}");
            }
            want.extend(listed);
        }
        let want = by_key(want);
        for store in &stores {
            let mut heads = store.due_heads(kind, far, 1000).await.unwrap();
            heads.sort_by(|x, y| x.key.as_str().cmp(y.key.as_str()));
            assert_eq!(
                heads,
                want.iter().map(|r| RecordHead::of(r)).collect::<Vec<_>>(),
                "due_heads {kind:?}"
            );
        }
    }
}
