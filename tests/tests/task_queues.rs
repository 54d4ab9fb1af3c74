//! End to end, on the emulator: each team's tasks go to its own queue, the one its `queue` names
//! in the config, and to no other. A team's worker reading its queue therefore sees its own tasks
//! alone (the example workers' side of it is `cli/tests/workers.rs`).

use baton_tests::system::start_system;
use baton_tests::{SAGA, compensated, unique_name};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_task_goes_to_the_queue_of_its_team_and_to_no_other() {
    // Given the saga: reserve-stock's task and its undo are the stock team's, the refund of the
    // payment is the payments team's
    let system = start_system(SAGA).await;
    let key = unique_name("teams");

    // When it runs to compensated, every task published on the way
    compensated(&system, &key).await;

    // Then each queue holds its team's tasks, and only those
    let ids = |messages: Vec<aws_sdk_sqs::types::Message>| {
        let mut ids: Vec<(String, String)> = messages
            .iter()
            .filter_map(|m| serde_json::from_str::<Value>(m.body()?).ok())
            .map(|t| {
                (
                    t["id"].as_str().unwrap_or("-").to_owned(),
                    t["data"]["queue"].as_str().unwrap_or("-").to_owned(),
                )
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let task = |step: &str, queue: &str| (format!("order-review/{key}/g1/{step}"), queue.to_owned());
    let stock = ids(system.drain_queue(&system.task_queue("stock")).await);
    assert_eq!(stock, [task("reserve-stock", "stock"), task("reserve-stock/undo", "stock")]);
    let payments = ids(system.drain_queue(&system.task_queue("payments")).await);
    assert_eq!(payments, [task("payment/undo", "payments")]);
    system.stop().await;
}
