//! template.yaml, provisioned on the emulator: every resource baton relies on exists with the
//! settings the template declares, as seen through the AWS SDK, and provisioning again reuses
//! what is there.

use std::path::Path;

use aws_sdk_dynamodb::types::TimeToLiveStatus;
use aws_sdk_sfn::types::ExecutionStatus;
use aws_sdk_sqs::types::QueueAttributeName;
use baton_local::{ProvisionError, Provisioned, provision};
use baton_tests::stack::{clients, provision_stack, provision_stack_at, workspace_dir};
use baton_tests::system::{WAIT, eventually};
use baton_tests::{Emulator, unique_name};
use serde_json::Value;

const DEFINITION: &str = "infra/statemachines/order-review.asl.json";

fn queue_url<'a>(stack: &'a Provisioned, logical_id: &str) -> &'a str {
    &stack.queues.get(logical_id).unwrap_or_else(|| panic!("no queue {logical_id}")).url
}

#[tokio::test]
async fn the_table_has_the_due_index_and_ttl_on_expires_at() {
    // Given template.yaml provisioned on the emulator
    let emulator = Emulator::from_env();
    let (_, stack) = provision_stack(&emulator).await;
    let dynamodb = clients(&emulator).await.dynamodb;
    let table = &stack.tables["Table"];
    assert_eq!(table, &format!("{}-Table", stack.stack_name));

    // When the table is described
    let described = dynamodb.describe_table().table_name(table).send().await.unwrap();
    let ttl = dynamodb.describe_time_to_live().table_name(table).send().await.unwrap();

    // Then it has the by_due index and TTL on expires_at
    let description = described.table().unwrap();
    let keys: Vec<_> = description.key_schema().iter().map(|k| k.attribute_name()).collect();
    assert_eq!(keys, ["pk", "sk"]);
    let index = description
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some("by_due"))
        .expect("the by_due index");
    let index_keys: Vec<_> = index.key_schema().iter().map(|k| k.attribute_name()).collect();
    assert_eq!(index_keys, ["due_kind", "due_at"]);
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
    assert_eq!(ttl.attribute_name(), Some("expires_at"));
}

#[tokio::test]
async fn the_intake_queue_redrives_to_its_dead_letter_queue_after_five_receives() {
    let emulator = Emulator::from_env();
    let (_, stack) = provision_stack(&emulator).await;
    let sqs = clients(&emulator).await.sqs;

    // When the intake queue's attributes are read back
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url(&stack, "IntakeQueue"))
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();

    // Then the redrive policy names the DLQ's ARN, and the count reads back as a number
    let policy: Value = serde_json::from_str(&attributes[&QueueAttributeName::RedrivePolicy]).unwrap();
    assert_eq!(policy["deadLetterTargetArn"], stack.queues["IntakeDLQ"].arn.as_str());
    assert_eq!(policy["maxReceiveCount"], 5, "moto answers with a number: {policy}");
    assert_eq!(attributes[&QueueAttributeName::VisibilityTimeout], "180");
    let dlq = sqs
        .get_queue_attributes()
        .queue_url(queue_url(&stack, "IntakeDLQ"))
        .attribute_names(QueueAttributeName::MessageRetentionPeriod)
        .send()
        .await
        .unwrap();
    assert_eq!(dlq.attributes().unwrap()[&QueueAttributeName::MessageRetentionPeriod], "1209600");

    // And the config's task queue exists under the name a task is sent to, keeping a task for
    // less than its dead-letter queue does (SQS counts a DLQ's retention from the first enqueue)
    let tasks = &stack.queues["TaskQueueRiskReview"];
    assert_eq!(tasks.name, format!("{}_tasks-risk-review", stack.stack_name));
    let found = sqs.get_queue_url().queue_name(&tasks.name).send().await.unwrap();
    assert_eq!(found.queue_url(), Some(tasks.url.as_str()));
    let retention = |id: &'static str| {
        let sqs = sqs.clone();
        let url = queue_url(&stack, id).to_owned();
        async move {
            let out = sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::MessageRetentionPeriod)
                .send()
                .await
                .unwrap();
            out.attributes().unwrap()[&QueueAttributeName::MessageRetentionPeriod].parse::<u32>().unwrap()
        }
    };
    assert_eq!(retention("TaskQueueRiskReview").await, 4 * 86_400);
    assert_eq!(retention("TaskDLQRiskReview").await, 14 * 86_400);
}

#[tokio::test]
async fn the_state_machine_gets_its_definition_with_the_progress_queue_substituted() {
    let emulator = Emulator::from_env();
    let (_, stack) = provision_stack(&emulator).await;
    let sfn = clients(&emulator).await.sfn;
    let machine = &stack.state_machines["OrderReviewStateMachine"];
    assert_eq!(machine.name, format!("{}-order-review", stack.stack_name));

    // When the state machine is described
    let described = sfn.describe_state_machine().state_machine_arn(&machine.arn).send().await.unwrap();

    // Then its definition is the file's, with ${ProgressQueueUrl} replaced by the queue's URL
    let file = std::fs::read_to_string(workspace_dir().join(DEFINITION)).unwrap();
    let expected = file.replace("${ProgressQueueUrl}", queue_url(&stack, "ProgressQueue"));
    assert_eq!(described.definition(), expected);
    assert!(!described.definition().contains("${"), "{}", described.definition());
}

#[tokio::test]
async fn function_environments_resolve_to_the_stack_resources() {
    let emulator = Emulator::from_env();
    let (template, stack) = provision_stack(&emulator).await;
    let prefix = format!("arn:aws:states:us-east-1:123456789012:stateMachine:{}-", stack.stack_name);

    for (binary, dlq) in [("baton-intake", "IntakeDLQ"), ("baton-progress", "ProgressDLQ")] {
        let function = template.function_by_binary(binary).expect("the function");
        let env = &stack.function_env[&function.logical_id];
        assert_eq!(env["BATON_TABLE"], stack.tables["Table"], "{binary}");
        assert_eq!(env["BATON_DLQ_URL"], queue_url(&stack, dlq), "{binary}");
        assert_eq!(env["BATON_STATE_MACHINE_PREFIX"], prefix, "{binary}");
        assert_eq!(env["RUST_LOG"], "info", "{binary}: the LogLevel Default");
    }
    let progress = template.function_by_binary("baton-progress").expect("progress");
    // A task goes to the prefix followed by its queue name: that names the task queue.
    for function in [progress, template.function_by_binary("baton-sweeper").expect("sweeper")] {
        let url =
            format!("{}risk-review", stack.function_env[&function.logical_id]["BATON_TASK_QUEUE_URL_PREFIX"]);
        let name = url.rsplit('/').next().unwrap_or_default();
        assert_eq!(name, stack.queues["TaskQueueRiskReview"].name, "{}", function.logical_id);
        assert!(url.starts_with("https://sqs.us-east-1.amazonaws.com/123456789012/"), "{url}");
    }
    // The machine's ARN is the prefix plus its workflow name, as the functions derive it.
    assert_eq!(stack.state_machines["OrderReviewStateMachine"].arn, format!("{prefix}order-review"));
}

#[tokio::test]
async fn provisioning_the_same_stack_twice_reuses_its_resources() {
    // Given a provisioned stack
    let emulator = Emulator::from_env();
    let name = unique_name("st");
    let (_, first) = provision_stack_at(&emulator, &name, &workspace_dir()).await;

    // When it is provisioned again under the same name
    let (_, second) = provision_stack_at(&emulator, &name, &workspace_dir()).await;

    // Then it gets the same names, URLs and ARNs
    assert_eq!(second.tables, first.tables);
    assert_eq!(second.queues, first.queues);
    assert_eq!(second.state_machines, first.state_machines);
    assert_eq!(second.function_env, first.function_env);
}

#[tokio::test]
async fn a_changed_queue_attribute_is_applied_and_a_changed_table_index_is_refused() {
    // Given a provisioned stack
    let emulator = Emulator::from_env();
    let clients = clients(&emulator).await;
    let name = unique_name("st");
    let (mut template, first) = provision_stack_at(&emulator, &name, &workspace_dir()).await;
    let params = baton_tests::stack::parameters();

    // When the template's intake queue gets another visibility timeout and is provisioned again
    let intake = template.queues.iter_mut().find(|q| q.logical_id == "IntakeQueue").expect("intake queue");
    intake.visibility_timeout = Some(90);
    let again = provision(&template, &workspace_dir(), &name, &params, &clients).await.unwrap();

    // Then the same queue has the new timeout
    assert_eq!(again.queues["IntakeQueue"], first.queues["IntakeQueue"]);
    let attributes = clients
        .sqs
        .get_queue_attributes()
        .queue_url(queue_url(&again, "IntakeQueue"))
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap();
    assert_eq!(attributes.attributes().unwrap()[&QueueAttributeName::VisibilityTimeout], "90");

    // When the table's index changes
    let table = template.tables.iter_mut().find(|t| t.logical_id == "Table").expect("table");
    table.gsis[0].name = "by_due_v2".into();
    let err = provision(&template, &workspace_dir(), &name, &params, &clients).await.unwrap_err();

    // Then provisioning refuses to reuse the table, rather than run against the wrong index
    assert!(
        matches!(&err, ProvisionError::Drift { resource, .. } if resource.contains(&first.tables["Table"])),
        "{err:?}"
    );
}

/// A definition that reports to the progress queue, as the generated ones do.
fn reporting_definition(marker: &str) -> String {
    serde_json::json!({
        "StartAt": "Report",
        "States": {
            "Report": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl": "${ProgressQueueUrl}", "MessageBody": {"marker": marker}},
                "End": true
            }
        }
    })
    .to_string()
}

fn write_definition(root: &Path, text: &str) {
    let path = root.join(DEFINITION);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn executions_see_the_substituted_state_machine_and_a_changed_definition_is_updated() {
    // Given a definition that sends to ${ProgressQueueUrl}, provisioned from its own root
    let emulator = Emulator::from_env();
    let clients = clients(&emulator).await;
    let root = std::env::temp_dir().join(unique_name("baton-asl"));
    write_definition(&root, &reporting_definition("first"));
    let name = unique_name("st");
    let (_, stack) = provision_stack_at(&emulator, &name, &root).await;
    let machine = &stack.state_machines["OrderReviewStateMachine"];
    let progress = queue_url(&stack, "ProgressQueue");

    // When an execution starts
    let execution =
        clients.sfn.start_execution().state_machine_arn(&machine.arn).input("{}").send().await.unwrap();

    // Then it runs the substituted definition: its message arrives on the stack's progress queue
    let body = eventually("a message on the progress queue", WAIT, || async {
        let received = clients.sqs.receive_message().queue_url(progress).send().await.unwrap();
        received.messages().first().and_then(|m| m.body().map(str::to_owned))
    })
    .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["marker"], "first");
    let status = eventually("the execution to close", WAIT, || async {
        let described =
            clients.sfn.describe_execution().execution_arn(execution.execution_arn()).send().await.unwrap();
        Some(described.status().clone()).filter(|s| *s != ExecutionStatus::Running)
    })
    .await;
    assert_eq!(status, ExecutionStatus::Succeeded);

    // And when the definition file changes and the stack is provisioned again
    write_definition(&root, &reporting_definition("second"));
    let (_, again) = provision_stack_at(&emulator, &name, &root).await;

    // Then the same state machine has the new definition
    assert_eq!(again.state_machines["OrderReviewStateMachine"], *machine);
    let described =
        clients.sfn.describe_state_machine().state_machine_arn(&machine.arn).send().await.unwrap();
    assert!(described.definition().contains("second"), "{}", described.definition());
    assert!(described.definition().contains(progress), "{}", described.definition());
    let _ = std::fs::remove_dir_all(&root);
}
