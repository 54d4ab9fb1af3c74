//! `baton local`'s console: a read-only view of the local stack, served on 127.0.0.1.
//!
//! - `/`: records by state, the waits past their deadline, and the records most recently
//!   written, with a search by key;
//! - `/record?workflow=<workflow>&key=<key>`: one record, the same page as `baton trace
//!   --html` (a query, not a path: a key may be `.` or `..`, which no path segment can carry);
//! - `/owes?queue=<queue>&overdue=true`: the tasks people owe an answer to, by queue, as
//!   `baton owes` lists them;
//! - `/dlq`: each dead-letter queue's replay plan, the dry run of `baton replay --dlq`. The
//!   page itself reads nothing: its script asks `POST /dlq/plan` for the plans.
//!
//! It changes nothing: no page has a button or a form that writes. Operators act with the CLI,
//! which has the guards. Planning a DLQ receives its messages and releases them at once, as the
//! dry run does; that still bumps their receive counts, so it is a POST carrying the console's
//! own header ([`PLAN_HEADER`]), which a page on another site can neither send from a form nor
//! from a script without a CORS preflight. Like every reader of the table, it never scans: the
//! recent records come from the `by_due` index, a search by key is a read per workflow.
//!
//! Every answer is for the console alone ([`guard`]): a request whose `Host` is not the
//! console's own (DNS rebinding) or that carries another site's `Origin` is refused, no answer
//! has CORS headers, and every answer carries a Content-Security-Policy that runs only the
//! pages' own inline code, `frame-ancestors 'none'` and `nosniff`.

use baton_aws::sqs::SqsDeadLetterReader;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use baton_core::domain::ids::{CorrelationKey, WorkflowName};
use baton_core::domain::lifecycle::Record;
use baton_core::ports::store::{COUNT_UP_TO, WorkflowStore};
use baton_core::use_cases::engine::Engine;
use baton_core::use_cases::replay::{self, Classification, Line, Origin};
use time::OffsetDateTime;

use crate::ops::StepNames;
use crate::owes;
use crate::status;
use crate::trace::{self, Sources};
use crate::web::{PLAN_HEADER, content_security_policy, dlq_page, escape, page, trace_page};

/// How many recent records the overview lists.
pub const RECENT: usize = 50;

/// What the console reads.
pub struct Console {
    pub sources: Sources,
    pub sqs: aws_sdk_sqs::Client,
    /// The operator's engine, for the replay plans.
    pub engine: Arc<Engine>,
    /// The workflow config file, for step names.
    pub config: PathBuf,
    /// The dead-letter queues: (name, URL, what their messages are).
    pub dlqs: Vec<(&'static str, String, Origin)>,
}

/// Serves the console on 127.0.0.1:`port` (0: any free port) until the task is aborted.
/// Returns its URL.
pub async fn serve(console: Console, port: u16) -> Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{port} for the console"))?;
    let url = format!("http://{}/", listener.local_addr()?);
    let app = Router::new()
        .route("/", get(overview))
        .route("/record", get(record))
        .route("/owes", get(owes_page))
        .route("/dlq", get(dlq_page_shell))
        .route("/dlq/plan", post(dlq_plans))
        .fallback(not_found)
        .with_state(Arc::new(console));
    let app = guard(app, listener.local_addr()?.port());
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("the console stopped: {e}");
        }
    });
    Ok((url, task))
}

const NAV: &str = "<nav class=\"top\"><a href=\"/\">Overview</a><a href=\"/owes\">Tasks owed</a><a href=\"/dlq\">Dead-letter queues</a></nav>\n";

fn failed(what: &str, e: anyhow::Error) -> Response {
    let body = format!("<p>{}: {}</p>", escape(what), escape(&format!("{e:#}")));
    (StatusCode::BAD_GATEWAY, Html(page("baton console: error", NAV, &body))).into_response()
}

async fn not_found() -> Response {
    let body = "<p>There is no such page. The console has an <a href=\"/\">overview</a>, a page per record, the <a href=\"/owes\">tasks owed</a> and the <a href=\"/dlq\">dead-letter queues</a>.</p>";
    (StatusCode::NOT_FOUND, Html(page("baton console: not found", NAV, body))).into_response()
}

/// The console's own origins: what its `Host` header and a browser's `Origin` may name.
fn own_hosts(port: u16) -> [String; 2] {
    [format!("127.0.0.1:{port}"), format!("localhost:{port}")]
}

/// Wraps the console's routes: refuses what is not for the console (see the module doc) and
/// puts the security headers on every answer, refusals included.
fn guard(router: Router, port: u16) -> Router {
    router.layer(axum::middleware::from_fn_with_state(port, same_origin))
}

fn header_text(headers: &header::HeaderMap, name: header::HeaderName) -> Option<String> {
    headers.get(name).map(|v| v.to_str().unwrap_or("(not text)").to_owned())
}

async fn same_origin(
    State(port): State<u16>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let own = own_hosts(port);
    let host = header_text(request.headers(), header::HOST).unwrap_or_default();
    let origin = header_text(request.headers(), header::ORIGIN);
    let mut response = if !own.contains(&host) {
        // A name rebound to 127.0.0.1 (DNS rebinding) reaches the listener with its own Host.
        let body =
            format!("<p>The console answers requests for 127.0.0.1:{port} only, not {}.</p>", escape(&host));
        (StatusCode::MISDIRECTED_REQUEST, Html(page("baton console: wrong host", "", &body))).into_response()
    } else if let Some(origin) = origin.filter(|o| !own.iter().any(|h| *o == format!("http://{h}"))) {
        // Another site's page (a CORS preflight among them): the console is no API for it.
        let body = format!("<p>The console answers its own pages only, not {}.</p>", escape(&origin));
        (StatusCode::FORBIDDEN, Html(page("baton console: foreign origin", "", &body))).into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    for name in [header::ACCESS_CONTROL_ALLOW_ORIGIN, header::ACCESS_CONTROL_ALLOW_CREDENTIALS] {
        headers.remove(name);
    }
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(content_security_policy()));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A link to a record's page: the workflow and key as query values, percent-encoded.
fn record_link(workflow: &str, key: &str) -> String {
    format!("<a href=\"/record?workflow={}&amp;key={}\">{}</a>", encode(workflow), encode(key), escape(key))
}

/// `text` as a query string's value: every byte but the unreserved ones percent-encoded.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

// ---- The overview -----------------------------------------------------------------------------

#[derive(serde::Deserialize)]
struct Search {
    q: Option<String>,
}

#[expect(clippy::too_many_lines, reason = "the overview page is one HTML document, written top to bottom")]
async fn overview(State(console): State<Arc<Console>>, Query(search): Query<Search>) -> Response {
    let names = match StepNames::load(Some(&console.config)) {
        Ok(names) => names,
        Err(e) => return failed("cannot read the config", e),
    };
    let store = &console.sources.store;
    let report = match status::read(store, &names, OffsetDateTime::now_utc(), COUNT_UP_TO).await {
        Ok(report) => report,
        Err(e) => return failed("cannot read the table", e),
    };
    let query = search.q.unwrap_or_default().trim().to_owned();
    let listed = if query.is_empty() {
        store.recent_records(RECENT).await.map_err(anyhow::Error::from)
    } else {
        by_key(&console, &names, &query).await
    };
    let recent = match listed {
        Ok(recent) => recent,
        Err(e) => return failed("cannot list the records", e),
    };

    let mut body = String::new();
    body.push_str(
        "<h2>Records by state</h2>\n<table id=\"counts\"><tr><th>state</th><th>records</th></tr>\n",
    );
    for state in report.counts.keys() {
        let _ = writeln!(
            body,
            "<tr data-state=\"{state}\"><td><span class=\"badge k-{state}\">{state}</span></td><td class=\"count\">{}</td></tr>",
            report.count(state)
        );
    }
    let _ = writeln!(body, "<tr><th>total</th><th id=\"total\">{}</th></tr></table>", report.total());

    body.push_str("<h2>Waiting past their deadline</h2>\n");
    if report.overdue.is_empty() {
        body.push_str(
            "<p class=\"empty\" id=\"overdue-none\">None: every waiting step is within its deadline.</p>\n",
        );
    } else {
        body.push_str("<table id=\"overdue\"><tr><th>workflow</th><th>key</th><th>step</th><th>deadline</th><th>overdue by</th></tr>\n");
        for o in &report.overdue {
            let step = o.step_name.clone().or(o.step.map(|s| s.to_string())).unwrap_or_default();
            let deadline = o.deadline.map(crate::ops::rfc3339).unwrap_or_default();
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{deadline}</td><td>{}</td></tr>",
                escape(&o.workflow),
                record_link(&o.workflow, &o.key),
                escape(&step),
                crate::ops::human(time::Duration::seconds(o.overdue_seconds))
            );
        }
        body.push_str("</table>\n");
    }

    let heading = if query.is_empty() {
        "Recent records".to_owned()
    } else {
        format!("Records with the key “{}”", escape(&query))
    };
    let _ = writeln!(
        body,
        "<h2>{heading}</h2>\n<form class=\"search\" method=\"get\" action=\"/\" role=\"search\"><label>Search by key <input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"order-1\"></label></form>",
        escape(&query)
    );
    if recent.is_empty() {
        body.push_str("<p class=\"empty\" id=\"recent-none\">No record.</p>\n");
    } else {
        let _ = writeln!(
            body,
            "<table id=\"recent\"><tr><th>workflow</th><th>key</th><th>state</th><th>generation</th><th>updated</th></tr>"
        );
        for r in &recent {
            let (workflow, key) = (r.workflow.as_str(), r.key.as_str());
            let kind = r.state.kind().as_str();
            let _ = writeln!(
                body,
                "<tr data-key=\"{}\"><td>{}</td><td>{}</td><td><span class=\"badge k-{kind}\">{}</span></td><td>{}</td><td>{}</td></tr>",
                escape(key),
                escape(workflow),
                record_link(workflow, key),
                escape(&r.state.to_string()),
                r.generation,
                crate::ops::rfc3339(r.updated_at)
            );
        }
        body.push_str("</table>\n");
    }
    let _ = writeln!(
        body,
        "<p class=\"empty\">Read at {} from the table {}.</p>",
        escape(&report.at),
        escape(&report.table)
    );
    Html(page("baton console", NAV, &body)).into_response()
}

// ---- The tasks owed ---------------------------------------------------------------------------

#[derive(serde::Deserialize)]
struct OwesSearch {
    queue: Option<String>,
    overdue: Option<bool>,
}

/// The tasks people owe an answer to, a table per queue (`baton owes`).
async fn owes_page(State(console): State<Arc<Console>>, Query(search): Query<OwesSearch>) -> Response {
    let names = match StepNames::load(Some(&console.config)) {
        Ok(names) => names,
        Err(e) => return failed("cannot read the config", e),
    };
    let filter = owes::Filter {
        queue: search.queue.map(|q| q.trim().to_owned()).filter(|q| !q.is_empty()),
        overdue: search.overdue.unwrap_or(false),
    };
    let now = OffsetDateTime::now_utc();
    let report = match owes::read(&console.sources.store, &names, now, COUNT_UP_TO, &filter).await {
        Ok(report) => report,
        Err(e) => return failed("cannot read the table", e),
    };
    let mut body = String::new();
    let count = if report.more_than {
        format!(
            "more than {} (the first {} records of each list read)",
            report.tasks.len(),
            report.read_up_to
        )
    } else {
        report.tasks.len().to_string()
    };
    // A search by queue, and links for all or only the overdue: nothing here submits but a
    // GET, and the page has no button.
    let queue = filter.queue.as_deref().unwrap_or("");
    let (all, late) =
        (format!("/owes?queue={}", encode(queue)), format!("/owes?queue={}&amp;overdue=true", encode(queue)));
    let _ = writeln!(
        body,
        "<h2>Tasks owed: <span id=\"owed-count\">{count}</span></h2>\n<form class=\"search\" method=\"get\" action=\"/owes\" role=\"search\"><label>Queue <input type=\"search\" name=\"queue\" value=\"{}\" placeholder=\"reviewers\"></label>{}</form>\n<p>Show <a href=\"{all}\" id=\"owed-all\">all</a> or <a href=\"{late}\" id=\"owed-overdue\">only those past their deadline</a>{}.</p>",
        escape(queue),
        if filter.overdue { "<input type=\"hidden\" name=\"overdue\" value=\"true\">" } else { "" },
        if filter.overdue { " (shown: past their deadline)" } else { "" }
    );
    if report.tasks.is_empty() {
        body.push_str("<p class=\"empty\" id=\"owed-none\">None: no task is waiting for an answer.</p>\n");
    }
    body.push_str(&owed_tables(&report));
    let _ = writeln!(
        body,
        "<p class=\"empty\">Read at {} from the table {}.</p>",
        escape(&report.at),
        escape(&report.table)
    );
    Html(page("baton console: tasks owed", NAV, &body)).into_response()
}

/// The tasks of `report`, a table per queue.
fn owed_tables(report: &owes::Report) -> String {
    let mut body = String::new();
    let mut queue = None;
    for t in &report.tasks {
        if queue != Some(&t.queue) {
            if queue.is_some() {
                body.push_str("</table>\n");
            }
            queue = Some(&t.queue);
            let name = t.queue.as_deref().unwrap_or("(unknown)");
            let _ = writeln!(
                body,
                "<h3>Queue {}</h3>\n<table class=\"owed\" data-queue=\"{}\"><tr><th>workflow</th><th>key</th><th>step</th><th>attempt</th><th>out for</th><th>reminders</th><th>escalated to</th><th>deadline</th></tr>",
                escape(name),
                escape(name)
            );
        }
        let step = t.step_name.clone().unwrap_or_else(|| t.step.to_string());
        let step = if t.role == "step" { step } else { format!("{step} ({})", t.role) };
        let level = match (t.level, &t.level_queue) {
            (0, _) => "-".to_owned(),
            (n, q) => format!("level {n} ({})", q.as_deref().unwrap_or("?")),
        };
        let deadline = t.deadline.map(crate::ops::rfc3339).unwrap_or_default();
        let late = if t.overdue { " class=\"overdue\"" } else { "" };
        let _ = writeln!(
            body,
            "<tr data-key=\"{}\"{late}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{deadline}{}</td></tr>",
            escape(&t.key),
            escape(&t.workflow),
            record_link(&t.workflow, &t.key),
            escape(&step),
            t.attempt,
            t.age_seconds.map(|s| crate::ops::human(time::Duration::seconds(s))).unwrap_or_default(),
            t.reminders,
            escape(&level),
            if t.overdue { " (overdue)" } else { "" }
        );
    }
    if queue.is_some() {
        body.push_str("</table>\n");
    }
    body
}

/// The records of every workflow of the config with exactly this key.
async fn by_key(console: &Console, names: &StepNames, key: &str) -> Result<Vec<Record>> {
    let Ok(key) = CorrelationKey::parse(key) else { return Ok(Vec::new()) };
    let mut found = Vec::new();
    for workflow in names.workflows() {
        found.extend(console.sources.store.load(workflow, &key).await?.map(std::sync::Arc::unwrap_or_clone));
    }
    Ok(found)
}

// ---- A record ---------------------------------------------------------------------------------

#[derive(serde::Deserialize)]
struct RecordQuery {
    workflow: String,
    key: String,
}

async fn record(
    State(console): State<Arc<Console>>,
    query: Result<Query<RecordQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(RecordQuery { workflow, key })) = query else { return not_found().await };
    let (Ok(workflow), Ok(key)) =
        (WorkflowName::parse(workflow.as_str()), CorrelationKey::parse(key.as_str()))
    else {
        return not_found().await;
    };
    let names = match StepNames::load(Some(&console.config)) {
        Ok(names) => names,
        Err(e) => return failed("cannot read the config", e),
    };
    match trace::read(&console.sources, names, (&workflow, &key)).await {
        Ok(Some(report)) => match serde_json::to_value(&report) {
            Ok(doc) => Html(trace_page(&doc, NAV)).into_response(),
            Err(e) => failed("cannot write the trace", e.into()),
        },
        Ok(None) => {
            let body = format!(
                "<p id=\"no-record\">Nothing is stored for {} / {}.</p>",
                escape(workflow.as_str()),
                escape(key.as_str())
            );
            (StatusCode::NOT_FOUND, Html(page("baton console: no such record", NAV, &body))).into_response()
        }
        Err(e) => failed("cannot read the trace", e),
    }
}

// ---- The dead-letter queues -------------------------------------------------------------------

/// The dead-letter page: it reads nothing itself; its script asks for the plans.
async fn dlq_page_shell() -> Response {
    let body = "<p>What <code>baton replay --dlq &lt;queue&gt;</code> would do with each message: the dry run. \
         Act with the CLI (<code>--apply</code>), which guards each line by the record's version.</p>\n\
         <div id=\"plans\"><p class=\"empty\">Planning&hellip;</p></div>\n";
    Html(dlq_page("baton console: dead-letter queues", NAV, body)).into_response()
}

/// The plans, as HTML for the dead-letter page. Only for a request with the console's header
/// (see the module doc); [`guard`] has already refused other sites' origins.
async fn dlq_plans(State(console): State<Arc<Console>>, headers: header::HeaderMap) -> Response {
    if headers.get(PLAN_HEADER).and_then(|v| v.to_str().ok()) != Some("plan") {
        let body =
            format!("<p>Plans are asked for by the console's page, with its {PLAN_HEADER} header.</p>");
        return (StatusCode::FORBIDDEN, Html(body)).into_response();
    }
    let now = console.engine.now();
    let mut body = String::new();
    for (name, url, origin) in &console.dlqs {
        match replay::plan_dlq(
            &console.engine,
            &SqsDeadLetterReader::new(console.sqs.clone(), url),
            *origin,
            now,
        )
        .await
        {
            Ok(lines) => body.push_str(&plan_table(name, &lines)),
            Err(e) => {
                let e = anyhow::Error::from(e);
                let _ = writeln!(
                    body,
                    "<p>cannot plan the {} dead-letter queue: {}</p>",
                    escape(name),
                    escape(&format!("{e:#}"))
                );
                return (StatusCode::BAD_GATEWAY, Html(body)).into_response();
            }
        }
    }
    Html(body).into_response()
}

/// One queue's plan: a row per message and record it concerns.
fn plan_table(name: &str, lines: &[Line]) -> String {
    let mut out = format!("<h2>{}</h2>\n", escape(name));
    if lines.is_empty() {
        let _ = writeln!(out, "<p class=\"empty\" data-queue=\"{name}\">Empty.</p>");
        return out;
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines {
        *counts.entry(line.classification.to_string()).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(c, n)| format!("{n} {c}")).collect();
    let _ = writeln!(out, "<p>{} messages: {}.</p>", lines.len(), summary.join(", "));
    let _ = writeln!(
        out,
        "<table class=\"plan\" data-queue=\"{name}\"><tr><th>message</th><th>class</th><th>record (state, version)</th><th>effect</th></tr>"
    );
    let row = |out: &mut String, id: &str, class: Classification, record: String, effect: &str| {
        let _ = writeln!(
            out,
            "<tr data-class=\"{class}\"><td class=\"mono\">{}</td><td><span class=\"badge k-{}\">{class}</span></td><td>{record}</td><td>{}</td></tr>",
            escape(id),
            match class {
                Classification::Safe => "succeeded",
                Classification::Noop => "cancelled",
                Classification::NeedsHuman => "failed",
            },
            escape(effect)
        );
    };
    for line in lines {
        if line.targets.is_empty() {
            row(&mut out, &line.id, line.classification, "none".into(), line.note.as_deref().unwrap_or(""));
        }
        for t in &line.targets {
            let record = match (&t.state, t.version) {
                (Some(s), Some(v)) => format!("{} {} v{v}", record_link(&t.workflow, &t.key), escape(s)),
                _ => format!("{} (no record)", record_link(&t.workflow, &t.key)),
            };
            row(&mut out, &line.id, t.classification, record, &t.effect);
        }
    }
    out.push_str("</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_table_has_a_row_per_target_with_its_class_in_words() {
        let line = Line {
            id: "m-1".into(),
            origin: Origin::Intake,
            classification: Classification::NeedsHuman,
            note: Some("not json".into()),
            targets: Vec::new(),
        };
        let html = plan_table("intake", &[line]);
        assert!(html.contains("data-class=\"needs-human\""), "{html}");
        assert!(html.contains(">needs-human</span>") && html.contains("not json"), "{html}");
        assert!(!html.contains("<form") && !html.contains("<button"), "nothing to click that acts");
        assert!(plan_table("progress", &[]).contains("Empty."));
    }

    #[test]
    fn the_pages_link_only_within_the_console() {
        assert!(!NAV.contains("http"));
        assert_eq!(
            record_link("order-review", "k-1"),
            "<a href=\"/record?workflow=order-review&amp;key=k-1\">k-1</a>"
        );
        assert!(record_link("order-review", "..").contains("key=..\""), "a key that is no path segment");
        assert_eq!(
            record_link("order-review", "a/b:c@d+e=f"),
            "<a href=\"/record?workflow=order-review&amp;key=a%2Fb%3Ac%40d%2Be%3Df\">a/b:c@d+e=f</a>",
            "a key may hold what a path segment may not"
        );
    }

    /// Sends one raw request to a guarded router on a free port: (status line, headers, body).
    async fn ask(request: &str) -> (String, String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = Router::new().route("/", get(|| async { "ok" }).post(|| async { "posted" }));
        let server = tokio::spawn(async move { axum::serve(listener, guard(app, port)).await });
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = request.replace("PORT", &port.to_string());
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        server.abort();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (status.to_owned(), headers.to_ascii_lowercase(), body.to_owned())
    }

    fn assert_secure_headers(headers: &str) {
        assert!(headers.contains("content-security-policy: default-src 'self';"), "{headers}");
        assert!(
            headers.contains("frame-ancestors 'none'") && !headers.contains("unsafe-inline"),
            "{headers}"
        );
        assert!(headers.contains("x-content-type-options: nosniff"), "{headers}");
        assert!(!headers.contains("access-control-allow"), "no CORS header: {headers}");
    }

    #[tokio::test]
    async fn the_console_answers_its_own_origin_with_a_content_security_policy() {
        let (status, headers, body) =
            ask("GET / HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nConnection: close\r\n\r\n").await;
        assert!(status.contains(" 200 ") && body.ends_with("ok"), "{status} {body}");
        assert_secure_headers(&headers);
        let (status, headers, _) = ask(
            "POST / HTTP/1.1\r\nHost: localhost:PORT\r\nOrigin: http://localhost:PORT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(status.contains(" 200 "), "the console's own page may post: {status}");
        assert_secure_headers(&headers);
    }

    #[tokio::test]
    async fn another_sites_origin_and_another_host_are_refused_with_the_same_headers() {
        let (status, headers, body) = ask(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nOrigin: https://evil.example\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(status.contains(" 403 ") && !body.ends_with("ok"), "{status} {body}");
        assert_secure_headers(&headers);
        let preflight = "OPTIONS / HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nOrigin: http://127.0.0.1:1\r\n\
            Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: x-baton-console\r\n\
            Connection: close\r\n\r\n";
        let (status, headers, _) = ask(preflight).await;
        assert!(status.contains(" 403 "), "a preflight from another origin: {status}");
        assert_secure_headers(&headers);
        let (status, _, _) =
            ask("POST / HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nOrigin: null\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
        assert!(status.contains(" 403 "), "an opaque origin (a sandboxed frame): {status}");
        let (status, headers, _) =
            ask("GET / HTTP/1.1\r\nHost: rebound.example:PORT\r\nConnection: close\r\n\r\n").await;
        assert!(status.contains(" 421 "), "{status}");
        assert_secure_headers(&headers);
    }
}
