"""A baton task worker: takes tasks from baton's outbound queue, does the work, calls back.

Copy this file and replace `do_the_work` with your team's work. Everything else is what any
worker needs: reading the CloudEvent, signing the callback with Standard Webhooks, and acting
on each answer baton documents (docs/TASK_WORKERS.md):

    200 applied / 202 buffered / 200 ignored   done: the message is deleted
    503 + Retry-After (or no answer at all)    retried later with the same webhook-id: the
                                               message is made visible again after Retry-After
    409 and every other 4xx                    refused: retrying cannot help, so the message is
                                               left for the queue's redrive to its dead-letter
                                               queue, where a person looks at it

Configuration, from the environment (a deployed stack's outputs):
    BATON_OUTBOUND_QUEUE_URL  the OutboundQueueUrl output
    BATON_API_URL             the CallbackUrl output without its /v1/callbacks (callbacks go to
                              {BATON_API_URL}/v1/callbacks), as the baton CLI takes it
    BATON_WEBHOOK_SECRET      a whsec_ secret from the callback secret in Secrets Manager
    AWS_REGION, AWS credentials as boto3 finds them
or, against `make run`: `--local .baton/local.json`, which names all of these.

Each task is handled once per delivery and logged as one JSON line on stdout.
"""

import argparse
import json
import os
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


def do_the_work(task):
    """Your team's work. Returns (outcome, data): outcome is "succeeded" or "failed".

    `task` is the event's `data`: task_id, workflow, key, generation, step, title, queue,
    attempt, previous_error and compensation. This demo approves reviews and holds stock,
    and undoes whatever a compensation task names.
    """
    if task["compensation"]:
        return "succeeded", None
    demo = {
        "manual-review": {"decision": "approve"},
        "reserve-stock": {"hold": f"hold-{task['key']}"},
    }
    if task["step"] not in demo:
        return "failed", {"error": "worker.unknown_step", "cause": f"no work for step {task['step']}"}
    return "succeeded", demo[task["step"]]


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
    if task.get("attempt") is not None:
        body["attempt"] = task["attempt"]
    if task["compensation"]:
        body["compensation"] = True
    elif outcome == "failed":
        body.update(data)
    elif data is not None:
        body["data"] = data
    return body


def post_callback(api_url, webhook, webhook_id, body):
    """POSTs a signed callback once. Returns (status, answer, retry_after); status is None
    when no answer came (the network, a timeout): that is retried as a 503 is."""
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
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response), None
    except urllib.error.HTTPError as error:
        retry_after = error.headers.get("Retry-After")
        try:
            answer = json.load(error)
        except ValueError:
            answer = {}
        return error.code, answer, int(retry_after) if retry_after else None
    except (urllib.error.URLError, TimeoutError) as error:
        return None, {"error": "no_answer", "message": str(error)}, None


def verdict(status):
    """What to do with the message after this answer: "done", "retry" or "refused"."""
    if status in (200, 202):
        return "done"
    if status is None or status >= 500:
        return "retry"
    return "refused"


def handle(message, sqs, queue_url, api_url, webhook):
    event = json.loads(message["Body"])
    if event.get("type") not in (TASK_CREATED, COMPENSATION_REQUESTED):
        return {"message_id": message["MessageId"], "action": "refused", "error": "not_a_baton_task"}
    task = event["data"]
    outcome, data = do_the_work(task)
    # The webhook-id is the task id: the same for every delivery of this task, so a repeated
    # callback (a redelivery, a retry after a 503) is recognized, applied at most once, and
    # answered as the first one was.
    status, answer, retry_after = post_callback(api_url, webhook, task["task_id"], callback_body(task, outcome, data))
    action = verdict(status)
    line = {
        "task_id": task["task_id"],
        "type": event["type"],
        "webhook_id": task["task_id"],
        "http": status,
        "answer": answer.get("status") or answer.get("error"),
        "reason": answer.get("reason"),
        "message": answer.get("message"),
        "duplicate": answer.get("duplicate"),
        "action": action,
    }
    if action == "done":
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    elif action == "retry":
        # Back on the queue once Retry-After has passed; SQS caps visibility at 12 hours.
        line["retry_after"] = retry_after or 5
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=line["retry_after"]
        )
    # "refused": not deleted. The queue's redrive moves it to the dead-letter queue after its
    # maxReceiveCount, with the log line above saying why.
    return line


def settings(args):
    if args.local:
        with open(args.local) as f:
            info = json.load(f)
        return {
            "queue_url": info["queues"]["outbound"],
            "api_url": info["api_url"],
            "secret": info["webhook_secret"],
            "endpoint": info["aws_endpoint"],
            "region": info["region"],
        }
    return {
        "queue_url": os.environ["BATON_OUTBOUND_QUEUE_URL"],
        "api_url": os.environ["BATON_API_URL"],
        "secret": os.environ["BATON_WEBHOOK_SECRET"],
        "endpoint": None,
        "region": None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", metavar="PATH", help="take the settings from baton local's local.json")
    parser.add_argument("--wait", type=int, default=20, help="long-poll seconds per receive (at most 20)")
    args = parser.parse_args()
    s = settings(args)
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
    while not stopping:
        received = sqs.receive_message(QueueUrl=s["queue_url"], MaxNumberOfMessages=10, WaitTimeSeconds=args.wait)
        for message in received.get("Messages", []):
            print(json.dumps(handle(message, sqs, s["queue_url"], s["api_url"], webhook)), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
