//! The architecture, checked: what each process links, and which way the layers of `baton-core`
//! import (docs/ARCHITECTURE.md).
//!
//! - The deployed functions link the core, the AWS adapters and the Lambda serving code, and
//!   nothing of the local runtime: no provisioner, no HTTP server, no template reader. Only the
//!   callback function links the Secrets Manager SDK. What `cargo tree` shows for each function
//!   is what its zip carries; this keeps it so.
//! - The core links no AWS SDK crate and no Lambda runtime; the simulation and the CLI link no
//!   Lambda runtime.
//! - Inside the core, the domain imports neither a port nor a use case, a port imports no use
//!   case, and the lifecycle does not import `config`.
//! - No two modules of a crate import each other through `crate::`, directly or through others
//!   (a module and those inside it aside).

use std::path::{Path, PathBuf};
use std::process::Command;

const FUNCTIONS: [&str; 4] = ["baton-intake", "baton-progress", "baton-callback", "baton-sweeper"];

/// Crates that only `baton local` and the tests need. One of them in a function's tree is a
/// megabyte of dead code in every cold start.
const LOCAL_ONLY: [&str; 3] = ["baton-local", "axum", "matchit"];

/// The crates in `package`'s normal and build dependency tree (dev-dependencies are not
/// shipped), as cargo resolves them for that package alone: what `cargo lambda build` links.
fn shipped_crates(package: &str) -> Vec<String> {
    let mut crates: Vec<String> = cargo_tree(package, "normal,build")
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    crates.sort();
    crates.dedup();
    crates
}

/// `cargo tree` of `package` over the dependency `edges`, one entry a line, no prefix.
fn cargo_tree(package: &str, edges: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "--offline", "-e", edges, "--prefix", "none", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The features of baton-core that `package`'s build turns on, as cargo resolves them for that
/// package alone.
fn core_features(package: &str) -> Vec<String> {
    let mut features: Vec<String> = cargo_tree(package, "normal,build,features")
        .lines()
        .filter_map(|line| line.strip_prefix("baton-core feature \"")?.split('"').next().map(str::to_owned))
        .collect();
    features.sort();
    features.dedup();
    features
}

#[test]
fn no_function_is_built_with_the_simulations_bugs_or_checks() {
    // The simulation turns both on (the planted bugs it proves it catches, and baton's checks of
    // its own decisions in an optimized build): what the check reads.
    assert_eq!(core_features("baton-sim"), ["checks", "default", "mutants"]);
    for function in FUNCTIONS {
        assert_eq!(core_features(function), ["default"], "{function} is built with baton-core's features");
    }
}

fn links(crates: &[String], name: &str) -> bool {
    crates.iter().any(|c| c == name)
}

/// The AWS SDK service crates in a tree (`aws-sdk-*`).
fn sdk_crates(crates: &[String]) -> Vec<&str> {
    crates.iter().map(String::as_str).filter(|c| c.starts_with("aws-sdk-")).collect()
}

#[test]
fn each_function_links_the_core_the_adapters_and_lambda_and_nothing_of_the_local_runtime() {
    for function in FUNCTIONS {
        let crates = shipped_crates(function);
        println!("{function}: {} crates; AWS SDK: {:?}", crates.len(), sdk_crates(&crates));
        for needed in ["baton-core", "baton-aws", "baton-lambda", "lambda_runtime"] {
            assert!(links(&crates, needed), "{function} is built on {needed}: {crates:?}");
        }
        let linked: Vec<_> = LOCAL_ONLY.iter().filter(|c| links(&crates, c)).collect();
        assert!(
            linked.is_empty(),
            "{function} links {linked:?}, which only `baton local` and the tests need"
        );
        assert_eq!(
            links(&crates, "aws-sdk-secretsmanager"),
            function == "baton-callback",
            "only the callback function reads Secrets Manager; {function} links {:?}",
            sdk_crates(&crates)
        );
    }
}

#[test]
fn the_core_links_no_aws_sdk_and_no_lambda_runtime() {
    let crates = shipped_crates("baton-core");
    println!("baton-core: {} crates; AWS SDK: {:?}", crates.len(), sdk_crates(&crates));
    let aws: Vec<_> = crates
        .iter()
        .filter(|c| c.starts_with("aws-") || c.starts_with("aws_smithy") || c.starts_with("lambda_runtime"))
        .collect();
    assert!(aws.is_empty(), "baton-core links {aws:?}");
}

#[test]
fn the_simulation_and_the_cli_link_no_lambda_runtime() {
    for package in ["baton-sim", "baton-cli"] {
        let crates = shipped_crates(package);
        println!("{package}: {} crates; AWS SDK: {:?}", crates.len(), sdk_crates(&crates));
        assert!(links(&crates, "baton-core"), "{package} is built on the core");
        for runtime in ["lambda_runtime", "lambda_runtime_api_client", "baton-lambda"] {
            assert!(!links(&crates, runtime), "{package} links {runtime}");
        }
    }
    // The check above must be able to fail: the functions do link it, and the CLI does link the
    // local runtime and its server.
    assert!(links(&shipped_crates("baton-sweeper"), "lambda_runtime"));
    let cli = shipped_crates("baton-cli");
    for local in ["baton-local", "axum"] {
        assert!(links(&cli, local), "baton-cli links {local}");
    }
}

/// A part of the core (a folder under `shared/core/src`) and the modules it must not import. The
/// lifecycle owns its plan, and `config` builds it: the lifecycle never imports `config`, so that
/// the two cannot import each other again.
const RULES: [(&str, &[&str]); 3] = [
    ("domain", &["ports", "use_cases"]),
    ("ports", &["use_cases"]),
    ("domain/lifecycle", &["domain::config", "config"]),
];

/// The `.rs` files under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The lines of a file's non-test code (before its `#[cfg(test)]` module; comments, doc links
/// included, are not imports) that name a forbidden module, as `crate::<module>` or
/// `super::…::<module>`.
fn upward_imports(source: &str, forbidden: &[&str]) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| {
            forbidden.iter().any(|layer| {
                line.contains(&format!("crate::{layer}")) || line.contains(&format!("super::{layer}"))
            })
        })
        .map(|line| line.trim().to_owned())
        .collect()
}

/// Every upward import in the core, as `file: line`.
fn core_violations() -> Vec<String> {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/core/src");
    let mut found = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        sources(&core.join(layer), &mut files);
        assert!(files.len() >= 5, "the {layer} sources were found: {files:?}");
        let test_code =
            |f: &PathBuf| f.ends_with("tests.rs") || f.components().any(|c| c.as_os_str() == "tests");
        for file in files.iter().filter(|f| !test_code(f)) {
            let text = std::fs::read_to_string(file).expect("readable");
            for line in upward_imports(&text, forbidden) {
                found.push(format!("{}: {line}", file.strip_prefix(&core).unwrap_or(file).display()));
            }
        }
    }
    found
}

#[test]
fn the_domain_imports_no_port_or_use_case_and_a_port_imports_no_use_case() {
    let found = core_violations();
    assert!(
        found.is_empty(),
        "imports against the dependency rule (docs/ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_import_check_finds_an_upward_import_and_ignores_tests() {
    let planted = "use crate::domain::ids::WorkflowName;\nuse crate::use_cases::engine::Engine;\n\
                   #[cfg(test)]\nmod tests { use crate::ports::store::memory::MemoryStore; }\n";
    assert_eq!(upward_imports(planted, &["ports", "use_cases"]), ["use crate::use_cases::engine::Engine;"]);
    assert!(upward_imports("use crate::domain::ids::WorkflowName;", &["ports", "use_cases"]).is_empty());
}

#[test]
fn the_import_check_finds_the_lifecycle_importing_config_by_either_path() {
    let lifecycle =
        RULES.iter().find(|(part, _)| *part == "domain/lifecycle").expect("the lifecycle's rule").1;
    let planted = "//! built by [`crate::domain::config::Workflow::plan`]\n\
                   use crate::domain::config::Config;\nuse super::super::config::RetryPolicy;\n\
                   use super::plan::Plan;\n";
    assert_eq!(
        upward_imports(planted, lifecycle),
        ["use crate::domain::config::Config;", "use super::super::config::RetryPolicy;"]
    );
}

// ---- no import cycle between the modules of a crate -----------------------------------------

/// A source file's module, as a path under `src` (`domain/lifecycle` for every file of that
/// folder, `domain/config` for `domain/config.rs`; `lib.rs` and `main.rs` are the crate root, "").
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    // A file two folders down belongs to its folder's module.
    if !matches!(stem, "mod" | "lib" | "main") && parts.len() < 2 {
        parts.push(stem.to_owned());
    }
    parts.join("/")
}

/// The modules `code` names through `crate::…`, each as the longest of `modules` it starts with.
fn named_modules(code: &str, modules: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let line = line.split(" //").next().unwrap_or_default();
        for (i, _) in line.match_indices("crate::") {
            let path: String = line[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect::<String>()
                .replace("::", "/");
            let best = modules
                .iter()
                .filter(|m| !m.is_empty() && (path == **m || path.starts_with(&format!("{m}/"))))
                .max_by_key(|m| m.len());
            if let Some(m) = best {
                found.push(m.clone());
            }
        }
    }
    found
}

/// The imports on a cycle among the modules of the non-test sources `files` (path under `src`,
/// text), as [from, to]: modules, neither inside the other, that import each other through
/// `crate::`, directly or through others.
fn import_cycles(files: &[(PathBuf, String)]) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let modules: Vec<String> =
        files.iter().map(|(p, _)| module_of(p)).collect::<BTreeSet<_>>().into_iter().collect();
    let nested = |a: &str, b: &str| {
        a.is_empty()
            || b.is_empty()
            || a.starts_with(&format!("{b}/"))
            || b.starts_with(&format!("{a}/"))
            || a == b
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        let from = module_of(path);
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for to in named_modules(code, &modules) {
            if !nested(&from, &to) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // An edge on a cycle: a → b with b reaching a back.
    let reaches = |start: &str, goal: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.to_owned()];
        while let Some(m) = todo.pop() {
            if m == goal {
                return true;
            }
            if seen.insert(m.clone()) {
                todo.extend(edges.get(&m).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut cycles = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            if reaches(to, from) {
                cycles.push(vec![from.clone(), to.clone()]);
            }
        }
    }
    cycles
}

/// The non-test sources of a crate's `src`, as (path under `src`, text).
fn crate_sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files
        .into_iter()
        .map(|f| (f.strip_prefix(src).unwrap_or(&f).to_path_buf(), f))
        .filter(|(relative, _)| {
            !relative.ends_with("tests.rs") && !relative.components().any(|c| c.as_os_str() == "tests")
        })
        .map(|(relative, f)| (relative, std::fs::read_to_string(&f).expect("readable")))
        .collect()
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["shared/core", "shared/aws", "shared/lambda", "cli", "local", "sim", "harness"] {
        let src = root.join(krate).join("src");
        let files = crate_sources(&src);
        assert!(!files.is_empty(), "{krate}: its sources were found");
        let cycles = import_cycles(&files);
        assert!(cycles.is_empty(), "{krate}: modules that import each other: {cycles:?}");
    }
}

#[test]
fn the_cycle_check_finds_a_planted_cycle_through_a_third_module() {
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_owned());
    let planted = [
        file("domain/config.rs", "use crate::domain::lifecycle::Plan;\n"),
        file("domain/lifecycle/plan.rs", "use crate::domain::ids::Id;\n"),
        file("domain/ids.rs", "use crate::domain::config::Config;\n#[cfg(test)]\nuse crate::x;\n"),
        file("domain/lifecycle/mod.rs", "use super::plan::Plan; // crate::domain::config in a comment\n"),
    ];
    assert_eq!(
        import_cycles(&planted),
        [
            ["domain/config", "domain/lifecycle"],
            ["domain/ids", "domain/config"],
            ["domain/lifecycle", "domain/ids"]
        ]
    );
    // Without the last edge there is none; a module importing its own folder's modules is none.
    let broken = [planted[0].clone(), planted[1].clone(), file("domain/ids.rs", ""), planted[3].clone()];
    assert!(import_cycles(&broken).is_empty());
}
