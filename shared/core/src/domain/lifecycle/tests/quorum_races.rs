//! An adversarial review of `requires` as a rule (all of a list, any of it, or at least N of it;
//! commit 8a2277f): orderings that try to make a quorum step complete short of its rule, twice,
//! on a withdrawn or repeated approval, on an earlier attempt's or generation's inputs, in a
//! parallel branch, or from the inbox; and the config rules `baton validate` must refuse. The
//! invariants named: 1 completes once, only when N distinct listed names are non-null; 2 a name
//! counts once, the later value replaces, null withdraws; 3 late inputs ignored and ledgered; 4
//! branches, retries, the inbox, pinning and validate behave the same.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::retry::{at, with_attempt};
use super::*;
use crate::domain::config::Config;

fn rule(at_least: usize, of: &[&str]) -> Requires {
    Requires { of: of.iter().map(|s| (*s).to_owned()).collect(), at_least }
}

/// approval (0): at least 2 of [ann, bob, cy]; then payment (1).
fn two_of_three() -> Plan {
    let mut p = plan(&[&[], &["payment_ref"]]);
    p.steps[0].requires = rule(2, &["ann", "bob", "cy"]);
    p
}

/// An input whose payload fingerprint follows its content (so one id with another payload is a
/// conflict, as the engine's hash makes it).
fn input(id: &str, step: u32, source: Source, outcome: StepOutcome, data: serde_json::Value) -> Input {
    let serde_json::Value::Object(data) = data else { panic!("data must be an object") };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (serde_json::to_string(&data).unwrap(), format!("{outcome:?}")).hash(&mut h);
    Input::StepInput {
        id: eid(id),
        hash: format!("{:016x}", h.finish()),
        source,
        step,
        outcome,
        data,
        generation: None,
        attempt: None,
    }
}

fn ok(id: &str, step: u32, data: serde_json::Value) -> Input {
    input(id, step, Source::Callback, StepOutcome::Succeeded, data)
}

fn event(id: &str, step: u32, data: serde_json::Value) -> Input {
    input(id, step, Source::Event, StepOutcome::Succeeded, data)
}

fn progress(id: &str, step: u32, data: serde_json::Value) -> Input {
    input(id, step, Source::Callback, StepOutcome::InProgress, data)
}

fn drained(mut i: Input, g: u32) -> Input {
    if let Input::StepInput { generation, .. } = &mut i {
        *generation = Some(g);
    }
    i
}

/// The record after `d`: its write's, else `r` unchanged.
fn then(r: &Record, d: &Decision) -> Record {
    d.write.as_ref().map_or_else(|| r.clone(), |w| w.to.clone())
}

fn ledgered(d: &Decision) -> bool {
    d.effects.iter().any(|e| matches!(e, Effect::Ledger { .. }))
}

/// Feeds `inputs` in order from `r`, returning the last record and the success resumes sent.
fn feed(p: &Plan, r: &Record, inputs: &[Input]) -> (Record, usize) {
    let mut r = r.clone();
    let mut resumes = 0;
    for i in inputs {
        let d = run(p, Some(&r), i);
        resumes += success_resumes(&d);
        r = then(&r, &d);
    }
    (r, resumes)
}

// ---------------------------------------------------------------------------------------------
// Invariants 1 and 2 on a plain step.

/// Invariant 2: one name carried by a callback and by an event (two sources, two ids) is one
/// approval: ann twice never makes two of three.
#[test]
fn a_name_carried_by_a_callback_and_an_event_counts_once() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let (r, n) = feed(
        &p,
        &r,
        &[
            ok("cb-ann", 0, json!({"ann": "yes"})),
            event("ev-ann", 0, json!({"ann": "yes, by event"})),
            ok("cb-ann-2", 0, json!({"ann": "yes, third time", "note": "x", "ANN": 1, "ann2": 1})),
        ],
    );
    assert_eq!((r.state, n), (State::Waiting { step: 0 }, 0), "{:?}", r.inputs());
    let d = run(&p, Some(&r), &event("ev-cy", 0, json!({"cy": true})));
    assert_eq!((after(&d).state, success_resumes(&d)), (State::Advancing { step: 0 }, 1));
}

/// Invariant 2: a null sent after an approval withdraws it, whoever sends it and however the
/// approval came (a success, an in-progress report, an event): the step waits on.
#[test]
fn a_null_after_an_approval_withdraws_it_whatever_carried_either() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let (r, n) = feed(
        &p,
        &r,
        &[
            progress("ip-bob", 0, json!({"bob": "yes"})),
            event("ev-bob-no", 0, json!({"bob": null})),
            ok("cb-ann", 0, json!({"ann": "yes"})),
        ],
    );
    assert_eq!((r.state, n), (State::Waiting { step: 0 }, 0), "bob withdrew: {:?}", r.inputs());
    // cy approves and withdraws in one input, with ann's approval repeated: still one.
    let (r, n) = feed(&p, &r, &[ok("cb-mix", 0, json!({"cy": null, "ann": "again", "bob": null}))]);
    assert_eq!((r.state, n), (State::Waiting { step: 0 }, 0), "{:?}", r.inputs());
    let d = run(&p, Some(&r), &ok("cb-bob-back", 0, json!({"bob": "yes after all"})));
    assert_eq!((after(&d).state, success_resumes(&d)), (State::Advancing { step: 0 }, 1));
}

/// Invariant 2: an any-of step whose only approval was withdrawn waits, and a success with no
/// listed name (or with listed names all null) does not complete it.
#[test]
fn an_any_of_step_with_its_approval_withdrawn_waits_for_another() {
    let mut p = plan(&[&[]]);
    p.steps[0].requires = rule(1, &["legal", "compliance"]);
    let r = ready(&p, &started(&p), 0, "t0");
    let (r, n) = feed(
        &p,
        &r,
        &[
            progress("ip-legal", 0, json!({"legal": "ok"})),
            ok("cb-legal-no", 0, json!({"legal": null})),
            ok("cb-empty", 0, json!({})),
            ok("cb-nulls", 0, json!({"legal": null, "compliance": null, "other": "x"})),
        ],
    );
    assert_eq!((r.state, n), (State::Waiting { step: 0 }, 0), "{:?}", r.inputs());
    let d = run(&p, Some(&r), &ok("cb-c", 0, json!({"compliance": false})));
    assert_eq!(
        (after(&d).state, success_resumes(&d)),
        (State::Advancing { step: 0 }, 1),
        "false is a value, not null"
    );
}

/// Invariant 2: an approval's repeat (same id, same payload) is a duplicate; a withdrawal sent
/// under the approval's id is a conflict, refused and ledgered: the approval stands, and the
/// repeat of an approval after its withdrawal does not bring it back.
#[test]
fn a_repeat_never_re_applies_an_approval_that_was_withdrawn() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let approve = ok("cb-ann", 0, json!({"ann": "yes"}));
    let (r, _) = feed(&p, &r, &[approve.clone(), ok("cb-ann-no", 0, json!({"ann": null}))]);
    let d = run(&p, Some(&r), &approve);
    assert_eq!(d.outcome, Outcome::Duplicate);
    let r = then(&r, &d);
    let d = run(&p, Some(&r), &ok("cb-bob", 0, json!({"bob": "yes"})));
    assert_eq!(
        (after(&d).state, success_resumes(&d)),
        (State::Waiting { step: 0 }, 0),
        "ann's withdrawn approval came back with its repeat: {:?}",
        after(&d).inputs()
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 3: after completion.

/// Invariant 3: after the quorum completes, every later input (approval, withdrawal, in-progress,
/// failure) is ignored `step_already_advanced`, ledgered, and sends no resume; once the next step
/// waits they are `step_already_passed`. The resume that went out carries the approvals.
#[test]
fn inputs_after_completion_are_ignored_ledgered_and_never_resume_again() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let (r, _) = feed(&p, &r, &[ok("cb-ann", 0, json!({"ann": "yes"}))]);
    let d = run(&p, Some(&r), &ok("cb-bob", 0, json!({"bob": "yes"})));
    assert_eq!(
        d.effects,
        [resume_ok(wid(1, 0), "t0", json!({"ann": "yes", "bob": "yes"}), Mark::IfGone)],
        "one success, with the approvals"
    );
    let done = after(&d);
    let failed = StepOutcome::Failed { error: "No".into(), cause: "late".into(), retryable: false };
    let lates = [
        ok("cb-cy", 0, json!({"cy": "yes"})),
        ok("cb-ann-no", 0, json!({"ann": null})),
        event("ev-cy", 0, json!({"cy": "yes"})),
        progress("ip-cy", 0, json!({"cy": "yes"})),
        input("cb-fail", 0, Source::Callback, failed, json!({})),
    ];
    for late in &lates {
        let d = run(&p, Some(&done), late);
        assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced), "{late:?}");
        assert!(ledgered(&d) && d.write.is_none() && success_resumes(&d) == 0, "{d:?}");
    }
    let next = ready(&p, &done, 1, "t1");
    assert_eq!(next.state, State::Waiting { step: 1 });
    for late in &lates {
        let d = run(&p, Some(&next), late);
        assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyPassed), "{late:?}");
        assert!(ledgered(&d) && d.write.is_none() && success_resumes(&d) == 0, "{d:?}");
    }
}

/// Invariant 1: a repark (the step reported again with a newer token) keeps the approvals
/// gathered: the second approval completes the step, to the new token, once.
#[test]
fn a_repark_keeps_the_approvals_gathered_and_the_quorum_resumes_the_new_token() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let (r, _) = feed(&p, &r, &[ok("cb-ann", 0, json!({"ann": "yes"}))]);
    let repark = Input::StepReady {
        generation: 1,
        step: 0,
        token: token("t0-b"),
        deadline: T0 + Duration::days(2) + Duration::seconds(3),
    };
    let r = then(&r, &run(&p, Some(&r), &repark));
    assert_eq!(r.token(), Some(token("t0-b")));
    let d = run(&p, Some(&r), &ok("cb-bob", 0, json!({"bob": "yes"})));
    assert_eq!(
        d.effects,
        [resume_ok(wid(1, 0), "t0-b", json!({"ann": "yes", "bob": "yes"}), Mark::IfGone)],
        "{:?}",
        after(&d).inputs()
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: parallel branches.

/// review (0); the group of audit (1: 2 of [ann, bob, cy]) and sign (2: any of [ann, legal]),
/// both required; then payment (3).
fn quorum_group() -> Plan {
    let mut p = with_group(plan(&[&["decision"], &[], &[], &["payment_ref"]]), (1, 2), &[]);
    p.steps[1].requires = rule(2, &["ann", "bob", "cy"]);
    p.steps[2].requires = rule(1, &["ann", "legal"]);
    p
}

fn at_quorum_group(p: &Plan) -> Record {
    let r = ready(p, &started(p), 0, "t0");
    let r = after(&run(p, Some(&r), &ok("cb-0", 0, json!({"decision": "go"}))));
    ready(p, &ready(p, &r, 1, "b1"), 2, "b2")
}

/// Invariants 1 and 4: the same name sent to the sibling branch never counts for the quorum
/// branch; the quorum branch completes once, on its own second approval, and a late approval to
/// it is ignored and ledgered while its sibling still waits.
#[test]
fn a_quorum_branch_counts_only_its_own_inputs_and_completes_once() {
    let p = quorum_group();
    let r = at_quorum_group(&p);
    let (r, n) = feed(
        &p,
        &r,
        &[
            ok("cb-s-legal", 2, json!({"legal": null, "bob": "yes", "cy": "yes"})),
            ok("cb-a-ann", 1, json!({"ann": "yes"})),
        ],
    );
    assert_eq!(n, 0, "sign's inputs made audit's quorum: {:?}", wait_of(&r, 1).inputs);
    assert!(wait_of(&r, 1).waits() && wait_of(&r, 2).waits());
    let d = run(&p, Some(&r), &event("ev-a-cy", 1, json!({"cy": "yes"})));
    assert_eq!(success_resumes(&d), 1);
    let r = after(&d);
    assert_eq!(r.state, State::Waiting { step: 1 }, "the group waits on sign");
    let late = run(&p, Some(&r), &ok("cb-a-bob", 1, json!({"bob": "yes"})));
    assert_eq!(late.outcome, Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced));
    assert!(ledgered(&late) && late.write.is_none() && success_resumes(&late) == 0);
    // sign: ann withdrawn there too before legal's approval; any of: legal completes it.
    let (r, n) = feed(&p, &r, &[ok("cb-s-ann", 2, json!({"ann": null}))]);
    assert_eq!((n, wait_of(&r, 2).waits()), (0, true));
    let d = run(&p, Some(&r), &ok("cb-s-legal-2", 2, json!({"legal": "ok"})));
    assert_eq!((after(&d).state, success_resumes(&d)), (State::Advancing { step: 1 }, 1));
}

/// Invariant 4: inputs for a branch that Step Functions has not reached yet are buffered, and
/// drained after it is reached they count as any other: the branch completes once.
#[test]
fn a_branch_not_reached_yet_buffers_its_approvals_and_completes_once_from_the_drain() {
    let p = quorum_group();
    let r = ready(&p, &started(&p), 0, "t0");
    let r = after(&run(&p, Some(&r), &ok("cb-0", 0, json!({"decision": "go"}))));
    let r = ready(&p, &r, 2, "b2");
    let early = [ok("cb-a-ann", 1, json!({"ann": "yes"})), ok("cb-a-ann-2", 1, json!({"ann": "again"}))];
    for e in &early {
        let d = run(&p, Some(&r), e);
        assert_eq!(d.outcome, Outcome::Buffered, "{d:?}");
    }
    let reached = run(
        &p,
        Some(&r),
        &Input::StepReady { generation: 1, step: 1, token: token("b1"), deadline: T0 + Duration::days(2) },
    );
    assert!(
        reached.effects.contains(&Effect::DrainInbox { generation: 1, step: 1 }),
        "{:?}",
        reached.effects
    );
    let r = after(&reached);
    let (r, n) = feed(&p, &r, &early.iter().map(|e| drained(e.clone(), 1)).collect::<Vec<_>>());
    assert_eq!((n, wait_of(&r, 1).waits()), (0, true), "ann twice is one approval");
    let (_, n) = feed(
        &p,
        &r,
        &[ok("cb-a-bob", 1, json!({"bob": "yes"})), drained(ok("cb-a-cy", 1, json!({"cy": "yes"})), 1)],
    );
    assert_eq!(n, 1);
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: the inbox of a plain step.

/// Invariant 4: early approvals and a withdrawal buffered before the step waits, drained in
/// arrival order, give what they would have given live: bob's approval then withdrawal, ann and
/// ann again leave one approval; the drain's cy completes; later drained entries are ignored, ledgered.
#[test]
fn early_approvals_drained_count_like_live_ones_and_complete_once() {
    let p = two_of_three();
    let pending = started(&p);
    let early = [
        progress("ip-bob", 0, json!({"bob": "yes"})),
        ok("cb-bob-no", 0, json!({"bob": null})),
        ok("cb-ann", 0, json!({"ann": "yes"})),
        event("ev-ann-2", 0, json!({"ann": "yes again"})),
        ok("cb-cy", 0, json!({"cy": "yes"})),
        ok("cb-bob-yes", 0, json!({"bob": "yes"})),
    ];
    for e in &early {
        let d = run(&p, Some(&pending), e);
        assert_eq!(d.effects, [Effect::Buffer { generation: 1, step: 0 }], "{e:?}");
    }
    let r = ready(&p, &pending, 0, "t0");
    let mut resumes = 0;
    let mut r = r;
    let mut outcomes = Vec::new();
    for e in &early {
        let d = run(&p, Some(&r), &drained(e.clone(), 1));
        resumes += success_resumes(&d);
        outcomes.push(d.outcome);
        if !matches!(d.outcome, Outcome::Applied) {
            assert!(ledgered(&d), "{d:?}");
        }
        r = then(&r, &d);
    }
    assert_eq!(resumes, 1);
    assert_eq!(
        outcomes,
        [
            Outcome::Applied,
            Outcome::Applied,
            Outcome::Applied,
            Outcome::Applied,
            Outcome::Applied,
            Outcome::Ignored(IgnoreReason::StepAlreadyAdvanced)
        ],
        "completed on cy (ann + cy), bob's withdrawal kept"
    );
    assert_eq!(
        r.owed(),
        Some(Resume::Success { output: json!({"ann": "yes again", "bob": null, "cy": "yes"}) })
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: retried steps and restarted generations.

/// approval (0): 2 of [ann, bob, cy], `retry: { attempts: 3, backoff: 10m }`, 2 days.
fn retried_quorum() -> Plan {
    let retry = Retry { attempts: 3, backoff: std::time::Duration::from_secs(600) };
    with_retry(two_of_three(), &[0], retry, (std::time::Duration::from_secs(2 * 86_400), None))
}

fn fail(id: &str, attempt: Option<u32>) -> Input {
    let outcome = StepOutcome::Failed { error: "Rejected".into(), cause: "said no".into(), retryable: true };
    with_attempt(input(id, 0, Source::Callback, outcome, json!({"cy": "failed-attempt-data"})), attempt)
}

/// Invariant 4: the approvals of attempt 1 never count toward attempt 2, however they come
/// back: named for attempt 1 (late), repeated under their id, or in the failure's own data.
#[test]
fn an_earlier_attempts_approvals_never_count_toward_the_next() {
    let p = retried_quorum();
    let r = ready(&p, &started(&p), 0, "t0");
    let ann1 = with_attempt(ok("cb-ann-1", 0, json!({"ann": "yes"})), Some(1));
    let r = after(&at(&p, Some(&r), &ann1, T0));
    let r = after(&at(&p, Some(&r), &fail("cb-fail-1", Some(1)), T0));
    assert!(r.inputs().is_empty(), "{:?}", r.inputs());
    // In the backoff: attempt 1's approvals, late.
    let bob1 = with_attempt(ok("cb-bob-1", 0, json!({"bob": "yes"})), Some(1));
    let d = at(&p, Some(&r), &bob1, T0 + Duration::minutes(1));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    let due = r.next_attempt_at().unwrap();
    let r = after(&at(&p, Some(&r), &Input::AttemptOpened { wait: wid(1, 0), attempt: 2 }, due));
    // Attempt 2 runs: attempt 1's approvals again (repeat, and late named).
    let d = at(&p, Some(&r), &ann1, due);
    assert_eq!(d.outcome, Outcome::Duplicate);
    let r = then(&r, &d);
    let d = at(&p, Some(&r), &bob1, due);
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::EarlierAttempt));
    // One approval of attempt 2: not two of three.
    let d = at(&p, Some(&r), &with_attempt(ok("cb-cy-2", 0, json!({"cy": "yes"})), Some(2)), due);
    assert_eq!(
        (after(&d).state, success_resumes(&d)),
        (State::Waiting { step: 0 }, 0),
        "attempt 2 completed with {:?}",
        after(&d).inputs()
    );
    let r = after(&d);
    let d = at(&p, Some(&r), &with_attempt(ok("cb-ann-2", 0, json!({"ann": "yes, 2"})), Some(2)), due);
    assert_eq!((after(&d).state, success_resumes(&d)), (State::Advancing { step: 0 }, 1));
}

/// Invariant 1 (once per generation): approvals of generation 1 never count in generation 2,
/// whether they come back named for generation 1 (stale) or as repeats of their id.
#[test]
fn a_restarted_generation_counts_none_of_the_earlier_ones_approvals() {
    let p = two_of_three();
    let r = ready(&p, &started(&p), 0, "t0");
    let ann = ok("cb-ann", 0, json!({"ann": "yes"}));
    let r = after(&run(&p, Some(&r), &ann));
    let r = after(&run(&p, Some(&r), &Input::Cancel { reason: "op".into() }));
    assert!(r.state.is_terminal(), "{}", r.state);
    let g2 = after(&run(&p, Some(&r), &Input::start(eid("evt-2"))));
    assert_eq!(g2.generation, 2);
    let g2 = ready(&p, &g2, 0, "g2-t0");
    let (g2, n) = feed(&p, &g2, &[drained(ok("cb-bob-g1", 0, json!({"bob": "yes"})), 1), ann]);
    assert_eq!(n, 0);
    let d = run(&p, Some(&g2), &ok("cb-cy", 0, json!({"cy": "yes"})));
    assert_eq!(
        (after(&d).state, success_resumes(&d)),
        (State::Waiting { step: 0 }, 0),
        "generation 2 completed with generation 1's approvals: {:?}",
        after(&d).inputs()
    );
}

// ---------------------------------------------------------------------------------------------
// Invariant 1 and 2, by random walks against a model kept apart from the lifecycle.

/// Random sequences of approvals, withdrawals, unlisted names, in-progress reports, repeats and
/// conflicting reuses of ids, from callbacks and events: the step completes at exactly the first
/// successful input after which the model (by name, later value replacing, null absent, a
/// repeated id never applied again) meets the rule, with one success resume carrying the
/// model's inputs; every later input resumes nothing.
#[test]
fn random_walks_complete_exactly_when_the_model_meets_the_rule() {
    let names = ["ann", "bob", "cy", "note"];
    for (at_least, of) in
        [(2, &["ann", "bob", "cy"][..]), (1, &["ann", "bob"][..]), (3, &["ann", "bob", "cy"][..])]
    {
        let mut p = plan(&[&[], &["payment_ref"]]);
        p.steps[0].requires = rule(at_least, of);
        for seed in 1..400u64 {
            let mut rng = Rng::seeded(seed);
            let mut r = ready(&p, &started(&p), 0, "t0");
            let mut model: Map<String, Value> = Map::new();
            let mut seen: HashMap<(String, bool), String> = HashMap::new();
            let mut completed = false;
            let mut path = Vec::new();
            for _ in 0..14 {
                let id = format!("id-{}", rng.below(8));
                let is_event = rng.below(3) == 0;
                let name = names[rng.below(names.len())];
                let value = if rng.below(3) == 0 { Value::Null } else { json!(rng.below(3)) };
                let data = json!({ name: value });
                let progress_only = !is_event && rng.below(4) == 0;
                let outcome = if progress_only { StepOutcome::InProgress } else { StepOutcome::Succeeded };
                let source = if is_event { Source::Event } else { Source::Callback };
                let i = input(&id, 0, source, outcome, data.clone());
                let Input::StepInput { hash, .. } = &i else { unreachable!() };
                path.push(format!(
                    "{id} {source:?} {data} {}",
                    if progress_only { "in_progress" } else { "ok" }
                ));
                let d = run(&p, Some(&r), &i);
                let resumes = success_resumes(&d);
                let fresh = match seen.get(&(id.clone(), is_event)) {
                    Some(_) => false,
                    None => {
                        seen.insert((id.clone(), is_event), hash.clone());
                        true
                    }
                };
                if completed {
                    assert_eq!(resumes, 0, "a second resume after {path:#?}");
                } else if fresh {
                    model.insert(name.to_owned(), value);
                    let met = of.iter().filter(|n| model.get(**n).is_some_and(|v| !v.is_null())).count()
                        >= at_least;
                    if met && !progress_only {
                        assert_eq!(
                            d.effects,
                            [resume_ok(wid(1, 0), "t0", Value::Object(model.clone()), Mark::IfGone)],
                            "rule {at_least} of {of:?} met, by {path:#?}"
                        );
                        completed = true;
                    } else {
                        assert_eq!(
                            resumes, 0,
                            "rule {at_least} of {of:?} not met ({model:?}) but resumed, by {path:#?}"
                        );
                    }
                } else {
                    assert_eq!(resumes, 0, "a repeated id resumed: {path:#?}");
                }
                r = then(&r, &d);
                assert_eq!(r.state == (State::Advancing { step: 0 }), completed, "{path:#?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Invariant 4: config, `baton validate` and version pinning.

fn workflow_yaml(steps: &str) -> String {
    format!(
        "workflows:\n  approval:\n    start: {{ when: {{ type: [\"order.placed\"] }}, key: /subject }}\n    steps:\n{steps}"
    )
}

fn errors(yaml: &str) -> Vec<String> {
    match Config::parse(yaml) {
        Ok(_) => panic!("expected errors for:\n{yaml}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

/// Invariant 4 (validate): a branch of a parallel group is a step: a rule it can never meet is
/// refused by the branch's path; one it can is planned as written.
#[test]
fn a_branch_rule_that_can_never_be_met_is_refused_by_its_path() {
    let bad = workflow_yaml(
        "      - parallel:\n          name: checks\n          branches:\n            - { name: audit, requires: { at_least: 3, of: [ann, bob] }, timeout: 1d }\n            - { name: sign, requires: { any_of: [] }, timeout: 1d }\n",
    );
    let errs = errors(&bad);
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(
        errs[0].starts_with(
            "workflows.approval.steps[0].parallel.branches[0].requires.at_least: 3 is more than"
        ),
        "{errs:#?}"
    );
    assert!(
        errs[1].starts_with("workflows.approval.steps[0].parallel.branches[1].requires.any_of: is empty"),
        "{errs:#?}"
    );
    let good = workflow_yaml(
        "      - parallel:\n          name: checks\n          branches:\n            - { name: audit, requires: { at_least: 2, of: [ann, bob, cy] }, timeout: 1d }\n            - { name: sign, requires: { any_of: [ann, legal] }, timeout: 1d }\n",
    );
    let config = Config::parse(&good).expect("valid");
    let plan = config.workflow("approval").unwrap().plan();
    assert_eq!(plan.steps[0].requires, rule(2, &["ann", "bob", "cy"]));
    assert_eq!(plan.steps[1].requires, rule(1, &["ann", "legal"]));
}

/// Invariant 4 (validate): other rules that can never be met, or are not rules, are refused by
/// path: an `of` that is empty, an `at_least` that is no whole number, a name listed twice in
/// `any_of`, a rule with both forms.
#[test]
fn more_rules_that_can_never_be_met_are_refused_by_their_path() {
    let cases = [
        ("{ at_least: 1, of: [] }", "requires.at_least: 1 is more than the 0"),
        ("{ at_least: 1.5, of: [a, b] }", "requires.at_least: expected a whole number"),
        ("{ at_least: -1, of: [a, b] }", "requires.at_least: expected a whole number"),
        ("{ at_least: \"2\", of: [a, b] }", "requires.at_least: expected a whole number"),
        ("{ at_least: 2, of: a }", "requires.of: expected a list of input names"),
        ("{ any_of: [a, a] }", "requires.any_of[1]: \"a\" is listed twice"),
        ("{ any_of: a }", "requires.any_of: expected a list of input names"),
        ("{ any_of: [a], at_least: 1, of: [a] }", "requires: expected a list of input names"),
        ("{ of: [a] }", "requires: expected a list of input names"),
        ("{ }", "requires: expected a list of input names"),
        ("{ at_least: 99999999999999999999, of: [a] }", "requires.at_least:"),
    ];
    for (rule_text, want) in cases {
        let yaml = workflow_yaml(&format!("      - {{ name: s, requires: {rule_text}, timeout: 1d }}\n"));
        let errs = match Config::parse(&yaml) {
            Ok(c) => panic!("{rule_text} accepted as {}", c.workflows[0].steps[0].requires),
            Err(e) => e.0.iter().map(ToString::to_string).collect::<Vec<_>>(),
        };
        let want = format!("workflows.approval.steps[0].{want}");
        assert!(errs.iter().any(|e| e.starts_with(&want)), "{rule_text}: expected {want:?}, got {errs:#?}");
    }
}

/// Invariant 4 (pinning): a changed rule is a new config version, and the canonical form a
/// version is stored as gives the very rule back when read again (a record in flight is decided
/// by its version's rule, as the table keeps it).
#[test]
fn a_changed_rule_is_another_version_whose_stored_form_gives_the_rule_back() {
    let forms = [
        "[ann, bob]",
        "{ any_of: [ann, bob] }",
        "{ at_least: 2, of: [ann, bob, cy] }",
        "{ at_least: 1, of: [ann, bob, cy] }",
        "{ any_of: [ann, bob, cy] }",
    ];
    let mut versions = Vec::new();
    for form in forms {
        let yaml = workflow_yaml(&format!("      - {{ name: s, requires: {form}, timeout: 1d }}\n"));
        let c = Config::parse(&yaml).expect("valid");
        let again = Config::parse(&c.canonical).expect("the canonical form parses");
        assert_eq!(again.version, c.version, "{form}");
        assert_eq!(again.workflows[0].steps[0].requires, c.workflows[0].steps[0].requires, "{form}");
        assert_eq!(c.workflows[0].plan().steps[0].requires, c.workflows[0].steps[0].requires);
        versions.push((form, c.version.clone(), c.workflows[0].steps[0].requires.clone()));
    }
    // Different rules are different versions (`at_least: 1` and `any_of` of one list are one
    // rule written two ways; they may share a version or not, but must plan the same).
    for (i, (fa, va, ra)) in versions.iter().enumerate() {
        for (fb, vb, rb) in &versions[i + 1..] {
            if ra != rb {
                assert_ne!(va, vb, "{fa} and {fb} share a version");
            }
        }
    }
    assert_eq!(versions[3].2, versions[4].2);
}

/// Invariant 4 (pinning) in `decide`: a record decided under its own version's rule (all of
/// [ann, bob]) waits on one approval though a later version's (any of) would complete it, and
/// the plan it is decided with is the one its own version names.
#[test]
fn a_record_decided_under_its_own_versions_rule_waits_as_that_rule_says() {
    let v1 = plan(&[&["ann", "bob"]]);
    let mut v2 = plan(&[&[]]);
    v2.steps[0].requires = rule(1, &["ann", "bob"]);
    v2.version = "v2".into();
    let r = ready(&v1, &started(&v1), 0, "t0");
    let d = run(&v1, Some(&r), &ok("cb-ann", 0, json!({"ann": "yes"})));
    assert_eq!((after(&d).state, success_resumes(&d)), (State::Waiting { step: 0 }, 0));
    let d2 = run(&v2, Some(&r), &ok("cb-ann", 0, json!({"ann": "yes"})));
    assert_eq!(success_resumes(&d2), 1, "the new version's rule is another rule");
}
