//! The simulation in `make test`: a smoke run of seeded schedules with every fault on, and the
//! proof that it can fail: each deliberate bug (`baton_core::mutants`) is caught within the same
//! budget. `make sim` runs the full 100,000.

use std::collections::BTreeMap;

use baton_core::mutants::Mutation;
use baton_sim::{Options, Outcome, run};

// The allocator `make sim` runs with (sim/src/main.rs): the schedules allocate and free many small
// records, strings and maps per step.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Schedules in the smoke run, and the budget each deliberate bug must be caught within. The
/// lost wake-up (`SkipHandshakeRead`) once needed seeds up to 4,351 (it needs an early input to
/// land between a step's wait and its drain), and the budget was 4,500 then, with a run of 2,000
/// beside it; since the retried and quorum workloads joined, every bug shows within the first
/// 500 (SkipHandshakeRead at seed 13, the last at 427 on 2026-12-06), and the smoke run is one
/// run of 2,000 that both keep every invariant and catch every bug. `make sim` runs 100,000.
const SMOKE: u64 = 2_000;

/// Runs seeds `1..=count` on every core; stops early (per thread) at the first violation when
/// `stop_at_first`.
fn run_many(count: u64, mutation: Option<Mutation>, stop_at_first: bool) -> Vec<Outcome> {
    let seeds: Vec<u64> = (1..=count).collect();
    run_seeds(&seeds, mutation, stop_at_first)
}

/// Runs `seeds` on every core (each thread takes every n-th); stops early (per thread) at the
/// first violation when `stop_at_first`.
fn run_seeds(seeds: &[u64], mutation: Option<Mutation>, stop_at_first: bool) -> Vec<Outcome> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    for &seed in seeds.iter().skip(t).step_by(threads) {
                        let o = run(Options { seed, mutation, trace: false });
                        let failed = !o.violations.is_empty();
                        mine.push(o);
                        if failed && stop_at_first {
                            break;
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a simulation thread")).collect()
    })
}

/// The seeds past the smoke run's that broke an invariant once, in `make sim` (each row of
/// docs/SIMULATION_BUGS.md from 93 names its own); those within it are run by the smoke run.
const ONCE_BROKEN: [u64; 28] = [
    111, 2494, 2510, 2542, 3607, 3899, 4095, 4899, 6070, 7019, 7703, 9132, 9155, 9469, 9966, 10609, 13650,
    14881, 15237, 17541, 18772, 26824, 28386, 29999, 66191, 76664, 89724, 91107,
];

fn violations(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| !o.violations.is_empty())
        .map(|o| {
            format!(
                "seed {} (replay: SIM_SEED={} make sim):\n  {}",
                o.seed,
                o.seed,
                o.violations.join("\n  ")
            )
        })
        .collect()
}

#[test]
fn simulation_smoke_the_seeds_that_once_broke_an_invariant_keep_every_one() {
    let outcomes = run_seeds(&ONCE_BROKEN, None, false);
    assert_eq!(outcomes.len(), ONCE_BROKEN.len());
    let failed = violations(&outcomes);
    assert!(failed.is_empty(), "{} seed(s) broke an invariant again:\n{}", failed.len(), failed.join("\n"));
}

/// The smoke run: [`SMOKE`] schedules under every fault keep every invariant; then each
/// deliberate bug is caught within those same schedules (so a catch is never a false alarm of a
/// schedule that fails without it).
#[test]
fn simulation_smoke_schedules_under_every_fault_keep_every_invariant_and_catch_every_deliberate_bug() {
    let outcomes = run_many(SMOKE, None, false);
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &outcomes {
        for (k, v) in &o.faults {
            *faults.entry(k).or_insert(0) += v;
        }
    }
    let checks: u64 = outcomes.iter().map(|o| o.checks).sum();
    let points: u64 = outcomes.iter().map(|o| o.points).sum();
    println!(
        "simulation smoke: {} schedules, {points} port calls interleaved, {checks} invariant checks",
        outcomes.len()
    );
    println!("faults injected: {faults:?}");
    let failed = violations(&outcomes);
    assert_eq!(outcomes.len() as u64, SMOKE);
    for kind in [
        "error_before_effect",
        "error_after_effect",
        "answer_lost_sdk_retried",
        "crash",
        "latency",
        "clock_jump",
        "ttl_deletion",
        "deploy",
    ] {
        assert!(faults.get(kind).is_some_and(|n| *n > 0), "the smoke run injected no {kind}: {faults:?}");
    }
    assert!(failed.is_empty(), "{} schedule(s) broke an invariant:\n{}", failed.len(), failed.join("\n"));
    let mut clean: Vec<u64> = outcomes.iter().map(|o| o.seed).collect();
    clean.sort_unstable();
    for mutation in Mutation::ALL {
        let outcomes = run_seeds(&clean, Some(mutation), true);
        let caught = outcomes.iter().find_map(|o| Some((o.seed, o.violations.first()?)));
        match caught {
            Some((seed, violation)) => println!("{mutation:?}: caught at seed {seed}: {violation}"),
            None => {
                panic!(
                    "{mutation:?} went unnoticed through the {SMOKE} schedules of the smoke run: the simulation is blind to it"
                )
            }
        }
    }
}
