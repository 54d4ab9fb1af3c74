//! baton's HTML: the trace page (`baton trace --html`, and the console's record page) and the
//! console's other pages. Every page is self-contained: its CSS and JS are inline, and it fetches
//! nothing (but the console's dead-letter page, which asks the console itself for its plans).
//! The trace page is a view of exactly the `baton.trace/v1` document embedded in it, so the
//! page and `--json` cannot disagree.
//!
//! The console serves every page under [`content_security_policy`], which allows exactly the
//! inline scripts and style sheets below, by their hashes: a script that escaping let through
//! (or an inline `style=` or `onclick=`) would not run. A page element added here must be added
//! to the policy, which a test holds.

use serde_json::Value;

const STYLE: &str = include_str!("web/style.css");
const TRACE_TEMPLATE: &str = include_str!("web/trace.html");
const TRACE_SCRIPT: &str = include_str!("web/trace.js");
/// The console's dead-letter page asks for its plans with a POST that carries this header: a
/// form on another site cannot send a custom header, and a script there would need a CORS
/// preflight, which the console refuses.
pub const PLAN_HEADER: &str = "x-baton-console";
const DLQ_SCRIPT: &str = include_str!("web/dlq.js");

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
    page_with_script(title, nav, body, WIDTH_SCRIPT)
}

/// The dead-letter page: `body`, then the plans, which its script asks the console for.
pub fn dlq_page(title: &str, nav: &str, body: &str) -> String {
    page_with_script(title, nav, body, DLQ_SCRIPT)
}

fn page_with_script(title: &str, nav: &str, body: &str, script: &str) -> String {
    let title = escape(title);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n{nav}<header class=\"top\"><h1>{title}</h1></header>\n<main>\n{body}</main>\n<script>{script}</script>\n</body>\n</html>\n"
    )
}

/// The console's Content-Security-Policy: its own origin only, no frame around it, and of
/// inline code exactly the elements above (each as the page writes it, between its tags).
pub fn content_security_policy() -> &'static str {
    use base64::Engine as _;
    use sha2::Digest as _;
    static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        let hash = |text: &str| {
            let digest = sha2::Sha256::digest(text.as_bytes());
            format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest))
        };
        let trace_script = format!("\n{TRACE_SCRIPT}\n");
        let scripts = [trace_script.as_str(), WIDTH_SCRIPT, DLQ_SCRIPT].map(hash).join(" ");
        let style = hash(&format!("\n{STYLE}\n"));
        format!(
            "default-src 'self'; script-src {scripts}; style-src {style}; img-src 'self' data:; \
             connect-src 'self'; base-uri 'none'; form-action 'self'; object-src 'none'; \
             frame-ancestors 'none'"
        )
    })
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

    /// Every inline script and style sheet of every page kind is allowed by its hash, and nothing
    /// else inline is: the browser tests show the pages draw under the policy.
    #[test]
    fn the_policy_allows_exactly_the_pages_own_inline_code() {
        use base64::Engine as _;
        use sha2::Digest as _;
        let policy = content_security_policy();
        let directive = |name: &str| {
            policy.split(';').map(str::trim).find(|d| d.starts_with(name)).unwrap_or_default().to_owned()
        };
        let (scripts, styles) = (directive("script-src "), directive("style-src "));
        assert!(!policy.contains("unsafe") && policy.contains("frame-ancestors 'none'"), "{policy}");
        let doc = json!({"schema": "baton.trace/v1"});
        for html in [trace_page(&doc, ""), page("t", "", "<p>b</p>"), dlq_page("t", "", "")] {
            for (tag, allowed) in [("script", &scripts), ("style", &styles)] {
                for piece in html.split(&format!("<{tag}")).skip(1) {
                    let (attrs, rest) = piece.split_once('>').unwrap();
                    if attrs.contains("application/json") {
                        continue;
                    }
                    let inline = &rest[..rest.find(&format!("</{tag}>")).unwrap()];
                    let digest = sha2::Sha256::digest(inline.as_bytes());
                    let hash =
                        format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest));
                    assert!(
                        allowed.contains(&hash),
                        "a <{tag}> not in the policy: {}",
                        &inline[..inline.len().min(60)]
                    );
                }
            }
            assert!(
                !html.contains(" style=\"") && !html.contains(" onclick="),
                "inline attributes would be blocked"
            );
        }
    }
}
