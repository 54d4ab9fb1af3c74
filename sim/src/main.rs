//! `make sim`: many seeded schedules on every core, or one seed replayed with its trace.
//!
//!   baton-sim [--schedules N] [--first SEED] [--mutation NAME]
//!   SIM_SEED=<n> baton-sim          replays exactly that schedule and prints it step by step
//!   SIM_DEBUG=1 SIM_SEED=<n> ...    the same, with baton's own log lines (JSON, as they
//!                                   happen, before the schedule's trace)
//!
//! Prints the schedules run, the faults injected by kind, the invariant checks made and every
//! violation with its seed; exits 1 on any violation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use baton_core::mutants::Mutation;
use baton_sim::{Options, Outcome, run};

// mimalloc, not the system allocator: the schedules allocate and free many small records, strings
// and maps per step, and the system allocator took about a fifth of the CPU (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's own setter (mimalloc.h), linked in with the allocator: the mimalloc crate binds
// none of its options.
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` of mimalloc.h's `mi_option_t` (the same number in its v2 and v3).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

fn main() {
    // Memory freed stays with the process rather than going back to the OS 10 ms later (-1: never
    // purged): each schedule frees what the one before allocated and allocates as much again, and
    // every page given back cost a page fault and the kernel zeroing a fresh (huge) page when it
    // was used again (page faults per 1,000 schedules about 72,000 to 340: docs/PERFORMANCE.md).
    // SAFETY: sets one of mimalloc's options, which it reads when it next purges; nothing else.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let mutation = value("--mutation").map(|name| {
        Mutation::ALL
            .into_iter()
            .find(|m| format!("{m:?}") == name)
            .unwrap_or_else(|| panic!("no mutation {name}; one of {:?}", Mutation::ALL))
    });
    if let Ok(seed) = std::env::var("SIM_SEED") {
        let seed: u64 = seed.trim().parse().expect("SIM_SEED is a number");
        if std::env::var("SIM_DEBUG").is_ok() {
            baton_aws::wiring::init_tracing();
        }
        let outcome = run(Options { seed, mutation, trace: true });
        for line in &outcome.trace {
            println!("{line}");
        }
        report(1, &[outcome], 0.0);
        return;
    }
    let schedules: u64 =
        value("--schedules").map_or(100_000, |v| v.parse().expect("--schedules is a number"));
    let first: u64 = value("--first").map_or(1, |v| v.parse().expect("--first is a number"));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let started = Instant::now();
    // Each thread takes the next seed when it is free: a schedule with a crowd takes about eight
    // times as long as one without, so seeds dealt out in turn left one core idle at the end.
    let next = AtomicU64::new(first);
    let mut outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= first + schedules {
                            return mine;
                        }
                        let began = Instant::now();
                        let mut o = run(Options { seed, mutation, trace: false });
                        o.millis = began.elapsed().as_millis() as u64;
                        o.trace.clear();
                        mine.push(o);
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a simulation thread")).collect()
    });
    outcomes.sort_by_key(|o| o.seed);
    report(schedules, &outcomes, started.elapsed().as_secs_f64());
}

fn report(schedules: u64, outcomes: &[Outcome], seconds: f64) {
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut checks, mut points) = (0u64, 0u64);
    let mut by_invariant: BTreeMap<&str, u64> = BTreeMap::new();
    let mut failed = Vec::new();
    for o in outcomes {
        for (k, v) in &o.faults {
            *faults.entry(k).or_insert(0) += v;
        }
        for (k, v) in &o.by_invariant {
            *by_invariant.entry(k).or_insert(0) += v;
        }
        checks += o.checks;
        points += o.points;
        if !o.violations.is_empty() {
            failed.push(o);
        }
    }
    println!("schedules run: {}", outcomes.len());
    println!("port calls interleaved: {points}");
    println!("faults injected:");
    for (k, v) in &faults {
        println!("  {k}: {v}");
    }
    shares(outcomes);
    println!("invariant checks made: {checks}");
    for (k, v) in &by_invariant {
        println!("  {k}: {v}");
    }
    if seconds > 0.0 {
        timing(outcomes, seconds);
    }
    println!("violations: {} schedule(s)", failed.len());
    broken(&failed);
    for o in failed.iter().take(20) {
        println!("seed {}:", o.seed);
        for v in &o.violations {
            println!("  {v}");
        }
        println!("  replay: SIM_SEED={} make sim", o.seed);
    }
    if !failed.is_empty() || (outcomes.len() as u64) < schedules {
        std::process::exit(1);
    }
}

/// What a share of the schedules had.
type Has = fn(&Outcome) -> bool;

/// How many schedules had each feature of the world, and the largest record of a wide group.
fn shares(outcomes: &[Outcome]) {
    let shares: [(&str, Has); 9] = [
        ("with a parallel group", |o| o.groups),
        ("with retried steps and branches", |o| o.retries),
        ("where a workflow compensated", |o| o.compensated),
        ("with a crowd", |o| o.crowd > 0),
        ("with records near the item limit (the wide workflow)", |o| o.wide),
        ("with heartbeats on retried steps and branches", |o| o.heartbeats),
        ("with a clock per function", |o| o.skewed),
        ("where Step Functions' own sends fail", |o| o.send_faults),
        ("that deployed version 2", |o| o.deployed),
    ];
    for (what, has) in shares {
        let n = outcomes.iter().filter(|o| has(o)).count();
        let share = if outcomes.is_empty() { 0.0 } else { 100.0 * n as f64 / outcomes.len() as f64 };
        println!("schedules {what}: {n} ({share:.1} %)");
    }
    if let Some(o) = outcomes.iter().max_by_key(|o| o.largest_record.0).filter(|o| o.largest_record.0 > 0) {
        let (size, bound) = o.largest_record;
        println!("largest record of a wide group: {size} bytes (its cheap bound: {bound}), seed {}", o.seed);
    }
}

/// How long the run took, with and without a crowd, and its slowest schedules.
fn timing(outcomes: &[Outcome], seconds: f64) {
    println!("time: {seconds:.1} s ({:.0} schedules/s)", outcomes.len() as f64 / seconds);
    let crowded: Vec<&Outcome> = outcomes.iter().filter(|o| o.crowd > 0).collect();
    let ms = |os: &[&Outcome]| os.iter().map(|o| o.millis).sum::<u64>() as f64 / os.len().max(1) as f64;
    let others: Vec<&Outcome> = outcomes.iter().filter(|o| o.crowd == 0).collect();
    println!(
        "  per schedule: {:.0} ms with a crowd ({} schedules), {:.0} ms without",
        ms(&crowded),
        crowded.len(),
        ms(&others)
    );
    let mut slow: Vec<&Outcome> = outcomes.iter().collect();
    slow.sort_by_key(|o| std::cmp::Reverse(o.millis));
    let slowest: Vec<String> = slow.iter().take(5).map(|o| format!("{} ({} ms)", o.seed, o.millis)).collect();
    println!("  slowest: {}", slowest.join(", "));
}

/// Each broken invariant, by how many schedules broke it, with the first few seeds.
fn broken(failed: &[&Outcome]) {
    let mut broken: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for o in failed {
        let names: std::collections::BTreeSet<&str> =
            o.violations.iter().filter_map(|v| v.strip_prefix('[')?.split(']').next()).collect();
        for name in names {
            broken.entry(name).or_default().push(o.seed);
        }
    }
    for (name, seeds) in &broken {
        let first: Vec<String> = seeds.iter().take(8).map(u64::to_string).collect();
        println!("  {name}: {} schedule(s), seeds {}", seeds.len(), first.join(", "));
    }
}
