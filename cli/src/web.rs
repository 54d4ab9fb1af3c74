//! baton's HTML: the trace page (`baton trace --html`, and the console's record page) and the
//! console's other pages. Every page is self-contained: its CSS and JS are inline, and it fetches
//! nothing. The trace page is a view of exactly the `baton.trace/v1` document embedded in it,
//! so the page and `--json` cannot disagree.

use serde_json::Value;

const STYLE: &str = include_str!("web/style.css");
const TRACE_TEMPLATE: &str = include_str!("web/trace.html");
const TRACE_SCRIPT: &str = include_str!("web/trace.js");

/// The trace page for a `baton.trace/v1` document; `nav` is HTML put above it (the console's
/// links), empty for a file.
pub fn trace_page(doc: &Value, nav: &str) -> String {
    // The document sits in a <script> element, where only "</script" could end it early: every
    // "<" is written as the JSON escape \u003c (it can only occur inside strings).
    let json = doc.to_string().replace('<', "\\u003c");
    TRACE_TEMPLATE
        .replace("/*STYLE*/", STYLE)
        .replace("<!--NAV-->", nav)
        .replace("/*SCRIPT*/", TRACE_SCRIPT)
        .replace("/*TRACE*/", &json)
}

/// The one script of a console page: it records how wide the page came out, as the trace
/// page's does, for the browser tests (nothing on the page acts).
const WIDTH_SCRIPT: &str =
    "document.body.setAttribute(\"data-scroll-width\", String(document.documentElement.scrollWidth));";

/// A page of the console: `title`, then `body` (HTML, escaped by the caller).
pub fn page(title: &str, nav: &str, body: &str) -> String {
    let title = escape(title);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n{nav}<header class=\"top\"><h1>{title}</h1></header>\n<main>\n{body}</main>\n<script>{WIDTH_SCRIPT}</script>\n</body>\n</html>\n"
    )
}

/// `text` with the five characters HTML gives meaning escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_document_is_embedded_whole_and_cannot_end_its_script_element() {
        let doc = json!({"schema": "baton.trace/v1", "key": "</script><script>alert(1)</script>"});
        let page = trace_page(&doc, "");
        assert_eq!(page.matches("</script>").count(), 2, "only the page's own two script elements end");
        let start = page.find("id=\"trace\">").unwrap() + "id=\"trace\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        let embedded: Value = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(embedded, doc, "the page carries exactly the document");
        assert!(!page.contains("http://") && !page.contains("https://"), "nothing is fetched");
    }

    /// Input ids are the senders' own: names of JavaScript's object properties among them.
    #[test]
    fn a_trace_whose_ids_name_object_properties_still_draws_in_a_browser() {
        use baton_tests::browser::{Browser, select};
        let entry = |source: &str, kind: &str, id: &str| {
            json!({"at": "2026-12-01T00:00:00Z", "source": source, "kind": kind, "input_id": id,
                   "status": "applied", "step": 0, "step_name": "constructor", "expires_at": "2026-12-02T00:00:00Z"})
        };
        let transition = json!({"at": "2026-12-01T00:00:01Z", "source": "record", "kind": "transition", "generation": 1,
            "from": "waiting{0}", "to": "advancing{0}", "cause": "complete", "cause_id": "toString", "version": 3});
        let doc = json!({"schema": "baton.trace/v1", "workflow": "w", "key": "k", "record": null, "executions": [],
            "graph": {"start_at": "constructor", "states": [{"name": "constructor", "type": "Task", "step": 0,
                "next": null, "end": true, "catches": []}]},
            "timeline": [entry("inbox", "buffered", "constructor"), entry("receipt", "receipt", "__proto__"),
                entry("receipt", "receipt", "toString"), transition]});
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("trace.html");
        std::fs::write(&file, trace_page(&doc, "")).unwrap();
        let dom = Browser::find().dom(&format!("file://{}", file.display()), 1000);
        assert_eq!(select(&dom, "body[data-rendered=true]").len(), 1, "the script ran to the end");
        assert_eq!(select(&dom, ".entry").len(), 4);
        assert_eq!(select(&dom, ".graph-state[data-name=constructor]").len(), 1);
    }

    #[test]
    fn console_text_is_escaped() {
        assert_eq!(escape(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert!(page("a <b>", "", "").contains("<title>a &lt;b&gt;</title>"));
    }
}
