//! Text for a terminal, in one place for every command that prints a table or a plan.
//!
//! Senders choose much of what an operator reads: a callback's `error` and `cause`, input ids,
//! data, an event's `type`. Printed raw, an ESC could rewrite the operator's screen or title, a
//! newline could forge a line of a table, and a bidirectional override could reorder what is
//! shown. So every text form (`baton trace`, `compensate plan`, `replay`, `status`, `rollout
//! plan`, `inspect event`) writes its lines through [`line`] or its fields through
//! [`terminal_safe`]; the `--json` forms keep the exact text.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Appends one line of text, its control characters escaped (see [`terminal_safe`]).
pub fn line(out: &mut String, text: &str) {
    out.push_str(&terminal_safe(text));
    out.push('\n');
}

/// Rows of cells as lines of aligned columns, each column but the last as wide as its widest
/// cell (in characters, once escaped as [`terminal_safe`] escapes them), two spaces apart: a
/// long step name or message id moves the columns after it, never into them.
pub fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let cells: Vec<Vec<Cow<'_, str>>> =
        rows.iter().map(|r| r.iter().map(|c| terminal_safe(c)).collect()).collect();
    let width =
        |i: usize| cells.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cells.iter().map(Vec::len).max().unwrap_or(0)).map(width).collect();
    cells
        .iter()
        .map(|row| {
            let mut text = String::new();
            for (i, cell) in row.iter().enumerate() {
                text.push_str(cell);
                if i + 1 < row.len() {
                    text.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count() + 2));
                }
            }
            text.trim_end().to_owned()
        })
        .collect()
}

/// `text` fit for a terminal: every control character (C0 including newline and ESC, DEL, C1)
/// and every bidirectional override is written visibly as an escape (`\x1b`, `\n`, `\u{202e}`).
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 && unsafe_char(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_escaped() {
        let rows = vec![
            vec!["step".to_owned(), "state".to_owned(), "what".to_owned()],
            vec!["a-very-long-step-name".to_owned(), "done".to_owned(), "x".to_owned()],
            vec!["b\u{1b}".to_owned(), "skipped (not completed)".to_owned(), "y".to_owned()],
        ];
        let lines = super::columns(&rows);
        assert_eq!(
            lines,
            [
                "step                   state                    what",
                "a-very-long-step-name  done                     x",
                "b\\x1b                  skipped (not completed)  y",
            ]
        );
    }

    use super::*;

    #[test]
    fn control_characters_and_bidi_overrides_are_shown_escaped_and_the_rest_kept() {
        assert!(matches!(terminal_safe("order-1 ok é"), Cow::Borrowed("order-1 ok é")));
        assert_eq!(
            terminal_safe("a\x1b[2J\nb\r\t\x7f\u{9b}\u{202e}c"),
            "a\\x1b[2J\\nb\\r\\t\\x7f\\x9b\\u{202e}c"
        );
        let mut out = String::new();
        line(&mut out, "one\nforged");
        assert_eq!(out, "one\\nforged\n", "one line, whatever it holds");
    }
}
