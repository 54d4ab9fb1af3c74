//! The deployed functions link the domain, the adapters and the use cases, and nothing of the
//! local runtime: no provisioner, no HTTP server, no template reader. What `cargo tree` shows for
//! each function is what its zip carries; this keeps it so.

use std::process::Command;

const FUNCTIONS: [&str; 4] = ["baton-intake", "baton-progress", "baton-callback", "baton-sweeper"];

/// Crates that only `baton local` and the tests need. One of them in a function's tree is a
/// megabyte of dead code in every cold start.
const LOCAL_ONLY: [&str; 3] = ["baton-local", "axum", "matchit"];

/// The crates in `package`'s normal and build dependency tree (dev-dependencies are not
/// shipped), as cargo resolves them for that package alone: what `cargo lambda build` links.
fn shipped_crates(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "--offline", "-e", "normal,build", "--prefix", "none", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    let mut crates: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    crates.sort();
    crates.dedup();
    crates
}

#[test]
fn no_function_links_the_local_runtime() {
    for function in FUNCTIONS {
        let crates = shipped_crates(function);
        assert!(crates.iter().any(|c| c == "baton-shared"), "{function} is built on the library: {crates:?}");
        assert!(crates.iter().any(|c| c == "lambda_runtime"), "{function} runs under lambda_runtime");
        let linked: Vec<_> = LOCAL_ONLY.iter().filter(|c| crates.iter().any(|k| k == *c)).collect();
        assert!(
            linked.is_empty(),
            "{function} links {linked:?}, which only `baton local` and the tests need"
        );
    }
}

#[test]
fn the_local_runtime_is_still_what_the_cli_links() {
    // The check above must be able to fail: the CLI does link the local runtime and its server.
    let crates = shipped_crates("baton-cli");
    for local in ["baton-local", "axum"] {
        assert!(crates.iter().any(|c| c == local), "baton-cli links {local}: {crates:?}");
    }
}
