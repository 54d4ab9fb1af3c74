//! Offline commands that look at the config and at events: `validate` and `match`.

use std::path::Path;

use anyhow::{Context, Result};
use baton_core::domain::config::{Config, Position, Workflow};
use baton_core::domain::event::Event;
use baton_core::domain::lifecycle::Timer;

use crate::terminal::line;

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
        match &s.timer {
            Some(Timer::After(after)) => {
                return format!("{} (timer {}, timeout {})", s.name, human(*after), human(s.timeout));
            }
            Some(Timer::Until(pointer)) => {
                return format!("{} (timer until {pointer}, timeout {})", s.name, human(s.timeout));
            }
            None => {}
        }
        let requires = match s.requires.of.len() {
            0 => "any success".to_owned(),
            _ if s.requires.is_all() => s.requires.of.join("+"),
            _ => s.requires.to_string(),
        };
        let optional = if s.optional { ", optional" } else { "" };
        let undo = s.compensate.as_ref().map_or(String::new(), |c| {
            format!(", undone by {:?} within {}, {} attempt(s)", c.task.title, human(c.timeout), c.attempts)
        });
        let remind = s.remind.map_or(String::new(), |r| {
            format!(", reminded after {} every {}, {} time(s)", human(r.after), human(r.every), r.times)
        });
        let levels: Vec<String> =
            s.escalate.iter().map(|e| format!("{} after {}", e.task.queue, human(e.after))).collect();
        let escalate = if levels.is_empty() {
            String::new()
        } else {
            format!(", escalated to {}", levels.join(", then "))
        };
        format!(
            "{} (needs {requires}, timeout {}{optional}{remind}{escalate}{undo})",
            s.name,
            human(s.timeout)
        )
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
    print!("{}", matches(&config, &event));
    Ok(())
}

/// What `baton match` prints for `event`. The event is a sender's (its `id`, its `type`, the
/// key it carries): each line goes through [`line`].
fn matches(config: &Config, event: &Event) -> String {
    let mut out = String::new();
    let mut matched = 0;
    for wf in &config.workflows {
        let start = wf.starts_on(event);
        matched += usize::from(start.is_some());
        match start {
            None => line(&mut out, &format!("{}: no match", wf.name)),
            Some(Ok(key)) => line(&mut out, &format!("{}: starts, key {key}", wf.name)),
            Some(Err(e)) => line(&mut out, &format!("{}: matches, but cannot start: {e}", wf.name)),
        }
        for (i, step) in wf.steps.iter().enumerate() {
            if step.accepts_events.as_ref().is_some_and(|p| p.matches(&event.normalised())) {
                line(
                    &mut out,
                    &format!("{}: step {} ({}) accepts this event as input", wf.name, i, step.name),
                );
            }
        }
    }
    if matched == 0 {
        line(&mut out, &format!("event {} ({}) starts no workflow", event.id, event.r#type));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event is a sender's: its `id` and `type` are printed escaped, so an ESC or a bidi
    /// override in them cannot reach the operator's terminal.
    #[test]
    fn a_senders_event_id_and_type_are_shown_escaped() {
        let config = Config::parse(
            "workflows:\n  order-review:\n    start: { when: { type: [\"order.placed\"] }, key: /subject }\n    steps:\n      - { name: review, timeout: 1h }\n",
        )
        .unwrap();
        let body = serde_json::json!({"specversion": "1.0", "id": "evt-\u{202e}1", "source": "shop",
            "type": "order.paid\u{1b}]0;owned\u{7}", "subject": "k-1", "data": {}});
        let event = Event::parse(&body.to_string()).unwrap();
        let text = matches(&config, &event);
        assert_eq!(
            text,
            "order-review: no match\nevent evt-\\u{202e}1 (order.paid\\x1b]0;owned\\x07) starts no workflow\n"
        );
    }
}
