"""A baton task worker: takes one team's tasks from its task queue, does the work, calls back.

Copy this file and replace WORK with your team's work. Everything else is what any worker
needs: reading and checking the CloudEvent, signing the callback with Standard Webhooks, and
acting on each answer baton documents (docs/TASK_WORKERS.md):

    200 applied / 202 buffered / 200 ignored   done: the message is deleted
    429, 5xx (503 + Retry-After), no answer    retry: the worker keeps the message invisible and
                                               calls back again with the same webhook-id after
                                               Retry-After (else a backoff); no new receive, so
                                               never the dead-letter queue for it
    3xx                                        later: never followed (the signed headers go to the
                                               callback URL alone); visible again after a minute
    409 and every other 4xx                    refused: retrying cannot help, so the message is
                                               left for the queue's redrive to its dead-letter
                                               queue, where a person looks at it

A reminder (baton.task.reminder: the task `data.reminds` names still waits for an answer) is
taken as that task: the same work, and the same callback with the reminded task's id as its
webhook-id, so that a task answered already is answered again as a duplicate, never twice.

An escalation (baton.task.escalated: the task `data.escalates` names, given to a further level's
queue, this worker's, while it still waits) is taken as that task too, by the level's team, for
a step WORK lists for this queue: the same work and callback, but with the escalation's own id
(`data.task_id`) as its webhook-id, for the level's answer is another input than the first
holder's. Whichever answer comes first completes the step; a later one is ignored.

A message that is not a task this worker takes (not JSON, not a baton task, reminder or
escalation, a field missing or of the wrong type, another team's `queue`, a workflow and step
WORK does not list for its queue) is never acted on: it is logged and refused, left for the
redrive.

Configuration, from the environment (a deployed stack's outputs):
    BATON_TASK_QUEUE             the team's queue name, as the config's tasks give it (risk-review)
    BATON_TASK_QUEUE_URL_PREFIX  the TaskQueueUrlPrefix output: the queue's URL is it + the name
    BATON_API_URL                the CallbackUrl output without its /v1/callbacks (callbacks go to
                                 {BATON_API_URL}/v1/callbacks), as the baton CLI takes it
    BATON_WEBHOOK_SECRET         a whsec_ secret from the callback secret in Secrets Manager
    AWS_REGION, AWS credentials as boto3 finds them
or, against `make run`: `--local .baton/local.json --queue NAME`, which names all of these.

Each message is logged as one JSON line on stdout, and each further try at its callback too.
"""

import argparse
import email.utils
import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import boto3
from standardwebhooks.webhooks import Webhook

TASK_CREATED = "baton.task.created"
COMPENSATION_REQUESTED = "baton.compensation.requested"
TASK_REMINDER = "baton.task.reminder"
TASK_ESCALATED = "baton.task.escalated"
EVENT_TYPES = (TASK_CREATED, COMPENSATION_REQUESTED, TASK_REMINDER, TASK_ESCALATED)

MAX_RETRY_AFTER = 900  # the most a Retry-After is honoured for, in seconds
MAX_BACKOFF = 60  # the longest wait between tries without one
LATER_SECONDS = 60  # how long a redirected task stays invisible before its next delivery
HOLD_MARGIN = 60  # visibility kept beyond a retry's wait, for the callback itself
MAX_VISIBILITY = 43200  # SQS keeps a message invisible for at most 12 hours


def review(task):
    return "succeeded", {"decision": "approve"}


def hold_stock(task):
    return "succeeded", {"hold": f"hold-{task['key']}"}


def undone(task):
    return "succeeded", None


# The work each team's worker does: for its queue, by (workflow, step, compensation); anything
# else it never acts on. Each returns (outcome, data): outcome "succeeded" or "failed" (data then
# {"error", "cause"}). This demo approves reviews (risk-review), holds stock and releases it
# (stock), refunds payments (payments), and has the leads, to whom a review or a stock hold
# left waiting escalates (`escalate: [{ after: ..., queue: leads }]`), do either (leads); replace
# these with your team's. `task` is the event's `data`: task_id, workflow, key, generation, step,
# title, queue, attempt, previous_error and compensation; a reminder's also reminds and
# reminder, an escalation's escalates and level, and either is looked up as the step's task
# (compensation False): an escalation under its level's queue, this one.
WORK = {
    "risk-review": {("order-review", "manual-review", False): review},
    "stock": {
        ("order-review", "reserve-stock", False): hold_stock,
        ("order-review", "reserve-stock", True): undone,
    },
    "payments": {("order-review", "payment", True): undone},
    "leads": {
        ("order-review", "manual-review", False): review,
        ("order-review", "reserve-stock", False): hold_stock,
    },
}


class NotMine(Exception):
    """A message that is not a task this worker takes: `code` says why, `problem` in words."""

    def __init__(self, code, problem):
        super().__init__(problem)
        self.code = code
        self.problem = problem


# Every field a task's data has, with its type (None: may be null).
FIELDS = {
    "task_id": (str,),
    "workflow": (str,),
    "key": (str,),
    "generation": (int,),
    "step": (str,),
    "title": (str,),
    "queue": (str,),
    "attempt": (int, type(None)),
    "previous_error": (str, type(None)),
    "compensation": (bool,),
}


def parse_task(body, queue):
    """The task in a message body, checked: a baton task event (or a reminder or an escalation
    of one), every field there and of its type, for this worker's `queue`, and one WORK lists
    for it. Returns (event type, data, work)."""
    try:
        event = json.loads(body)
    except (TypeError, ValueError) as error:
        raise NotMine("malformed_task", f"not JSON: {error}")
    if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES:
        kind = event.get("type") if isinstance(event, dict) else None
        raise NotMine("not_a_baton_task", f"type {kind!r} is not a baton task")
    data = event.get("data")
    if not isinstance(data, dict):
        raise NotMine("malformed_task", "data is not an object")
    for name, types in FIELDS.items():
        value = data.get(name)
        # bool is an int in Python: a generation of true is no generation.
        if name not in data or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise NotMine("malformed_task", f"data.{name} is missing or not of type {types[0].__name__}")
    for name in ("task_id", "workflow", "key", "step"):
        if not data[name]:
            raise NotMine("malformed_task", f"data.{name} is empty")
    if data["generation"] < 1 or (data["attempt"] is not None and data["attempt"] < 1):
        raise NotMine("malformed_task", "data.generation and data.attempt count from 1")
    if data["compensation"] != (event["type"] == COMPENSATION_REQUESTED):
        raise NotMine("malformed_task", "data.compensation does not match the event's type")
    check_notice(event, data)
    if data["queue"] != queue:
        raise NotMine("foreign_queue", f"data.queue {data['queue']!r} is not this worker's {queue!r}")
    work = WORK.get(queue, {}).get((data["workflow"], data["step"], data["compensation"]))
    if work is None:
        what = "compensation" if data["compensation"] else "step"
        raise NotMine("not_handled", f"this worker does no {what} {data['step']!r} of workflow {data['workflow']!r}")
    return event["type"], data, work


# The notices of a task still waiting, by event type: the field naming the task, the field
# counting from 1, and the letter between the two in the notice's own id (`<task>/r1`, `<task>/e1`).
NOTICES = {
    TASK_REMINDER: ("reminds", "reminder", "r"),
    TASK_ESCALATED: ("escalates", "level", "e"),
}


def check_notice(event, data):
    """A reminder names the task it reminds of (`reminds`, a task id) and its count (`reminder`,
    from 1); an escalation the task it escalates (`escalates`) and its level (`level`, from 1).
    A notice's own id is the two together (`<reminds>/r<reminder>`, `<escalates>/e<level>`). A
    task carries neither pair, and a notice not the other kind's (null or absent)."""
    for kind, (names, counts, letter) in NOTICES.items():
        of, count = data.get(names), data.get(counts)
        if event["type"] != kind:
            if of is not None or count is not None:
                raise NotMine("malformed_task", f"data.{names} and data.{counts} do not belong to a {event['type']}")
            continue
        if not isinstance(of, str) or not of:
            raise NotMine("malformed_task", f"data.{names} is missing, empty or not a string")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise NotMine("malformed_task", f"data.{counts} is missing or not a whole number from 1")
        if data["task_id"] != f"{of}/{letter}{count}" or event.get("id") != data["task_id"]:
            problem = f"the id (and data.task_id) is not data.{names} + '/{letter}' + data.{counts}"
            raise NotMine("malformed_task", problem)


def webhook_id(task):
    """The callback's webhook-id: the task id, and for a reminder the id of the task it reminds
    of. A task and each of its reminders then make one callback, applied at most once: whichever
    comes later is answered as a duplicate of the first. An escalation's is its own id
    (`task_id`, `<escalates>/e<level>`): the level's team answers as another input, and the
    task's id with another body would be refused (409 idempotency_key_reused)."""
    return task.get("reminds") or task["task_id"]


def callback_body(task, outcome, data):
    """The callback for `task`: it names the generation and attempt the task carries, so a
    late answer to an earlier run or attempt is ignored instead of completing a later one."""
    body = {
        "workflow": task["workflow"],
        "key": task["key"],
        "step": task["step"],
        "outcome": outcome,
        "generation": task["generation"],
    }
    if task["attempt"] is not None:
        body["attempt"] = task["attempt"]
    if task["compensation"]:
        body["compensation"] = True
    elif outcome == "failed":
        body.update(data)
    elif data is not None:
        body["data"] = data
    return body


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follows a redirect: urllib would send the signed headers to wherever a 3xx points
    (and a POST turned into a GET); refused here, the 3xx is an answer like any other."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


OPENER = urllib.request.build_opener(NoRedirects)


def parse_retry_after(value):
    """Retry-After as seconds from now: a number of seconds, or an HTTP date; None otherwise."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if at is None or at.tzinfo is None:
        return None
    return max(0, int((at - datetime.now(tz=timezone.utc)).total_seconds()))


def json_answer(stream):
    try:
        answer = json.load(stream)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def post_callback(api_url, webhook, webhook_id, body):
    """POSTs a signed callback once. Returns (status, answer, retry_after, location); status is
    None when no answer came (the network, a timeout): that is retried as a 503 is."""
    payload = json.dumps(body).encode()
    now = datetime.now(tz=timezone.utc)
    request = urllib.request.Request(
        f"{api_url}/v1/callbacks",
        data=payload,
        method="POST",
        headers={
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": webhook.sign(webhook_id, now, payload),
        },
    )
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, json_answer(response), None, None
    except urllib.error.HTTPError as error:
        location = error.headers.get("Location") if 300 <= error.code < 400 else None
        return error.code, json_answer(error), parse_retry_after(error.headers.get("Retry-After")), location
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        return None, {"error": "no_answer", "message": str(error)}, None, None


def verdict(status):
    """What to do with the message after this answer: "done", "retry", "later" or "refused"."""
    if status in (200, 202):
        return "done"
    if status is None or status == 429 or status >= 500:
        return "retry"
    if 300 <= status < 400:
        return "later"
    return "refused"


def retry_delay(retry_after, retries):
    """The wait before the next try after `retries` transient answers: Retry-After when it came
    (at most MAX_RETRY_AFTER), else a jittered exponential backoff up to a minute."""
    if retry_after is not None:
        return min(max(retry_after, 1), MAX_RETRY_AFTER)
    ceiling = min(2 ** min(retries, 16), MAX_BACKOFF)
    return max(1, ceiling // 2 + random.randint(0, ceiling // 2))


class Worker:
    def __init__(self, sqs, queue, queue_url, api_url, webhook, stopping):
        self.sqs, self.queue, self.queue_url = sqs, queue, queue_url
        self.api_url, self.webhook, self.stopping = api_url, webhook, stopping

    def log(self, line):
        print(json.dumps(line), flush=True)

    def hide(self, message, seconds):
        self.sqs.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"],
            VisibilityTimeout=min(seconds, MAX_VISIBILITY),
        )

    def sleep(self, seconds):
        """Sleeps, or returns False as soon as the worker is asked to stop."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stopping:
                return False
            time.sleep(min(0.2, max(0, deadline - time.monotonic())))
        return not self.stopping

    def handle(self, message):
        base = {
            "message_id": message.get("MessageId"),
            "receives": int(message.get("Attributes", {}).get("ApproximateReceiveCount", 0)) or None,
        }
        try:
            kind, task, work = parse_task(message.get("Body"), self.queue)
        except NotMine as refusal:
            # Never acted on: left for the redrive, where a person looks.
            self.log({**base, "answer": refusal.code, "message": refusal.problem, "action": "refused"})
            return
        outcome, data = work(task)
        base.update(task_id=task["task_id"], type=kind, webhook_id=webhook_id(task))
        self.deliver(message, task, callback_body(task, outcome, data), base)

    def deliver(self, message, task, body, base):
        """Calls back until the answer is not transient, keeping the message invisible meanwhile.
        The webhook-id is the task id (a reminder's: the id of the task it reminds of; an
        escalation's: its own): the same for every try and every delivery of this task and of its
        reminders, so a repeated callback is applied at most once and answered as the first one
        was."""
        retries = 0
        while True:
            status, answer, retry_after, location = post_callback(self.api_url, self.webhook, webhook_id(task), body)
            action = verdict(status)
            line = {
                **base,
                "http": status,
                "answer": answer.get("status") or answer.get("error") or ("redirect" if location else None),
                "reason": answer.get("reason"),
                "message": answer.get("message"),
                "duplicate": answer.get("duplicate"),
                "action": action,
            }
            if location:
                line["location"] = location
            if action == "done":
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            elif action == "later":
                line["retry_after"] = LATER_SECONDS
                self.hide(message, LATER_SECONDS)
            elif action == "retry":
                # Kept ours meanwhile: no other delivery, so no step nearer the dead-letter queue.
                line["retry_after"] = retry_delay(retry_after, retries)
                self.hide(message, line["retry_after"] + HOLD_MARGIN)
            # "refused": not deleted. The queue's redrive moves it to the dead-letter queue after
            # its maxReceiveCount, with the log line saying why.
            self.log(line)
            if action != "retry" or not self.sleep(line["retry_after"]):
                return
            retries += 1

    def run(self, wait):
        while not self.stopping:
            try:
                received = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=wait,
                    AttributeNames=["ApproximateReceiveCount"],
                )
            except Exception as error:  # the queue did not answer: say so, and try again later
                self.log({"answer": "sqs_error", "message": str(error)})
                self.sleep(5)
                continue
            for message in received.get("Messages", []):
                try:
                    self.handle(message)
                except Exception as error:  # an SQS call about it failed: it comes back later
                    self.log({"message_id": message.get("MessageId"), "answer": "sqs_error", "message": str(error)})


def settings(args):
    if args.local:
        if not args.queue:
            sys.exit("--local needs --queue NAME: the team's queue, a task's `queue`")
        with open(args.local) as f:
            info = json.load(f)
        tasks = info["queues"]["tasks"]
        if args.queue not in tasks:
            sys.exit(f"no task in the running config names the queue {args.queue!r}; it has {sorted(tasks)}")
        return {
            "queue": args.queue,
            "queue_url": tasks[args.queue]["url"],
            "api_url": info["api_url"],
            "secret": info["webhook_secret"],
            "endpoint": info["aws_endpoint"],
            "region": info["region"],
        }
    queue = os.environ["BATON_TASK_QUEUE"]
    return {
        "queue": queue,
        "queue_url": os.environ["BATON_TASK_QUEUE_URL_PREFIX"] + queue,
        "api_url": os.environ["BATON_API_URL"],
        "secret": os.environ["BATON_WEBHOOK_SECRET"],
        "endpoint": None,
        "region": None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", metavar="PATH", help="take the settings from baton local's local.json")
    parser.add_argument("--queue", metavar="NAME", help="with --local: the team's queue (a task's `queue`)")
    parser.add_argument("--wait", type=int, default=20, help="long-poll seconds per receive (at most 20)")
    args = parser.parse_args()
    s = settings(args)
    if s["queue"] not in WORK:
        sys.exit(f"this worker has no work for the queue {s['queue']!r}: add it to WORK")
    # The secret as baton's secret list holds it: the first (newest) of a comma-separated list,
    # and a scope (whsec_...@order-review) is baton's to read, not part of the key.
    webhook = Webhook(s["secret"].split(",")[0].strip().split("@")[0])
    kwargs = {"endpoint_url": s["endpoint"], "region_name": s["region"]} if s["endpoint"] else {}
    if s["endpoint"]:
        kwargs.update(aws_access_key_id="testing", aws_secret_access_key="testing")
    sqs = boto3.client("sqs", **kwargs)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(json.dumps({"ready": s["queue_url"]}), flush=True)
    Worker(sqs, s["queue"], s["queue_url"], s["api_url"], webhook, stopping).run(args.wait)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
