//! `baton synth`: workflow config → state machine definitions and template.yaml's task queues
//! (one set per task `queue`, `baton_local::task_queues`), and `--check` for CI.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use baton_core::domain::asl;
use baton_core::domain::config::Config;
use serde_json::Value;

/// Writes (or with `check`, verifies) every generated definition under `root`, and the task
/// queues of `template`.
pub fn synth(config_path: &Path, root: &Path, template: &Path, check: bool) -> Result<()> {
    let config = Config::load(config_path)?;
    let mut problems = Vec::new();
    let expected: BTreeSet<String> = asl::render_all(&config).into_iter().map(|(p, _)| p).collect();
    for (rel, text) in asl::render_all(&config) {
        let path = root.join(&rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(text.as_str()) {
            println!("{rel}: up to date");
        } else if check {
            problems.push(format!("{rel}: stale or missing; run `baton synth` and commit the result"));
        } else {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            println!("{rel}: written");
        }
    }
    problems.extend(task_queues(template, &config, check)?);
    if check {
        problems.extend(stray_definitions(root, &expected)?);
        problems.extend(token_waits_without_timeout(root)?);
        problems.extend(template_declares_each(template, &config)?);
        problems.extend(grants_name_each_state_machine(template)?);
    }
    if !problems.is_empty() {
        bail!("baton synth --check found {} problem(s):\n  {}", problems.len(), problems.join("\n  "));
    }
    Ok(())
}

/// Writes template.yaml's task queue section for `config`, or with `check` names each queue it
/// lacks or holds beyond the config's.
fn task_queues(template: &Path, config: &Config, check: bool) -> Result<Vec<String>> {
    use baton_local::task_queues;
    let t = template.display();
    let text = std::fs::read_to_string(template).with_context(|| format!("cannot read {t}"))?;
    let spliced = match task_queues::splice(&text, config) {
        Ok(spliced) => spliced,
        Err(e) => return Ok(vec![format!("{t}: {e}")]),
    };
    if spliced == text {
        println!("{t}: task queues up to date");
        return Ok(Vec::new());
    }
    if !check {
        std::fs::write(template, spliced).with_context(|| format!("cannot write {t}"))?;
        println!("{t}: task queues written");
        return Ok(Vec::new());
    }
    let declared = task_queues::declared(&text)?;
    let wanted = task_queues::task_queues(config)?;
    let mut problems: Vec<String> = wanted
        .iter()
        .filter(|q| !declared.contains(&q.name))
        .map(|q| {
            format!(
                "{t}: no task queue for `queue: {}` ({}); run `baton synth` and commit the result",
                q.name, q.named_by
            )
        })
        .collect();
    problems.extend(declared.iter().filter(|d| !wanted.iter().any(|q| &q.name == *d)).map(|d| {
        format!(
            "{t}: declares the task queue of `{d}`, which no task in the config names; run `baton synth` \
             (a deploy then deletes that queue: let its worker take what is on it first)"
        )
    }));
    if problems.is_empty() {
        problems
            .push(format!("{t}: the task queues section is stale; run `baton synth` and commit the result"));
    }
    Ok(problems)
}

fn definition_files(root: &Path) -> Result<Vec<String>> {
    let dir = root.join(asl::OUT_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
    let mut files = Vec::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".asl.json") {
            files.push(format!("{}/{name}", asl::OUT_DIR));
        }
    }
    files.sort();
    Ok(files)
}

fn stray_definitions(root: &Path, expected: &BTreeSet<String>) -> Result<Vec<String>> {
    Ok(definition_files(root)?
        .into_iter()
        .filter(|f| !expected.contains(f))
        .map(|f| format!("{f}: no workflow in the config generates it; delete it"))
        .collect())
}

/// Every parked task must have a deadline. cfn-lint does not look inside ASL, so this does.
fn token_waits_without_timeout(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for rel in definition_files(root)? {
        let text = std::fs::read_to_string(root.join(&rel))?;
        let def: Value = serde_json::from_str(&text).with_context(|| format!("{rel} is not JSON"))?;
        for state in asl::states_without_timeout(&def) {
            problems.push(format!("{rel}: waitForTaskToken state {state:?} has no TimeoutSeconds"));
        }
    }
    Ok(problems)
}

/// Every managed policy granting `states:` actions must name every workflow's state machine (a
/// `Ref` of it, or it or its `Name` in an `Fn::Sub`, as for its alias): a workflow added to the template and missed here
/// would have its steps denied on AWS, and no local run would notice.
fn grants_name_each_state_machine(template: &Path) -> Result<Vec<String>> {
    let doc = template_doc(template)?;
    let Some(resources) = doc["Resources"].as_object() else { return Ok(Vec::new()) };
    let machines: Vec<&String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Serverless::StateMachine")
        .map(|(id, _)| id)
        .collect();
    let mut problems = Vec::new();
    for (id, policy) in resources.iter().filter(|(_, r)| r["Type"] == "AWS::IAM::ManagedPolicy") {
        let statements =
            policy["Properties"]["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default();
        let grants_states = statements.iter().any(|s| {
            let actions = match &s["Action"] {
                Value::Array(a) => a.clone(),
                other => vec![other.clone()],
            };
            actions.iter().any(|a| a.as_str().is_some_and(|a| a.starts_with("states:")))
        });
        if !grants_states {
            continue;
        }
        let text = serde_json::to_string(&statements)?;
        for machine in &machines {
            let named = text.contains(&format!("{{\"Ref\":\"{machine}\"}}"))
                || text.contains(&format!("${{{machine}}}"))
                || text.contains(&format!("${{{machine}.Name}}"));
            if !named {
                problems.push(format!(
                    "{}: {id} grants states: actions but does not name {machine}; list its Ref (and its executions) there",
                    template.display()
                ));
            }
        }
    }
    Ok(problems)
}

fn template_doc(template: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(template).with_context(|| format!("cannot read {}", template.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not YAML", template.display()))
}

/// template.yaml must declare a state machine for each workflow, pointing at its definition.
fn template_declares_each(template: &Path, config: &Config) -> Result<Vec<String>> {
    let doc = template_doc(template)?;
    let uris: BTreeSet<&str> = doc["Resources"]
        .as_object()
        .map(|r| {
            r.values()
                .filter(|res| res["Type"] == "AWS::Serverless::StateMachine")
                .filter_map(|res| res["Properties"]["DefinitionUri"].as_str())
                .collect()
        })
        .unwrap_or_default();
    Ok(config
        .workflows
        .iter()
        .map(|w| asl::definition_path(w.name.as_str()))
        .filter(|p| !uris.contains(p.as_str()))
        .map(|p| {
            format!(
                "{}: no AWS::Serverless::StateMachine has DefinitionUri {p}; copy OrderReviewStateMachine",
                template.display()
            )
        })
        .collect())
}
