//! A minimal HTTP client for tests (hyper, already in the dependency tree through the SDK).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// POSTs `body` with `headers` and `content-type: application/json`; returns the status and the
/// body parsed as JSON (`Value::Null` when it is not JSON).
pub async fn post_json(url: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = hyper::Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request.body(Full::new(Bytes::from(body))).expect("a request");
    let response = client.request(request).await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.expect("a body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
