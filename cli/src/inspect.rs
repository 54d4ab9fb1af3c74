//! Offline commands that look at the config and at events: `validate` and `match`.

use std::path::Path;

use anyhow::{Context, Result};
use baton_core::domain::config::{Config, Position, Workflow};
use baton_core::domain::event::Event;

/// `baton validate`: a summary line per workflow, or every problem with its path.
pub fn validate(path: &Path) -> Result<()> {
    let config = Config::load(path)?;
    for wf in &config.workflows {
        println!("{}", summary(wf));
    }
    println!("{}: {} workflow(s), valid, version {}", path.display(), config.workflows.len(), config.version);
    Ok(())
}

fn summary(wf: &Workflow) -> String {
    let step = |s: &baton_core::domain::config::Step| {
        let requires = if s.requires.is_empty() { "any success".to_owned() } else { s.requires.join("+") };
        let optional = if s.optional { ", optional" } else { "" };
        let undo = s.compensate.as_ref().map_or(String::new(), |c| {
            format!(", undone by {:?} within {}, {} attempt(s)", c.task.title, human(c.timeout), c.attempts)
        });
        format!("{} (needs {requires}, timeout {}{optional}{undo})", s.name, human(s.timeout))
    };
    // A parallel group: its branches side by side, in brackets.
    let steps: Vec<String> = wf
        .positions()
        .into_iter()
        .map(|p| match p {
            Position::Step(_, s) => step(s),
            Position::Group(g) => {
                let branches: Vec<String> =
                    wf.steps[g.first as usize..=g.last as usize].iter().map(step).collect();
                format!("{} [{}]", g.name, branches.join(" | "))
            }
        })
        .collect();
    format!(
        "{}: key {}, on_restart {}, {} step(s): {}",
        wf.name,
        wf.key,
        match wf.on_restart {
            baton_core::domain::lifecycle::OnRestart::AfterTerminal => "after_terminal",
            baton_core::domain::lifecycle::OnRestart::Never => "never",
        },
        wf.steps.len(),
        steps.join(" -> ")
    )
}

fn human(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// `baton match`: which workflows the event starts, with the correlation key for each.
pub fn match_event(config: &Path, event: &Path) -> Result<()> {
    let config = Config::load(config)?;
    let body = std::fs::read_to_string(event).with_context(|| format!("cannot read {}", event.display()))?;
    let event = Event::parse(&body).with_context(|| format!("{} is not a valid event", event.display()))?;
    let mut matched = 0;
    for wf in &config.workflows {
        let start = wf.starts_on(&event);
        matched += usize::from(start.is_some());
        match start {
            None => println!("{}: no match", wf.name),
            Some(Ok(key)) => println!("{}: starts, key {key}", wf.name),
            Some(Err(e)) => println!("{}: matches, but cannot start: {e}", wf.name),
        }
        for (i, step) in wf.steps.iter().enumerate() {
            if step.accepts_events.as_ref().is_some_and(|p| p.matches(&event.normalised())) {
                println!("{}: step {} ({}) accepts this event as input", wf.name, i, step.name);
            }
        }
    }
    if matched == 0 {
        println!("event {} ({}) starts no workflow", event.id, event.r#type);
    }
    Ok(())
}
