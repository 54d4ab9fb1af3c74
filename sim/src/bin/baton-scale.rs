//! `make scale`: a million workflows through the lifecycle with the `by_due` index laid out as
//! DynamoDB stores it, unsharded and sharded (sim/src/scale.rs, docs/SCALE.md).

use baton_sim::scale::{Scale, print, run};

fn main() {
    let arg =
        |i: usize, default: u64| std::env::args().nth(i).map_or(default, |a| a.parse().expect("a number"));
    let workflows = arg(1, 1_000_000);
    let rate = arg(2, 1_000);
    for shards in [1, 8, 32] {
        let scale = Scale { workflows, rate, shards, stuck_per_million: 100, seed: 1 };
        let started = std::time::Instant::now();
        let report = run(scale);
        print(&scale, &report);
        println!("  ({:.1} s)", started.elapsed().as_secs_f64());
    }
}
