"""Transforms template.yaml into the CloudFormation that AWS would deploy, offline.

`sam deploy` uploads the code, the state machine definitions and the OpenAPI file, and
CloudFormation runs the AWS::Serverless transform (samtranslator) and inlines AWS::Include. This
script does the same without an AWS account, so that `make test` can check what AWS would
actually create:
- cfn-lint on the transformed CloudFormation, not only on the SAM source;
- the policy contract (tools/policy-check.py): every function's role, with SAM's policy
  templates expanded, against every call the function made in the tests.

Local paths become placeholder S3 locations, as `sam package` would make them (their content does
not change the roles or the resources). The region is us-east-1, the local stack's.

Usage: python tools/sam-transform.py template.yaml OUT.json
"""

import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

expand = import_module("expand-includes").expand


def package(node):
    """Replaces local CodeUri/DefinitionUri paths with the S3 locations `sam package` uploads to."""
    resources = node.get("Resources", {})
    for logical_id, resource in resources.items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str):
            props["CodeUri"] = f"s3://baton-package/{logical_id}.zip"
        if resource.get("Type") == "AWS::Serverless::StateMachine" and isinstance(props.get("DefinitionUri"), str):
            props["DefinitionUri"] = {"Bucket": "baton-package", "Key": props["DefinitionUri"]}
    return node


def transform(path):
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from samtranslator.parser import parser
    from samtranslator.translator.translator import Translator

    with open(path) as f:
        template = yaml.safe_load(f)
    template = package(expand(template, os.path.dirname(os.path.abspath(path))))
    translator = Translator(managed_policy_map={}, sam_parser=parser.Parser())
    return translator.translate(sam_template=template, parameter_values={}, passthrough_metadata=True)


def main():
    src, out = sys.argv[1], sys.argv[2]
    try:
        transformed = transform(src)
    except Exception as e:  # samtranslator reports every problem in one exception
        causes = getattr(e, "causes", None) or [e]
        for cause in causes:
            print(f"{src}: the SAM transform failed: {getattr(cause, 'message', cause)}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(transformed, f, indent=1, sort_keys=True)
    print(f"{out}: {len(transformed.get('Resources', {}))} resources after the SAM transform")


if __name__ == "__main__":
    main()
