"""Tests of template.yaml's guards on what faces the outside, read from the template.

moto enforces none of them (the local runtime skips queue policies, log groups, alarms and the
HttpApi), so these read what the template says, and what the SAM transform makes of it:
- the public callback API is throttled (stage rate and burst, parameters) and the callback
  function has reserved concurrency sized against that rate, so a flood of forged callbacks
  cannot take the account's Lambda concurrency from intake, progress and the sweeper;
- the API writes a JSON access log to a log group with a retention;
- the intake and progress queues say who may send, and refuse requests without TLS;
- every task queue (one per team, written by `baton synth`) and its dead-letter queue take sends
  from baton's progress and sweeper functions (and the listed operator roles) only, refuse
  requests without TLS, keep a task for less than the dead-letter queue does, and alarm on the
  age of the oldest task long before it would expire; the functions' grant names no other queue;
- every alarm, SecretsInvalid among them, has its entry in docs/RUNBOOK.md.
Run: python -m unittest tools/template_test.py (make lint-infra runs it).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The callback's p99 duration the defaults are sized for (docs/RUNBOOK.md, "Sizing the callback
# API's limits"): a cold start plus a conditional write and a SendTaskSuccess.
CALLBACK_P99_SECONDS = 0.3


def load():
    return yaml.safe_load((ROOT / "template.yaml").read_text())


def default(template, ref):
    """The Default of the parameter `ref` ({"Ref": name}) names, as a number."""
    assert isinstance(ref, dict) and "Ref" in ref, f"expected a parameter reference, got {ref!r}"
    parameter = template["Parameters"][ref["Ref"]]
    return float(parameter["Default"])


def statements(resource):
    """The statements of a queue policy, each Fn::If unwrapped to its 'true' branch."""
    out = []
    for s in resource["Properties"]["PolicyDocument"]["Statement"]:
        out.append(s["Fn::If"][1] if "Fn::If" in s else s)
    return out


def queue_policy(template, queue):
    found = [r for r in template["Resources"].values()
             if r["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": queue} in r["Properties"]["Queues"]]
    assert len(found) == 1, f"{queue}: expected one queue policy, found {len(found)}"
    return found[0]


class CallbackApiLimits(unittest.TestCase):
    def setUp(self):
        self.t = load()
        self.api = self.t["Resources"]["CallbackApi"]["Properties"]

    def test_the_stage_is_throttled_by_parameters_with_defaults(self):
        settings = self.api.get("DefaultRouteSettings", {})
        rate = default(self.t, settings.get("ThrottlingRateLimit"))
        burst = default(self.t, settings.get("ThrottlingBurstLimit"))
        self.assertGreaterEqual(rate, 1)
        self.assertGreaterEqual(burst, rate, "a burst below the rate would cap the rate itself")

    def test_the_callback_function_has_reserved_concurrency_for_the_rate_it_is_throttled_to(self):
        reserved = self.t["Resources"]["CallbackFunction"]["Properties"].get("ReservedConcurrentExecutions")
        self.assertIsNotNone(reserved)
        if "Fn::If" in reserved:
            reserved = reserved["Fn::If"][1]
        value = default(self.t, reserved)
        self.assertGreater(value, 0, "reserved by default, not opt-in")
        rate = default(self.t, self.api["DefaultRouteSettings"]["ThrottlingRateLimit"])
        self.assertGreaterEqual(value, rate * CALLBACK_P99_SECONDS,
                                "the throttled rate must fit in the reserved concurrency")

    def test_the_api_logs_each_request_as_json_to_a_group_with_retention(self):
        logs = self.api.get("AccessLogSettings")
        self.assertIsNotNone(logs)
        group_id = logs["DestinationArn"]["Fn::GetAtt"][0]
        group = self.t["Resources"][group_id]
        self.assertEqual(group["Type"], "AWS::Logs::LogGroup")
        self.assertGreater(default(self.t, group["Properties"]["RetentionInDays"]), 0)
        line = json.loads(logs["Format"])
        for field, variable in [("requestId", "$context.requestId"), ("sourceIp", "$context.identity.sourceIp"),
                                ("routeKey", "$context.routeKey"), ("status", "$context.status"),
                                ("responseLatency", "$context.responseLatency"),
                                ("integrationError", "$context.integrationErrorMessage")]:
            self.assertEqual(line.get(field), variable, field)


class QueuePolicies(unittest.TestCase):
    def setUp(self):
        self.t = load()

    def assertRefusesWithoutTls(self, policy, queue):
        tls = [s for s in statements(policy) if s["Effect"] == "Deny"
               and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"]
        self.assertEqual(len(tls), 1, queue)
        self.assertEqual((tls[0]["Principal"], tls[0]["Action"]), ("*", "sqs:*"))
        self.assertEqual(tls[0]["Resource"], {"Fn::GetAtt": [queue, "Arn"]})

    def test_the_intake_queue_takes_the_account_and_the_listed_senders_only(self):
        policy = queue_policy(self.t, "IntakeQueue")
        self.assertRefusesWithoutTls(policy, "IntakeQueue")
        deny = [s for s in statements(policy) if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"]
        self.assertEqual(len(deny), 1)
        branches = deny[0]["Condition"]["Fn::If"][1:]
        for condition in branches:
            self.assertEqual(condition["StringNotEquals"]["aws:PrincipalAccount"], {"Ref": "AWS::AccountId"})
        listed = branches[0]["ArnNotLike"]
        self.assertEqual(listed, {"aws:PrincipalArn": {"Ref": "IntakeAllowedSenders"},
                                  "aws:SourceArn": {"Ref": "IntakeAllowedSenders"}})
        self.assertEqual(self.t["Parameters"]["IntakeAllowedSenders"]["Default"], "", "optional")
        rules = [s for s in statements(policy) if s["Effect"] == "Allow"
                 and s["Principal"] == {"Service": "events.amazonaws.com"}]
        self.assertEqual(rules[0]["Condition"], {"ArnLike": {"aws:SourceArn": {"Ref": "IntakeAllowedSenders"}}})

    def test_the_progress_queue_takes_the_stacks_state_machines_and_progress_function_only(self):
        policy = queue_policy(self.t, "ProgressQueue")
        self.assertRefusesWithoutTls(policy, "ProgressQueue")
        deny = [s for s in statements(policy) if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"]
        self.assertEqual(len(deny), 1)
        self.assertEqual(deny[0]["Principal"], "*")
        allowed = deny[0]["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::If"]
        without_redrive = {r["Fn::GetAtt"][0] for r in allowed[2]}
        with_redrive = allowed[1]["Fn::Split"][1]["Fn::Join"][1]
        self.assertIn({"Fn::Join": [",", {"Ref": "ProgressRedriveRoleArns"}]}, with_redrive)
        machines = {k for k, r in self.t["Resources"].items() if r["Type"] == "AWS::Serverless::StateMachine"}
        expected = {f"{m}Role" for m in machines} | {"ProgressFunctionRole"}
        self.assertEqual(without_redrive, expected, "every state machine's role, and no one else")
        self.assertEqual({r["Fn::GetAtt"][0] for r in with_redrive if "Fn::GetAtt" in r}, expected)

    def test_the_roles_the_progress_policy_names_are_the_ones_sam_creates(self):
        with tempfile.TemporaryDirectory() as out:
            target = os.path.join(out, "template.json")
            subprocess.run([sys.executable, str(ROOT / "tools" / "sam-transform.py"), str(ROOT / "template.yaml"),
                            target], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                           env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"})
            transformed = json.loads(pathlib.Path(target).read_text())
        resources = transformed["Resources"]
        policy = queue_policy(transformed, "ProgressQueue")
        allowed = [s for s in statements(policy) if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"][0]
        for ref in allowed["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::If"][2]:
            role = ref["Fn::GetAtt"][0]
            self.assertEqual(resources.get(role, {}).get("Type"), "AWS::IAM::Role", role)
        machines = [r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
        for machine in machines:
            self.assertIn(machine["Properties"]["RoleArn"], allowed["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::If"][2])


def task_queues(template):
    """The task queues: the queues whose name is the stack's `_tasks-` name, by logical id."""
    return {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::SQS::Queue"
            and "_tasks-" in str(r["Properties"].get("QueueName", {}).get("Fn::Sub", ""))}


def transformed():
    with tempfile.TemporaryDirectory() as out:
        target = os.path.join(out, "template.json")
        subprocess.run([sys.executable, str(ROOT / "tools" / "sam-transform.py"), str(ROOT / "template.yaml"),
                        target], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"})
        return json.loads(pathlib.Path(target).read_text())


class TaskQueues(unittest.TestCase):
    def setUp(self):
        self.t = load()
        self.queues = task_queues(self.t)

    def test_the_template_has_a_task_queue_and_no_shared_outbound_queue(self):
        self.assertIn("TaskQueueRiskReview", self.queues, "the config's risk-review queue")
        self.assertNotIn("OutboundQueue", self.t["Resources"], "one queue for every team")

    def test_only_batons_functions_and_the_listed_roles_may_send_to_a_task_queue_or_its_dlq(self):
        for queue_id, queue in self.queues.items():
            dlq_id = queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
            found = [r for r in self.t["Resources"].values() if r["Type"] == "AWS::SQS::QueuePolicy"
                     and {"Ref": queue_id} in r["Properties"]["Queues"]]
            self.assertEqual(len(found), 1, f"{queue_id}: expected one queue policy")
            policy = found[0]
            self.assertIn({"Ref": dlq_id}, policy["Properties"]["Queues"], f"{queue_id}: its DLQ too")
            both = [{"Fn::GetAtt": [queue_id, "Arn"]}, {"Fn::GetAtt": [dlq_id, "Arn"]}]
            tls = [s for s in statements(policy) if s["Effect"] == "Deny"
                   and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"]
            self.assertEqual(len(tls), 1, queue_id)
            self.assertEqual((tls[0]["Principal"], tls[0]["Action"], tls[0]["Resource"]), ("*", "sqs:*", both))
            deny = [s for s in statements(policy) if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"]
            self.assertEqual(len(deny), 1, queue_id)
            self.assertEqual((deny[0]["Principal"], deny[0]["Resource"]), ("*", both), queue_id)
            allowed = deny[0]["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::If"]
            self.assertEqual(allowed[0], "HasTaskSenderRoles")
            expected = {"ProgressFunctionRole", "SweeperFunctionRole"}
            self.assertEqual({r["Fn::GetAtt"][0] for r in allowed[2]}, expected, "baton's publishers, no one else")
            listed = allowed[1]["Fn::Split"][1]["Fn::Join"][1]
            self.assertEqual({r["Fn::GetAtt"][0] for r in listed if "Fn::GetAtt" in r}, expected)
            self.assertIn({"Fn::Join": [",", {"Ref": "TaskSenderRoleArns"}]}, listed)
            self.assertEqual(self.t["Parameters"]["TaskSenderRoleArns"]["Default"], "", "none unless listed")
            self.assertFalse([s for s in statements(policy) if s["Effect"] == "Allow"], "denies only")

    def test_the_roles_the_policy_names_are_the_ones_sam_creates_and_the_only_ones_granted_sends(self):
        t = transformed()
        resources = t["Resources"]
        granted = set()
        for logical_id, role in resources.items():
            if role["Type"] != "AWS::IAM::Role":
                continue
            for policy in role["Properties"].get("Policies", []):
                for statement in policy["PolicyDocument"]["Statement"]:
                    if "sqs:SendMessage" in statement.get("Action", []) and "_tasks-" in json.dumps(statement["Resource"]):
                        granted.add(logical_id)
                        self.assertEqual(statement["Resource"], [{"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:"
                                                                  "${AWS::AccountId}:${AWS::StackName}_tasks-*"}])
        self.assertEqual(granted, {"ProgressFunctionRole", "SweeperFunctionRole"})
        for queue_id in task_queues(t):
            policy = queue_policy(t, queue_id)
            deny = [s for s in statements(policy) if s["Effect"] == "Deny" and s["Action"] == "sqs:SendMessage"][0]
            for ref in deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::If"][2]:
                self.assertEqual(resources.get(ref["Fn::GetAtt"][0], {}).get("Type"), "AWS::IAM::Role", ref)

    def test_a_task_outlives_its_queue_in_the_dlq_and_its_age_alarms_long_before_it_expires(self):
        alarms = [r["Properties"] for r in self.t["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
        for queue_id, queue in self.queues.items():
            props = queue["Properties"]
            dlq_id = props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
            dlq = self.t["Resources"][dlq_id]
            retention, dlq_retention = props["MessageRetentionPeriod"], dlq["Properties"]["MessageRetentionPeriod"]
            # A DLQ counts retention from the first enqueue: it must keep a task days longer.
            self.assertGreaterEqual(dlq_retention - retention, 7 * 86400, queue_id)
            self.assertEqual((dlq["DeletionPolicy"], dlq["UpdateReplacePolicy"]), ("Retain", "Retain"))
            self.assertEqual(props["RedrivePolicy"]["maxReceiveCount"], 10)

            def on(queue, metric):
                return [a for a in alarms if a["MetricName"] == metric and a["Namespace"] == "AWS/SQS"
                        and a["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]]
            age = on(queue_id, "ApproximateAgeOfOldestMessage")
            self.assertEqual(len(age), 1, f"{queue_id}: an alarm on the age of its oldest task")
            self.assertEqual(age[0]["ComparisonOperator"], "GreaterThanThreshold")
            self.assertLessEqual(age[0]["Threshold"] + age[0]["Period"] * age[0]["EvaluationPeriods"],
                                 retention / 2, "it fires while there is time to act")
            self.assertEqual(len(on(dlq_id, "ApproximateNumberOfMessagesVisible")), 1, f"{dlq_id}: a depth alarm")


class Alarms(unittest.TestCase):
    def test_secrets_that_cannot_be_parsed_raise_an_alarm_like_the_others(self):
        t = load()
        alarm = t["Resources"].get("SecretsInvalidAlarm", {}).get("Properties")
        self.assertIsNotNone(alarm)
        self.assertEqual((alarm["Namespace"], alarm["MetricName"]), ("baton", "SecretsInvalid"))
        self.assertEqual(alarm["Dimensions"], [{"Name": "service", "Value": "baton"}])
        self.assertEqual(alarm["ComparisonOperator"], "GreaterThanThreshold")
        self.assertEqual(alarm["Threshold"], 0)
        other = t["Resources"]["WorkflowsFailedAlarm"]["Properties"]
        self.assertEqual((alarm["AlarmActions"], alarm["OKActions"]), (other["AlarmActions"], other["OKActions"]))
        self.assertIn("RUNBOOK.md", alarm["AlarmDescription"])

    def test_a_stranded_record_raises_an_alarm_like_the_others(self):
        t = load()
        alarm = t["Resources"].get("StrandedRecordsAlarm", {}).get("Properties")
        self.assertIsNotNone(alarm)
        self.assertEqual((alarm["Namespace"], alarm["MetricName"]), ("baton", "RecordsStranded"))
        self.assertEqual(alarm["Dimensions"], [{"Name": "service", "Value": "baton"}])
        self.assertEqual((alarm["ComparisonOperator"], alarm["Threshold"]), ("GreaterThanThreshold", 0))
        other = t["Resources"]["WorkflowsFailedAlarm"]["Properties"]
        self.assertEqual((alarm["AlarmActions"], alarm["OKActions"]), (other["AlarmActions"], other["OKActions"]))

    def test_every_alarm_has_a_runbook_entry(self):
        runbook = (ROOT / "docs" / "RUNBOOK.md").read_text()
        headings = [line for line in runbook.splitlines() if line.startswith("### ")]
        for logical_id, resource in load()["Resources"].items():
            if resource["Type"] == "AWS::CloudWatch::Alarm":
                # A task queue's alarms are one entry for every team: `TaskQueueAgeAlarm<Queue>`.
                for generated in ("TaskQueueAgeAlarm", "TaskDLQDepthAlarm"):
                    if logical_id.startswith(generated):
                        logical_id = f"{generated}<Queue>"
                self.assertTrue(any(f"`{logical_id}`" in h for h in headings), f"docs/RUNBOOK.md: no ### `{logical_id}`")


if __name__ == "__main__":
    unittest.main()
