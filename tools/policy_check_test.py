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


def check(start_resource, recorded_resource):
    """Runs the contract on one recorded StartExecution; returns (exit code, output)."""
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        (d / "t.json").write_text(json.dumps(template(start_resource)))
        stack = {"kind": "stack", "stack": "s1", "refs": {"OrderReviewStateMachine": MACHINE},
                 "attrs": {"OrderReviewStateMachine.Name": "s1-order-review"}}
        call = {"kind": "call", "function": "IntakeFunction", "stack": "s1",
                "action": "states:StartExecution", "resource": recorded_resource, "qualifier": "live"}
        (d / "calls.jsonl").write_text(json.dumps(stack) + "\n" + json.dumps(call) + "\n")
        (d / "unused.txt").write_text("")
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


if __name__ == "__main__":
    unittest.main()
