//! The callback API's secrets on the emulator's Secrets Manager, as on AWS (issue 11): the
//! callback function reads them at cold start, refreshes them on a TTL, and so takes a rotation
//! without a redeploy. The TTL logic itself is unit-tested with a virtual clock
//! (`baton_core::ports::secrets`); this shows the real path: SDK, Secrets Manager, signature check.

use std::time::Duration;

use baton_core::domain::webhook::Secrets;
use baton_tests::http::send_callback;
use baton_tests::logs::captured;
use baton_tests::system::{TEST_SECRET, start_system_env};
use serde_json::json;

const NEW_SECRET: &str = "whsec_cm90YXRlZC1iYXRvbi1zZWNyZXQtZm9yLXRlc3Rz";
const TTL: Duration = Duration::from_secs(1);

/// The list during a rotation: the new secret first (what `sign` uses), the old one still on.
fn during_rotation() -> &'static str {
    "whsec_cm90YXRlZC1iYXRvbi1zZWNyZXQtZm9yLXRlc3Rz,whsec_YmF0b24tZW5kLXRvLWVuZC10ZXN0LXNlY3JldA=="
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_is_accepted_after_the_ttl_and_the_old_one_refused_once_removed() {
    captured();
    let system =
        start_system_env(baton_tests::ORDER_REVIEW, &[("BATON_WEBHOOK_SECRETS_TTL_SECONDS", "1")]).await;
    let arn = system.baton.provisioned.function_env["CallbackFunction"]["BATON_WEBHOOK_SECRET_ARN"].clone();
    assert!(
        arn.starts_with("arn:aws:secretsmanager:"),
        "the deployed path, not an environment variable: {arn}"
    );
    let secretsmanager =
        aws_sdk_secretsmanager::Client::new(&baton_tests::Emulator::from_env().sdk_config().await);
    let put = |value: &'static str| {
        let (client, arn) = (secretsmanager.clone(), arn.clone());
        async move { client.put_secret_value().secret_id(arn).secret_string(value).send().await.expect("put") }
    };
    let (old, new) = (Secrets::parse(TEST_SECRET).unwrap(), Secrets::parse(NEW_SECRET).unwrap());
    let body = |n: u32| {
        json!({"workflow": "order-review", "key": format!("k-rot-{n}"), "step": "manual-review",
            "outcome": "succeeded", "data": {"decision": "ok"}})
    };
    let url = system.api_url().to_owned();
    let status = async |secrets: &Secrets, n: u32| {
        send_callback(&url, secrets, &format!("cb-rot-{n}"), &body(n)).await
    };

    let (s, answer) = status(&old, 1).await;
    assert_eq!(s, 202, "signed with the secret read at start-up: {answer}");
    let (s, answer) = status(&new, 2).await;
    assert_eq!((s, answer["error"].as_str()), (401, Some("invalid_signature")), "not a secret yet: {answer}");

    // Rotation, step 1: both secrets are active. Once the TTL has passed, the new one is accepted.
    put(during_rotation()).await;
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    assert_eq!(status(&new, 3).await.0, 202, "the new secret, read again after the TTL");
    assert_eq!(status(&old, 4).await.0, 202, "the old one still, during the rotation");

    // Step 2: the old secret is removed. Once the TTL has passed, it is refused.
    put(NEW_SECRET).await;
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    let (s, answer) = status(&old, 5).await;
    assert_eq!((s, answer["error"].as_str()), (401, Some("invalid_signature")), "{answer}");
    assert_eq!(status(&new, 6).await.0, 202);
    system.stop().await;
}

/// A secret scoped to one step lets its sender call back that step and nothing else; a rotation
/// to a value that cannot be used keeps the secrets in use and counts the alarm's metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_secret_reaches_only_its_step_and_an_unusable_rotation_raises_the_alarm_metric() {
    captured();
    let system =
        start_system_env(baton_tests::ORDER_REVIEW, &[("BATON_WEBHOOK_SECRETS_TTL_SECONDS", "1")]).await;
    let arn = system.baton.provisioned.function_env["CallbackFunction"]["BATON_WEBHOOK_SECRET_ARN"].clone();
    let secretsmanager =
        aws_sdk_secretsmanager::Client::new(&baton_tests::Emulator::from_env().sdk_config().await);
    let put = async |value: String| {
        secretsmanager.put_secret_value().secret_id(&arn).secret_string(value).send().await.expect("put")
    };
    let secret = Secrets::parse(TEST_SECRET).unwrap();
    let url = system.api_url().to_owned();
    let send = async |n: u32, step: &str| {
        let body = json!({"workflow": "order-review", "key": format!("k-scope-{n}"), "step": step,
            "outcome": "succeeded", "data": {"decision": "ok"}});
        send_callback(&url, &secret, &format!("cb-scope-{n}"), &body).await
    };

    // Given the sender's secret scoped to the payment step alone
    put(format!("{TEST_SECRET}@order-review/payment")).await;
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    // Then it may call back that step, and is refused any other, before anything is written
    assert_eq!(send(1, "payment").await.0, 202);
    let (s, answer) = send(2, "manual-review").await;
    assert_eq!((s, answer["error"].as_str()), (403, Some("out_of_scope")), "{answer}");
    let (s, answer) = send(3, "no-such-step").await;
    assert_eq!(
        (s, answer["error"].as_str()),
        (403, Some("out_of_scope")),
        "says nothing of the config: {answer}"
    );
    assert!(system.record("order-review", "k-scope-2").await.is_none());

    // When a rotation puts a secret shorter than 24 bytes
    put("whsec_c2VjcmV0".to_owned()).await;
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    // Then the scoped secret stays in use, and SecretsInvalid is counted for the alarm
    assert_eq!(send(4, "payment").await.0, 202);
    assert!(system.metrics.count(baton_core::ports::metrics::Metric::SecretsInvalid, None) >= 1);
    system.stop().await;
}
