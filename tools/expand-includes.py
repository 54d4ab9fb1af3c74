"""Writes a copy of a CloudFormation template with every AWS::Include transform expanded.

CloudFormation inlines `Fn::Transform: {Name: AWS::Include, Parameters: {Location: ...}}` at
deploy time (after `sam deploy` uploads the file). cfn-lint cannot follow a local Location, so
`make test` lints the template as CloudFormation will see it: this script performs the same
inlining, and cfn-lint checks the result.

Usage: python tools/expand-includes.py template.yaml OUT.yaml
"""

import os
import sys

import yaml


def expand(node, base):
    if isinstance(node, dict):
        transform = node.get("Fn::Transform")
        if len(node) == 1 and isinstance(transform, dict) and transform.get("Name") == "AWS::Include":
            location = transform["Parameters"]["Location"]
            with open(os.path.join(base, location)) as f:
                return expand(yaml.safe_load(f), base)
        return {k: expand(v, base) for k, v in node.items()}
    if isinstance(node, list):
        return [expand(v, base) for v in node]
    return node


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        template = yaml.safe_load(f)
    expanded = expand(template, os.path.dirname(os.path.abspath(src)))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        yaml.safe_dump(expanded, f, sort_keys=False)


if __name__ == "__main__":
    main()
