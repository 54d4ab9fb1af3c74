"""The policy contract: would AWS allow every call each function made in the tests?

moto enforces no IAM, so a call that a deployed function would be denied passes every local
test. This check closes that gap. It reads:
- the SAM-transformed template (tools/sam-transform.py): each function's role, with SAM's policy
  templates expanded and the managed policies of the template attached;
- the calls the functions made in `make test`, recorded by the emulator
  (`tools/emulator.py --record-calls`): function, stack, IAM action, resource ARN; and each
  stack's resolved names and ARNs, so the role's intrinsics resolve exactly as that stack.

It fails on any call no statement of the function's role allows, naming the function, the action
and the ARN. It also lists every grant no call used; each must be justified in
infra/unused-grants.txt (`Function action resource  # why`), or removed from the template, and a
justification that no longer matches an unused grant is an error too. A line that begins with
`?` names a grant whose use in `make test` depends on timing (a race the tests cannot place):
it may be used in one run and not in another, and is never stale while it is still granted.

Only identity policies with Allow statements, Action and Resource (wildcards `*` and `?`) are
understood; anything else in a role (Deny, NotAction, NotResource, Condition) is an error rather
than a silently wrong verdict. AWS managed policies (the Lambda basic execution and SQS event
source roles SAM attaches) are not expanded: they cover Lambda's own logging and event source
mapping, whose calls are not the function's code and are not recorded.

The check can prove it catches a missing grant: `--without Function:Policy` drops one policy
from the function's role, and `--expect-denied "Function action"` then requires that the calls
be denied (exit 0 only if they are). `make test` runs it that way for the grant whose absence
was issue 11's bug: intake resuming a step.

Usage: python tools/policy-check.py TRANSFORMED.json CALLS.jsonl [--justified FILE]
           [--without FUNCTION:POLICY --expect-denied "FUNCTION ACTION"]
"""

import argparse
import json
import re
import sys
from collections import defaultdict

NOVALUE = object()


class Unresolvable(Exception):
    pass


def resolve(node, refs, attrs, conditions, path):
    """The value of a template node for one stack."""
    if isinstance(node, list):
        out = [resolve(v, refs, attrs, conditions, f"{path}[{i}]") for i, v in enumerate(node)]
        return [v for v in out if v is not NOVALUE]
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        return {k: resolve(v, refs, attrs, conditions, f"{path}.{k}") for k, v in node.items()}
    (key, value), = node.items()
    if key == "Ref":
        if value == "AWS::NoValue":
            return NOVALUE
        if value not in refs:
            raise Unresolvable(f"{path}: Ref {value}")
        return refs[value]
    if key == "Fn::GetAtt":
        name = ".".join(value) if isinstance(value, list) else value
        if name not in attrs:
            raise Unresolvable(f"{path}: Fn::GetAtt {name}")
        return attrs[name]
    if key == "Fn::Sub":
        text, local = (value, {}) if isinstance(value, str) else (value[0], value[1])

        def one(match):
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in local:
                return str(resolve(local[name], refs, attrs, conditions, f"{path}.{name}"))
            if name in refs:
                return str(refs[name])
            if name in attrs:
                return str(attrs[name])
            raise Unresolvable(f"{path}: ${{{name}}}")

        return re.sub(r"\$\{([^}]+)\}", one, text)
    if key == "Fn::Join":
        sep, items = value
        return sep.join(str(v) for v in resolve(items, refs, attrs, conditions, path))
    if key == "Fn::If":
        condition, yes, no = value
        return resolve(yes if conditions[condition] else no, refs, attrs, conditions, path)
    if key.startswith("Fn::"):
        raise Unresolvable(f"{path}: {key} is not understood by the policy check")
    return {key: resolve(value, refs, attrs, conditions, f"{path}.{key}")}


def evaluate_condition(node, refs, attrs, conditions):
    (key, value), = node.items()
    if key == "Fn::Equals":
        a, b = (resolve(v, refs, attrs, conditions, "Conditions") for v in value)
        return a == b
    if key == "Fn::Not":
        return not evaluate_condition(value[0], refs, attrs, conditions)
    if key == "Fn::And":
        return all(evaluate_condition(v, refs, attrs, conditions) for v in value)
    if key == "Fn::Or":
        return any(evaluate_condition(v, refs, attrs, conditions) for v in value)
    if key == "Condition":
        return conditions[value]
    raise Unresolvable(f"Conditions: {key}")


def pattern(text, case_insensitive=False):
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile(f"^{regex}$", re.IGNORECASE if case_insensitive else 0)


def listify(v):
    return v if isinstance(v, list) else [v]


def label(node):
    """A grant's resource as written in the template, for people."""
    if isinstance(node, dict) and len(node) == 1:
        (key, value), = node.items()
        if key == "Ref":
            return value
        if key == "Fn::GetAtt":
            return ".".join(value) if isinstance(value, list) else value
        if key == "Fn::Sub":
            return value if isinstance(value, str) else value[0]
    return json.dumps(node) if not isinstance(node, str) else node


def role_grants(template, function):
    """(action, resource node, where) for every Allow of the function's role, unresolved."""
    resources = template["Resources"]
    role_ref = resources[function]["Properties"]["Role"]
    role_id = role_ref["Fn::GetAtt"][0] if isinstance(role_ref, dict) else None
    if role_id not in resources:
        raise SystemExit(f"{function}: its role {role_ref} is not a resource of the template")
    props = resources[role_id]["Properties"]
    documents = [(p["PolicyName"], p["PolicyDocument"]) for p in props.get("Policies", [])]
    for arn in props.get("ManagedPolicyArns", []):
        if isinstance(arn, dict) and "Ref" in arn and resources.get(arn["Ref"], {}).get("Type") == "AWS::IAM::ManagedPolicy":
            documents.append((arn["Ref"], resources[arn["Ref"]]["Properties"]["PolicyDocument"]))
    grants = []
    for where, document in documents:
        for statement in listify(document["Statement"]):
            unknown = set(statement) - {"Effect", "Action", "Resource", "Sid"}
            if statement.get("Effect") != "Allow" or unknown:
                raise SystemExit(f"{function} ({where}): the policy check does not understand {statement}")
            for action in listify(statement["Action"]):
                for resource in listify(statement["Resource"]):
                    grants.append((action, resource, where))
    return grants


def drop(template, function, policy):
    """Removes `policy` (a managed policy's logical id, or an inline policy's name) from the
    function's role."""
    resources = template["Resources"]
    role = resources[resources[function]["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
    before = len(role.get("ManagedPolicyArns", [])) + len(role.get("Policies", []))
    role["ManagedPolicyArns"] = [a for a in role.get("ManagedPolicyArns", []) if a != {"Ref": policy}]
    role["Policies"] = [p for p in role.get("Policies", []) if p.get("PolicyName") != policy]
    if len(role["ManagedPolicyArns"]) + len(role["Policies"]) == before:
        raise SystemExit(f"{function} has no policy {policy} to drop")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template")
    parser.add_argument("calls")
    parser.add_argument("--justified", default="infra/unused-grants.txt")
    parser.add_argument("--without", metavar="FUNCTION:POLICY", help="drop this policy from the role first")
    parser.add_argument("--expect-denied", metavar="FUNCTION ACTION", help="succeed only if these calls are denied")
    args = parser.parse_args()

    with open(args.template) as f:
        template = json.load(f)
    if args.without:
        drop(template, *args.without.split(":", 1))
    stacks, calls = {}, []
    with open(args.calls) as f:
        for line in f:
            doc = json.loads(line)
            if doc["kind"] == "stack":
                stacks[doc["stack"]] = doc
            else:
                calls.append(doc)

    functions = sorted({c["function"] for c in calls})
    grants = {f: role_grants(template, f) for f in functions}
    for f in sorted(k for k, v in template["Resources"].items() if v["Type"] == "AWS::Lambda::Function"):
        grants.setdefault(f, role_grants(template, f))
    used = set()  # (function, index of the grant)
    denied = defaultdict(int)
    unknown_tokens = 0
    resolved_cache = {}
    for call in calls:
        function, stack = call["function"], call["stack"]
        if call["resource"] == "unknown-task-token":
            unknown_tokens += 1
            continue
        if stack not in stacks:
            raise SystemExit(f"call by {function} in stack {stack!r}, which never registered its names: {call}")
        key = (function, stack)
        if key not in resolved_cache:
            s = stacks[stack]
            refs, attrs = dict(s["refs"]), dict(s["attrs"])
            conditions = {}
            for name, node in template.get("Conditions", {}).items():
                conditions[name] = evaluate_condition(node, refs, attrs, conditions)
            resolved = []
            for i, (action, resource, where) in enumerate(grants[function]):
                try:
                    value = resolve(resource, refs, attrs, conditions, f"{function}/{where}")
                except Unresolvable:
                    # A Ref to a resource the local stack does not provision (e.g. an IAM
                    # policy): no local call can touch it.
                    continue
                for r in listify(value):
                    resolved.append((i, pattern(action, True), pattern(r)))
            resolved_cache[key] = resolved
        matches = [i for i, a, r in resolved_cache[key] if a.match(call["action"]) and r.match(call["resource"])]
        if matches:
            used.update((function, i) for i in matches)
        else:
            denied[(function, call["action"], call["resource"])] += 1

    print(f"policy contract: {len(calls)} calls by {len(functions)} functions in {len(stacks)} stacks, "
          f"checked against the roles of {args.template}")
    if unknown_tokens:
        print(f"  {unknown_tokens} calls with a task token no execution issued (AWS answers InvalidToken) were skipped")
    for (function, action, resource), n in sorted(denied.items()):
        print(f"DENIED: {function} {action} on {resource} ({n} calls): no statement of its role allows it")

    justified = {}
    either = set()
    try:
        with open(args.justified) as f:
            for number, line in enumerate(f, 1):
                text = line.split("#", 1)
                entry = text[0].strip()
                if not entry:
                    continue
                if len(text) < 2 or not text[1].strip():
                    raise SystemExit(f"{args.justified}:{number}: a justification needs its reason after '#'")
                if entry.startswith("?"):
                    entry = entry[1:].strip()
                    either.add(tuple(entry.split(None, 2)))
                justified[tuple(entry.split(None, 2))] = text[1].strip()
    except FileNotFoundError:
        pass
    unused = []
    for function, items in sorted(grants.items()):
        for i, (action, resource, where) in enumerate(items):
            if (function, i) not in used:
                unused.append((function, action, label(resource)))
    if args.expect_denied:
        function, action = args.expect_denied.split()
        caught = any(f == function and a == action for f, a, _ in denied)
        print(f"policy contract without {args.without}: {function} {action} "
              + ("denied, as it must be" if caught else "NOT denied: the check would miss this bug"))
        sys.exit(0 if caught else 1)
    problems = len(denied)
    print(f"grants no call used: {len(unused)}")
    for entry in unused:
        reason = justified.get(entry)
        print(f"  {' '.join(entry)}" + (f"  # {reason}" if reason else "  # NOT JUSTIFIED"))
        if reason is None:
            problems += 1
    granted = {(function, action, label(resource)) for function, items in grants.items()
               for action, resource, _ in items}
    for stale in sorted(set(justified) - set(unused) - (either & granted)):
        print(f"STALE JUSTIFICATION in {args.justified}: {' '.join(stale)} is used now, or no longer granted")
        problems += 1
    if problems:
        print(f"policy contract: {problems} problem(s)")
        sys.exit(1)
    print("policy contract: every call allowed, every unused grant justified")


if __name__ == "__main__":
    main()
