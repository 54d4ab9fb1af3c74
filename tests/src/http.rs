//! HTTP for tests (hyper, already in the dependency tree through the SDK), and a callback sender
//! that behaves as a Standard Webhooks sender does.

use std::time::Duration;

use baton_core::domain::webhook::Secrets;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// An HTTP answer: the status, the body parsed as JSON (`Value::Null` when it is not JSON), and
/// `Retry-After` in seconds when present.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<u64>,
}

/// POSTs `body` with `headers` and `content-type: application/json`.
pub async fn post(url: &str, headers: &[(&str, String)], body: Vec<u8>) -> Reply {
    request(hyper::Method::POST, url, headers, body).await
}

/// GETs `url`.
pub async fn get(url: &str) -> Reply {
    request(hyper::Method::GET, url, &[], Vec::new()).await
}

/// DELETEs `url`.
pub async fn delete(url: &str) -> Reply {
    request(hyper::Method::DELETE, url, &[], Vec::new()).await
}

async fn request(method: hyper::Method, url: &str, headers: &[(&str, String)], body: Vec<u8>) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request =
        hyper::Request::builder().method(method.clone()).uri(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(Full::new(Bytes::from(body))).expect("a request");
    let response = client.request(request).await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let bytes = response.into_body().collect().await.expect("a body").to_bytes();
    Reply { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), retry_after }
}

/// POSTs `body` once; returns the status and the JSON body.
pub async fn post_json(url: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, Value) {
    let reply = post(url, headers, body).await;
    (reply.status, reply.body)
}

/// How many times a sender tries one callback before it gives up.
pub const SENDER_ATTEMPTS: u32 = 6;

/// Sends a signed callback to `{api_url}/v1/callbacks` as a Standard Webhooks sender does: each
/// attempt signed afresh with the same `webhook-id`, and a 503 retried after its `Retry-After`,
/// up to [`SENDER_ATTEMPTS`] attempts. Returns the final status and body; every 503 it retried
/// is checked to be the documented one on the way.
pub async fn send_callback(api_url: &str, secrets: &Secrets, id: &str, body: &Value) -> (u16, Value) {
    let url = format!("{api_url}/v1/callbacks");
    let text = body.to_string();
    for attempt in 1..=SENDER_ATTEMPTS {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let headers = [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", now.to_string()),
            ("webhook-signature", secrets.sign(id, now, text.as_bytes())),
        ];
        let reply = post(&url, &headers, text.clone().into_bytes()).await;
        if reply.status != 503 || attempt == SENDER_ATTEMPTS {
            return (reply.status, reply.body);
        }
        // Both documented 503s: a dependency is down, or an earlier attempt with this id may
        // still be at work (its receipt is held for 30 s).
        let error = reply.body["error"].as_str().unwrap_or_default();
        assert!(["unavailable", "in_progress"].contains(&error), "a 503 names its error: {}", reply.body);
        let wait = reply.retry_after.unwrap_or_else(|| panic!("a 503 without Retry-After: {}", reply.body));
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
    unreachable!("the last attempt returns")
}
