//! `make scale`: a million workflows through the lifecycle with the `by_due` index laid out as
//! DynamoDB stores it, unsharded and sharded, and Step Functions' token buckets applied to their
//! starts and resumes (sim/src/scale.rs, docs/SCALE.md). Then the same at the rate a default
//! account sustains (250 two-step workflows a second), where nothing should wait.

use baton_sim::scale::{Scale, print, run};

/// Two-step workflows a second a default account sustains in us-east-1 (docs/SCALE.md).
const SUSTAINED: u64 = 250;

fn main() {
    let arg =
        |i: usize, default: u64| std::env::args().nth(i).map_or(default, |a| a.parse().expect("a number"));
    let workflows = arg(1, 1_000_000);
    let rate = arg(2, 1_000);
    let runs = [1, 8, 32].map(|shards| (rate, shards)).into_iter().chain([(SUSTAINED, 8)]);
    for (rate, shards) in runs {
        let scale = Scale { workflows, rate, shards, stuck_per_million: 100, seed: 1 };
        let started = std::time::Instant::now();
        let report = run(scale);
        print(&scale, &report);
        println!("  ({:.1} s)", started.elapsed().as_secs_f64());
    }
}
