"""Tests of the policy contract's verdicts (tools/policy-check.py) on small templates.

`make test` runs the contract on every call the functions made; these pin the rules it applies
where a wrong verdict would pass a grant AWS refuses. Run: python -m unittest tools/policy_check_test.py
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECK = pathlib.Path(__file__).with_name("policy-check.py")
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:s1-order-review"


def template(start_resource):
    """A transformed template's shape: one function, its role, one managed policy."""
    return {
        "Resources": {
            "IntakeFunction": {"Type": "AWS::Lambda::Function",
                               "Properties": {"Role": {"Fn::GetAtt": ["IntakeFunctionRole", "Arn"]}}},
            "IntakeFunctionRole": {"Type": "AWS::IAM::Role",
                                   "Properties": {"ManagedPolicyArns": [{"Ref": "StartWorkflowsPolicy"}]}},
            "StartWorkflowsPolicy": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": ["states:StartExecution"], "Resource": [start_resource]}],
            }}},
        }
    }


def check(start_resource, recorded_resource, justified=""):
    """Runs the contract on one recorded StartExecution (None: no call), with `justified` as the
    list of unused grants; returns (exit code, output)."""
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        (d / "t.json").write_text(json.dumps(template(start_resource)))
        stack = {"kind": "stack", "stack": "s1", "refs": {"OrderReviewStateMachine": MACHINE},
                 "attrs": {"OrderReviewStateMachine.Name": "s1-order-review"}}
        call = {"kind": "call", "function": "IntakeFunction", "stack": "s1",
                "action": "states:StartExecution", "resource": recorded_resource, "qualifier": "live"}
        calls = [stack] + ([call] if recorded_resource else [])
        (d / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
        (d / "unused.txt").write_text(justified)
        out = subprocess.run([sys.executable, CHECK, d / "t.json", d / "calls.jsonl", "--justified", d / "unused.txt"],
                             capture_output=True, text=True)
        return out.returncode, out.stdout + out.stderr


class StartThroughAnAlias(unittest.TestCase):
    # The emulator records a start through `...:live` against the machine's own ARN, as AWS
    # authorizes it (tools/emulator.py, module doc 5).

    def test_a_grant_on_the_state_machine_allows_a_start_through_its_alias(self):
        code, out = check({"Ref": "OrderReviewStateMachine"}, MACHINE)
        self.assertEqual(code, 0, out)
        self.assertIn("every call allowed", out)

    def test_a_grant_on_the_alias_arn_alone_is_denied_as_aws_denies_it(self):
        code, out = check({"Fn::Sub": "${OrderReviewStateMachine}:live"}, MACHINE)
        self.assertEqual(code, 1, out)
        self.assertIn(f"DENIED: IntakeFunction states:StartExecution on {MACHINE}", out)

    def test_another_stack_whose_name_extends_this_one_is_not_granted(self):
        code, out = check({"Ref": "OrderReviewStateMachine"}, MACHINE.replace("s1-", "s1-staging-"))
        self.assertEqual(code, 1, out)
        self.assertIn("DENIED", out)


class UnusedGrants(unittest.TestCase):
    GRANT = "IntakeFunction states:StartExecution OrderReviewStateMachine"

    def test_an_unused_grant_needs_a_justification(self):
        code, out = check({"Ref": "OrderReviewStateMachine"}, None)
        self.assertEqual(code, 1, out)
        self.assertIn("NOT JUSTIFIED", out)
        code, out = check({"Ref": "OrderReviewStateMachine"}, None, f"{self.GRANT}  # why\n")
        self.assertEqual(code, 0, out)

    def test_a_justification_of_a_grant_used_now_is_stale(self):
        code, out = check({"Ref": "OrderReviewStateMachine"}, MACHINE, f"{self.GRANT}  # why\n")
        self.assertEqual(code, 1, out)
        self.assertIn("STALE JUSTIFICATION", out)

    def test_a_grant_marked_timing_dependent_may_be_used_or_not(self):
        line = f"? {self.GRANT}  # covered only when a race goes one way\n"
        for recorded in (MACHINE, None):
            code, out = check({"Ref": "OrderReviewStateMachine"}, recorded, line)
            self.assertEqual(code, 0, out)

    def test_a_timing_dependent_line_for_a_grant_gone_is_stale(self):
        line = "? IntakeFunction states:StopExecution OrderReviewStateMachine  # race\n"
        code, out = check({"Ref": "OrderReviewStateMachine"}, MACHINE, line)
        self.assertEqual(code, 1, out)
        self.assertIn("STALE JUSTIFICATION", out)


if __name__ == "__main__":
    unittest.main()
