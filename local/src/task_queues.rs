//! The task queues: one SQS queue per `queue` the config's tasks name, each with its own
//! dead-letter queue, queue policy and alarms, declared in template.yaml between two marker lines.
//!
//! Why one per team: a single queue for every team gave each team's worker every team's tasks
//! (and a grant on all of them). With a queue per `queue` name, a team's worker reads its own
//! queue and is granted that queue alone, and a task another team's worker cannot handle never
//! reaches it.
//!
//! Why generated: the set follows the config, as the state machine definitions do. `baton synth`
//! writes the section from the config and `baton synth --check` fails when it is stale, naming
//! each queue that is missing or left over; `baton local` provisions template.yaml with the
//! section written for the config it runs, so a test's config (or a team's trial) gets the
//! queues its tasks name, exactly as a deploy of that config would.
//!
//! How a task finds its queue: by name. The queue of `queue: risk-review` is called
//! `<stack>_tasks-risk-review`, and the functions that publish get the URL up to the name in
//! `BATON_TASK_QUEUE_URL_PREFIX`, so a new team needs a config change and `baton synth`, no code.
//! A stack name cannot hold `_`, so `<stack>_tasks-*` (the functions' grant) matches this stack's
//! task queues and no other stack's.
//!
//! Retention: a task queue keeps a message 4 days, its dead-letter queue 14. SQS counts a
//! dead-lettered message's retention from its first enqueue, so a DLQ that kept no longer than
//! its source would let a task that took days to fail expire there unseen; with 4 and 14 a task
//! has at least 10 days in the DLQ. A task no worker takes would expire after 4 days: the age
//! alarm fires when the oldest has waited an hour, days before.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use baton_core::domain::config::Config;

/// The line that opens the generated section (after its indentation).
pub const BEGIN: &str =
    "# ---- task queues: written by `baton synth` from the config, one set per task `queue`";
/// The line that closes it.
pub const END: &str = "# ---- end of the task queues";

/// How long a task queue keeps a message: 4 days.
pub const RETENTION_SECONDS: u32 = 4 * 86_400;
/// How long a task queue's dead-letter queue keeps one: 14 days, SQS's most.
pub const DLQ_RETENTION_SECONDS: u32 = 14 * 86_400;
/// Receives before SQS moves a task to the dead-letter queue.
pub const MAX_RECEIVE_COUNT: u32 = 10;
/// The age of the oldest task at which its queue's age alarm fires: an hour, days before
/// [`RETENTION_SECONDS`] would expire it.
pub const AGE_ALARM_SECONDS: u32 = 3600;
/// What goes between the stack name and the queue name in a task queue's name.
pub const NAME_INFIX: &str = "_tasks-";

/// One task queue: its `queue` name and where the config first names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQueue {
    pub name: String,
    /// `workflow <w>, step <s>`: for messages.
    pub named_by: String,
}

impl TaskQueue {
    /// The logical id of the queue: `TaskQueue` and the name in CamelCase.
    pub fn queue_id(&self) -> String {
        format!("TaskQueue{}", camel(&self.name))
    }

    /// The logical id of its dead-letter queue.
    pub fn dlq_id(&self) -> String {
        format!("TaskDLQ{}", camel(&self.name))
    }
}

/// Why the task queues cannot be written or found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskQueueError {
    #[error(
        "task queues {first:?} and {second:?} would share the template's logical id {id}; rename one \
         of them in the config"
    )]
    Collision { first: String, second: String, id: String },
    #[error(
        "the template has no task queue section: add the two lines `  {BEGIN} ...` and `  {END} ...` \
         under Resources, then run `baton synth`"
    )]
    NoSection,
}

/// "risk-review" → "RiskReview": each part between `-` and `_`, its first letter upper case.
fn camel(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut chars = p.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// Every `queue` the config's tasks name (steps, branches and compensations), by name, each once.
pub fn task_queues(config: &Config) -> Result<Vec<TaskQueue>, TaskQueueError> {
    let mut queues: BTreeMap<String, TaskQueue> = BTreeMap::new();
    for workflow in &config.workflows {
        for step in &workflow.steps {
            let escalations = step.escalate.iter().map(|e| &e.task);
            let tasks = step.task.iter().chain(step.compensate.as_ref().map(|c| &c.task)).chain(escalations);
            for task in tasks {
                queues.entry(task.queue.clone()).or_insert_with(|| TaskQueue {
                    name: task.queue.clone(),
                    named_by: format!("workflow {}, step {}", workflow.name, step.name),
                });
            }
        }
    }
    let mut ids: BTreeMap<String, &str> = BTreeMap::new();
    for queue in queues.values() {
        if let Some(first) = ids.insert(queue.queue_id(), &queue.name) {
            return Err(TaskQueueError::Collision {
                first: first.to_owned(),
                second: queue.name.clone(),
                id: queue.queue_id(),
            });
        }
    }
    Ok(queues.into_values().collect())
}

/// The section for `queues`, from its opening marker line to its closing one, each line
/// indented as a resource under `Resources:`.
pub fn render(queues: &[TaskQueue]) -> String {
    let mut out = format!(
        "  {BEGIN} ----\n  # Edit the config and run `baton synth`, not these lines: `baton synth --check` fails\n  \
         # when they are stale. Each team's worker reads its own queue; only baton's functions (and\n  \
         # the roles TaskSenderRoleArns lists) may send to it or to its dead-letter queue.\n"
    );
    if queues.is_empty() {
        out.push_str("  # (No task in the config names a queue.)\n");
    }
    for queue in queues {
        render_one(&mut out, queue);
    }
    let _ = writeln!(out, "  {END} ----");
    out
}

#[expect(
    clippy::too_many_lines,
    reason = "one YAML text: the five resources of one task queue, as they deploy"
)]
fn render_one(out: &mut String, queue: &TaskQueue) {
    let (name, q, dlq, id) = (&queue.name, queue.queue_id(), queue.dlq_id(), camel(&queue.name));
    let arns = format!("              - Fn::GetAtt: [{q}, Arn]\n              - Fn::GetAtt: [{dlq}, Arn]\n");
    let _ = write!(
        out,
        r#"  # `queue: {name}` ({named_by}).
  {q}:
    Type: AWS::SQS::Queue
    Properties:
      QueueName:
        Fn::Sub: "${{AWS::StackName}}{NAME_INFIX}{name}"
      MessageRetentionPeriod: {RETENTION_SECONDS}
      RedrivePolicy:
        deadLetterTargetArn:
          Fn::GetAtt: [{dlq}, Arn]
        maxReceiveCount: {MAX_RECEIVE_COUNT}
  {dlq}:
    Type: AWS::SQS::Queue
    # What waits here waits for a person: deleting or replacing the stack keeps it.
    DeletionPolicy: Retain
    UpdateReplacePolicy: Retain
    Properties:
      MessageRetentionPeriod: {DLQ_RETENTION_SECONDS}
      # Only its own task queue may dead-letter into it.
      RedriveAllowPolicy:
        redrivePermission: byQueue
        sourceQueueArns:
          - Fn::Sub: "arn:${{AWS::Partition}}:sqs:${{AWS::Region}}:${{AWS::AccountId}}:${{AWS::StackName}}{NAME_INFIX}{name}"
  TaskQueuePolicy{id}:
    Type: AWS::SQS::QueuePolicy
    Properties:
      Queues:
        - Ref: {q}
        - Ref: {dlq}
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Sid: DenyWithoutTls
            Effect: Deny
            Principal: "*"
            Action: "sqs:*"
            Resource:
{arns}            Condition:
              Bool:
                aws:SecureTransport: "false"
          # SQS's own move of a message to the dead-letter queue is no principal's send.
          - Sid: OnlyBatonSends
            Effect: Deny
            Principal: "*"
            Action: sqs:SendMessage
            Resource:
{arns}            Condition:
              ArnNotEquals:
                aws:PrincipalArn:
                  Fn::If:
                    - HasTaskSenderRoles
                    - Fn::Split:
                        - ","
                        - Fn::Join:
                            - ","
                            - - Fn::GetAtt: [ProgressFunctionRole, Arn]
                              - Fn::GetAtt: [SweeperFunctionRole, Arn]
                              - Fn::Join: [",", Ref: TaskSenderRoleArns]
                    - - Fn::GetAtt: [ProgressFunctionRole, Arn]
                      - Fn::GetAtt: [SweeperFunctionRole, Arn]
  TaskQueueAgeAlarm{id}:
    Type: AWS::CloudWatch::Alarm
    Properties:
      AlarmDescription: A {name} task has waited over an hour on its queue; it expires after 4 days (see RUNBOOK.md, TaskQueueAgeAlarm)
      Namespace: AWS/SQS
      MetricName: ApproximateAgeOfOldestMessage
      Dimensions:
        - Name: QueueName
          Value:
            Fn::GetAtt: [{q}, QueueName]
      Statistic: Maximum
      Period: 300
      EvaluationPeriods: 1
      Threshold: {AGE_ALARM_SECONDS}
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching
      AlarmActions:
        Fn::If: [HasAlarmTopic, [Ref: AlarmTopicArn], Ref: AWS::NoValue]
      OKActions:
        Fn::If: [HasAlarmTopic, [Ref: AlarmTopicArn], Ref: AWS::NoValue]
  TaskDLQDepthAlarm{id}:
    Type: AWS::CloudWatch::Alarm
    Properties:
      AlarmDescription: {name} tasks their worker could not settle are in its dead-letter queue (see RUNBOOK.md, TaskDLQDepthAlarm)
      Namespace: AWS/SQS
      MetricName: ApproximateNumberOfMessagesVisible
      Dimensions:
        - Name: QueueName
          Value:
            Fn::GetAtt: [{dlq}, QueueName]
      Statistic: Maximum
      Period: 60
      EvaluationPeriods: 1
      Threshold: 0
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching
      AlarmActions:
        Fn::If: [HasAlarmTopic, [Ref: AlarmTopicArn], Ref: AWS::NoValue]
      OKActions:
        Fn::If: [HasAlarmTopic, [Ref: AlarmTopicArn], Ref: AWS::NoValue]
"#,
        named_by = queue.named_by,
    );
}

/// The byte range of the section in `template`: from the start of its opening line to the end
/// of its closing one.
fn section_range(template: &str) -> Result<std::ops::Range<usize>, TaskQueueError> {
    let mut start = None;
    let mut offset = 0;
    for line in template.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if start.is_none() && trimmed.starts_with(BEGIN) {
            start = Some(offset);
        } else if let Some(start) = start
            && trimmed.starts_with(END)
        {
            return Ok(start..offset + line.len());
        }
        offset += line.len();
    }
    Err(TaskQueueError::NoSection)
}

/// The section `template` holds now.
pub fn current(template: &str) -> Result<&str, TaskQueueError> {
    Ok(&template[section_range(template)?])
}

/// `template` with its section written for `config`'s task queues.
pub fn splice(template: &str, config: &Config) -> Result<String, TaskQueueError> {
    let range = section_range(template)?;
    let rendered = render(&task_queues(config)?);
    Ok(format!("{}{rendered}{}", &template[..range.start], &template[range.end..]))
}

/// The `queue` names the template's section declares a queue for.
pub fn declared(template: &str) -> Result<Vec<String>, TaskQueueError> {
    let needle = format!("{{AWS::StackName}}{NAME_INFIX}");
    let mut names: Vec<String> = current(template)?
        .lines()
        .filter(|l| l.trim_start().starts_with("Fn::Sub: \"${AWS::StackName}"))
        .filter_map(|l| l.split_once(&needle).map(|(_, rest)| rest.trim_end_matches('"').to_owned()))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
workflows:
  order-review:
    start: { when: { type: [o] }, key: /subject }
    steps:
      - name: reserve-stock
        task: { title: t, queue: stock }
        timeout: 1h
        compensate: { task: { title: u, queue: stock }, timeout: 1h }
      - name: payment
        timeout: 1h
        compensate: { task: { title: r, queue: payments_2 }, timeout: 1h }
"#;

    #[test]
    fn every_queue_a_task_names_is_listed_once_with_ids_in_camel_case() {
        let queues = task_queues(&Config::parse(CONFIG).unwrap()).unwrap();
        let names: Vec<_> = queues.iter().map(|q| (q.name.as_str(), q.queue_id(), q.dlq_id())).collect();
        assert_eq!(
            names,
            [
                ("payments_2", "TaskQueuePayments2".to_owned(), "TaskDLQPayments2".to_owned()),
                ("stock", "TaskQueueStock".to_owned(), "TaskDLQStock".to_owned()),
            ]
        );
        assert_eq!(queues[0].named_by, "workflow order-review, step payment");
    }

    #[test]
    fn two_queues_that_would_share_a_logical_id_are_refused_naming_both() {
        let config = CONFIG.replace("payments_2", "Stock");
        let err = task_queues(&Config::parse(&config).unwrap()).unwrap_err();
        assert_eq!(
            err,
            TaskQueueError::Collision {
                first: "Stock".into(),
                second: "stock".into(),
                id: "TaskQueueStock".into()
            }
        );
    }

    #[test]
    fn the_section_is_replaced_in_place_and_what_it_declares_can_be_read_back() {
        let config = Config::parse(CONFIG).unwrap();
        let template = format!("Resources:\n  A: 1\n  {BEGIN} ----\n  Old: 2\n  {END} ----\n  B: 3\n");
        let spliced = splice(&template, &config).unwrap();
        assert!(spliced.starts_with("Resources:\n  A: 1\n  # ---- task queues"), "{spliced}");
        assert!(spliced.ends_with(&format!("  {END} ----\n  B: 3\n")), "{spliced}");
        assert!(!spliced.contains("Old: 2"));
        assert_eq!(declared(&spliced).unwrap(), ["payments_2", "stock"]);
        assert_eq!(splice(&spliced, &config).unwrap(), spliced, "writing it again changes nothing");
        assert_eq!(splice("Resources: {}\n", &config), Err(TaskQueueError::NoSection));
    }
}
