"""Tests that the emulator (tools/emulator.py) answers the machine's own clients only.

Any web page the operator visits could otherwise read the table, live task tokens included, or
reset it: moto answers every Origin with CORS `*`, and every Host (DNS rebinding). These start
the emulator on a free port and try a foreign Origin, a foreign Host and a CORS preflight, and
check that the clients baton has (the SDKs send no Origin; moto's Step Functions interpreter
calls back on localhost:$MOTO_PORT) are still answered; and that `--stats` counts what it
answers. And that the shortcuts through moto's costs (module doc, 8) give moto's own answers:
the same random writes and Queries against it with and without them.
Run with the venv's Python (moto):
python -m unittest tools/emulator_test.py
"""

import http.client
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest

EMULATOR = pathlib.Path(__file__).with_name("emulator.py")
LIST_QUEUES = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0",
               "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, "
                                "SignedHeaders=host, Signature=0"}


class Emulator:
    """tools/emulator.py on a free loopback port, with `args`; `stop()` ends it."""

    def __init__(self, *args):
        self.dir = tempfile.TemporaryDirectory()
        ready = os.path.join(self.dir.name, "url")
        self.process = subprocess.Popen([sys.executable, str(EMULATOR), "--port", "0", "--ready-file", ready, *args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the emulator did not start")
            time.sleep(0.1)
        with open(ready) as f:
            self.url = f.read()
        self.port = int(self.url.rsplit(":", 1)[1])

    def client(self, service, **config):
        """A boto3 client of `service` on this emulator (botocore's Config from `config`)."""
        import boto3
        from botocore.config import Config

        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1", aws_access_key_id="testing",
                            aws_secret_access_key="testing", config=Config(**config))

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:  # moto sometimes ignores SIGTERM (docs/EMULATOR_DEVIATIONS.md)
            self.process.kill()
            self.process.wait()
        self.dir.cleanup()


class LoopbackOnly(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.emulator = Emulator("--stats")
        cls.port = cls.emulator.port

    @classmethod
    def tearDownClass(cls):
        cls.emulator.stop()

    def ask(self, method, path, headers, body=b""):
        """(status, headers in lower case, body) of one request to the emulator on 127.0.0.1."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            headers = {"Host": f"127.0.0.1:{self.port}", **headers, "Content-Length": str(len(body))}
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            answer = connection.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            connection.close()

    def assertNoCors(self, headers):
        self.assertEqual([h for h in headers if h.startswith("access-control-")], [], headers)

    def test_the_sdk_clients_are_answered_on_each_loopback_name_without_cors_headers(self):
        for host in [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"127.0.0.2:{self.port}"]:
            status, headers, body = self.ask("POST", "/", {**LIST_QUEUES, "Host": host}, b"{}")
            self.assertEqual(status, 200, (host, body))
            self.assertNoCors(headers)

    def test_a_page_of_the_emulators_own_origin_is_answered(self):
        origin = f"http://localhost:{self.port}"
        status, headers, _ = self.ask("POST", "/", {**LIST_QUEUES, "Origin": origin}, b"{}")
        self.assertEqual(status, 200)
        self.assertNoCors(headers)

    def test_another_sites_origin_can_neither_read_nor_reset(self):
        for origin in ["https://evil.example", "null", f"http://127.0.0.1:{self.port + 1}"]:
            status, headers, body = self.ask("POST", "/", {**LIST_QUEUES, "Origin": origin}, b"{}")
            self.assertEqual(status, 403, (origin, body))
            self.assertNoCors(headers)
            status, headers, _ = self.ask("POST", "/moto-api/reset", {"Origin": origin})
            self.assertEqual(status, 403, origin)
            self.assertNoCors(headers)

    def test_a_preflight_from_another_site_is_refused(self):
        status, headers, _ = self.ask("OPTIONS", "/", {
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-amz-target,content-type"})
        self.assertEqual(status, 403)
        self.assertNoCors(headers)

    def test_a_name_rebound_to_loopback_is_refused(self):
        for host in [f"rebound.example:{self.port}", "localhost", f"localhost:{self.port + 1}",
                     f"127.0.0.1.evil.example:{self.port}"]:
            status, headers, body = self.ask("POST", "/", {**LIST_QUEUES, "Host": host}, b"{}")
            self.assertEqual(status, 421, (host, body))
            self.assertNoCors(headers)
        status, _, _ = self.ask("GET", "/moto-api/data.json", {"Host": f"rebound.example:{self.port}"})
        self.assertEqual(status, 421)

    def test_with_stats_each_request_is_counted_by_caller_and_operation(self):
        """`--stats` (module doc, 9), which this emulator is started with."""
        def list_queues_counted():
            status, _, body = self.ask("GET", "/_baton/stats", {"Host": f"127.0.0.1:{self.port}"})
            self.assertEqual(status, 200, body)
            stats = json.loads(body)
            self.assertIn("dynamodb_lock", stats)
            return sum(o["count"] for o in stats["operations"]
                       if o == {**o, "caller": "other", "operation": "AmazonSQS.ListQueues"})

        before = list_queues_counted()
        for _ in range(3):
            status, _, body = self.ask("POST", "/", LIST_QUEUES, b"{}")
            self.assertEqual(status, 200, body)
        self.assertEqual(list_queues_counted(), before + 3)

    def test_stats_say_the_cpu_of_each_operation_and_what_the_process_holds(self):
        status, _, body = self.ask("POST", "/", LIST_QUEUES, b"{}")
        self.assertEqual(status, 200, body)
        status, _, body = self.ask("GET", "/_baton/stats", {"Host": f"127.0.0.1:{self.port}"})
        self.assertEqual(status, 200, body)
        stats = json.loads(body)
        for o in stats["operations"]:  # one thread's CPU cannot exceed the time it took
            self.assertLessEqual(o["cpu_seconds"], o["seconds"] + 0.01, o)
        self.assertEqual([g["generation"] for g in stats["gc"]], [0, 1, 2])
        self.assertGreater(stats["objects"], 0)
        import ctypes

        # PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS: -1 where the kernel has no futex hash of a process's own.
        if ctypes.CDLL(None).prctl(78, 2, 0, 0, 0) < 0:
            self.assertIsNone(stats["futex_hash_slots"])
        else:  # module doc, 8: sized for moto's many threads, not the kernel's 16 slots
            self.assertEqual(stats["futex_hash_slots"], 65536)


class BesideMotoAsIs(unittest.TestCase):
    """Two emulators, one with the shortcuts (module doc, 8) and one as moto is (`--moto-as-is`)."""

    @classmethod
    def setUpClass(cls):
        cls.emulators = [Emulator(), Emulator("--moto-as-is")]

    @classmethod
    def tearDownClass(cls):
        for emulator in cls.emulators:
            emulator.stop()


class ShortcutsGiveMotosAnswers(BesideMotoAsIs):
    """A Query of the table or of an index reads only the partition it names (module doc, 8):
    the same seeded writes (puts, some large, updates that move an item between index partitions
    or out of the index, deletes, conditions that fail) and Queries (each condition on the sort
    key, either order, small pages) go to an emulator with the shortcuts and one without (`--moto-as-is`),
    and every answer must be the same."""

    TABLE = "shortcuts"
    KINDS = ["record#waiting#0", "record#waiting#1", "inbox#buffered#0"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.clients = [e.client("dynamodb", retries={"mode": "standard", "max_attempts": 5}) for e in cls.emulators]

    def both(self, operation, **request):
        """Each emulator's answer to one request: the response without its metadata, or the error code."""
        answers = []
        for client in self.clients:
            try:
                answer = getattr(client, operation)(**request)
                answer.pop("ResponseMetadata", None)
            except client.exceptions.ClientError as error:
                answer = {"error": error.response["Error"]["Code"]}
            answers.append(answer)
        self.assertEqual(answers[0], answers[1], (operation, request))
        return answers[0]

    def pages(self, **query):
        """Every page of one Query, from both emulators; each page must be the same."""
        items, start = [], None
        while True:
            page = self.both("query", TableName=self.TABLE, **query, **({"ExclusiveStartKey": start} if start else {}))
            self.assertNotIn("error", page, query)
            items += page["Items"]
            start = page.get("LastEvaluatedKey")
            if start is None:
                return items

    def create_table(self, name):
        key = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
        attributes = [{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "due_kind", "due_at")]
        index = {"IndexName": "by_due", "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "due_kind", "KeyType": "HASH"},
                               {"AttributeName": "due_at", "KeyType": "RANGE"}]}
        kind_only = {"IndexName": "by_kind", "Projection": {"ProjectionType": "KEYS_ONLY"},
                     "KeySchema": [{"AttributeName": "due_kind", "KeyType": "HASH"}]}
        for client in self.clients:  # the answers carry the time of creation
            client.create_table(TableName=name, KeySchema=key, AttributeDefinitions=attributes,
                                BillingMode="PAY_PER_REQUEST", GlobalSecondaryIndexes=[index, kind_only])

    def test_a_page_ends_at_1_mb_at_an_item_past_the_condition(self):
        """moto ends a page, with a LastEvaluatedKey, at the first item past those it returns
        that would take the page over 1 MB, whether or not the key condition holds for it."""
        self.create_table("one-mb")
        s = lambda v: {"S": v}
        for minute, size in [(1, 350_000), (2, 350_000), (3, 10), (4, 350_000), (5, 350_000)]:
            self.both("put_item", TableName="one-mb", Item={"pk": s(f"WF#{minute}"), "sk": s("RECORD"), "payload": s("x" * size),
                                                            "due_kind": s("k"), "due_at": s(f"10:0{minute}")})
        for condition, forward in [("due_at <= :a", True), ("due_at >= :b", False)]:
            page = self.both("query", TableName="one-mb", IndexName="by_due", KeyConditionExpression=f"due_kind = :k AND {condition}",
                             ExpressionAttributeValues={":k": s("k"), **({":a": s("10:02")} if forward else {":b": s("10:04")})},
                             ScanIndexForward=forward, Limit=4)
            self.assertEqual((len(page["Items"]), "LastEvaluatedKey" in page), (2, True), condition)

    def test_random_writes_and_queries(self):
        self.create_table(self.TABLE)
        rng = random.Random(53)
        s = lambda v: {"S": v}
        found = 0
        for step in range(150):
            item_key = {"pk": s(f"WF#{rng.randrange(5)}"), "sk": s(rng.choice(["RECORD", "INBOX#a", "INBOX#b"]))}
            due = {"due_kind": s(rng.choice(self.KINDS)), "due_at": s(f"2026-12-06T10:{rng.randrange(12):02}")}
            write = rng.randrange(4)
            if write == 0:
                attrs = {**item_key, "status": s(rng.choice(["waiting", "done"])), **(due if rng.random() < 0.7 else {})}
                if rng.random() < 0.3:  # a page ends at 1 MB too
                    attrs["payload"] = s("x" * 350_000)
                condition = {"ConditionExpression": "attribute_not_exists(pk)"} if rng.random() < 0.3 else {}
                self.both("put_item", TableName=self.TABLE, Item=attrs, **condition)
            elif write == 1:
                self.both("update_item", TableName=self.TABLE, Key=item_key,
                          UpdateExpression="SET due_kind = :k, due_at = :a, #s = :s",
                          ExpressionAttributeNames={"#s": "status"},
                          ExpressionAttributeValues={":k": due["due_kind"], ":a": due["due_at"], ":s": s("waiting")})
            elif write == 2:
                self.both("update_item", TableName=self.TABLE, Key=item_key, UpdateExpression="SET #s = :to REMOVE due_kind, due_at",
                          ConditionExpression="#s = :from", ExpressionAttributeNames={"#s": "status"},
                          ExpressionAttributeValues={":from": s("waiting"), ":to": s("done")}, ReturnValuesOnConditionCheckFailure="ALL_OLD")
            else:
                self.both("delete_item", TableName=self.TABLE, Key=item_key, ReturnValues="ALL_OLD")
            for kind in self.KINDS:
                at = lambda: s(f"2026-12-06T10:{rng.randrange(12):02}")  # often an item's own
                condition, values = rng.choice([
                    (" AND due_at <= :a", {":a": at()}), (" AND due_at < :a", {":a": at()}),
                    (" AND due_at >= :a", {":a": at()}), (" AND due_at > :a", {":a": at()}),
                    (" AND due_at = :a", {":a": at()}), (" AND due_at BETWEEN :a AND :b", {":a": at(), ":b": at()}),
                    (" AND begins_with(due_at, :a)", {":a": s(f"2026-12-06T10:{rng.randrange(2)}")}), ("", {})])
                found += len(self.pages(IndexName="by_due", KeyConditionExpression="due_kind = :k" + condition,
                                        ExpressionAttributeValues={":k": s(kind), **values},
                                        ScanIndexForward=rng.random() < 0.5, Limit=rng.randrange(1, 5)))
                found += len(self.pages(IndexName="by_kind", KeyConditionExpression="due_kind = :k",
                                        ExpressionAttributeValues={":k": s(kind)}, Limit=2))
            found += len(self.pages(KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": item_key["pk"]},
                                    ScanIndexForward=rng.random() < 0.5, Limit=rng.randrange(1, 4)))
        self.assertGreater(found, 500, "the Queries found too little to compare")


    def create_odd_table(self, name):
        """A table whose two indexes share a partition key (`k`): `by_at` sorted on `at`, `by_n` on `n`."""
        key = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
        attributes = [{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk", "k", "at")]
        attributes.append({"AttributeName": "n", "AttributeType": "N"})
        indexes = [{"IndexName": index, "Projection": {"ProjectionType": "ALL"},
                    "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}, {"AttributeName": sort, "KeyType": "RANGE"}]}
                   for index, sort in (("by_at", "at"), ("by_n", "n"))]
        for client in self.clients:
            client.create_table(TableName=name, KeySchema=key, AttributeDefinitions=attributes,
                                BillingMode="PAY_PER_REQUEST", GlobalSecondaryIndexes=indexes)

    def test_a_partition_key_value_of_a_type_no_key_has(self):
        """moto stores an item whatever the type of its index key attributes, and a Query finds
        it by any value: a BOOL, or a list, map or set (which Python cannot hash)."""
        self.create_odd_table("odd-partition")
        values = [{"BOOL": True}, {"L": [{"S": "x"}]}, {"M": {"a": {"S": "b"}}}, {"SS": ["q"]}]
        for n, value in enumerate(values):
            self.both("put_item", TableName="odd-partition", Item={"pk": {"S": f"p{n}"}, "sk": {"S": "r"}, "k": value,
                                                                   "at": {"S": "10:00"}, "n": {"N": str(n)}})
        for value in values:
            for index in ("by_at", "by_n"):
                self.both("query", TableName="odd-partition", IndexName=index, KeyConditionExpression="k = :k",
                          ExpressionAttributeValues={":k": value})
            self.both("query", TableName="odd-partition", KeyConditionExpression="pk = :k", ExpressionAttributeValues={":k": value})

    def test_an_index_sort_key_python_cannot_order(self):
        """Two maps as one partition's sort keys: moto stores both items (its Query of that index
        fails, as Python cannot order them), and every other index still holds both."""
        self.create_odd_table("odd-sort")
        query = lambda index: self.both("query", TableName="odd-sort", IndexName=index, KeyConditionExpression="k = :k",
                                        ExpressionAttributeValues={":k": {"S": "a"}})
        query("by_at"), query("by_n")  # each index's partitions are kept from here on
        for n, name in enumerate(("x", "y")):
            self.both("put_item", TableName="odd-sort", Item={"pk": {"S": name}, "sk": {"S": "r"}, "k": {"S": "a"},
                                                              "at": {"M": {name: {"S": "1"}}}, "n": {"N": str(n)}})
        self.assertEqual(len(query("by_n")["Items"]), 2)

    def test_queries_moto_fails_on_an_item_the_key_condition_skips(self):
        """moto's Query goes through every item of the partition and fails (500) on one the key
        condition does not hold for: begins_with on a Number, Limit 0, an ExclusiveStartKey
        without the index's keys. Past the last item of the partition nothing is left to fail on."""
        self.create_odd_table("odd-condition")
        self.both("put_item", TableName="odd-condition", Item={"pk": {"S": "p"}, "sk": {"S": "r"}, "k": {"S": "a"},
                                                               "at": {"S": "10:00"}, "n": {"N": "1"}})
        clients = self.clients
        self.clients = [e.client("dynamodb", parameter_validation=False, retries={"max_attempts": 1}) for e in self.emulators]
        try:
            a, late = {":k": {"S": "a"}}, {":k": {"S": "a"}, ":at": {"S": "99"}}
            self.both("query", TableName="odd-condition", IndexName="by_n", KeyConditionExpression="k = :k AND begins_with(n, :n)",
                      ExpressionAttributeValues={**a, ":n": {"N": "9"}})
            self.both("query", TableName="odd-condition", IndexName="by_at", KeyConditionExpression="k = :k AND at > :at",
                      ExpressionAttributeValues=late, Limit=0)
            self.both("query", TableName="odd-condition", IndexName="by_at", KeyConditionExpression="k = :k AND at > :at",
                      ExpressionAttributeValues=late, ExclusiveStartKey={"pk": {"S": "p"}, "sk": {"S": "r"}})
        finally:
            self.clients = clients

class SqsShortcutsGiveMotosAnswers(BesideMotoAsIs):
    """An SQS send and a delete by receipt handle (module doc, 8): the same sends (standard and
    FIFO with content-based deduplication, one and in batches), receives (one message received
    again once visible: two receipt handles) and deletes (by the current handle, by the old one,
    twice, by one never given) on an emulator with the shortcuts and one without; the same
    answers and the same queue attributes after each."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.clients = [e.client("sqs") for e in cls.emulators]

    def each(self, operation, **request):
        """Each emulator's answer (with its queue's URL put in), or the error's code."""
        answers = []
        for client, queue in zip(self.clients, self.queues):
            try:
                answers.append(getattr(client, operation)(**{"QueueUrl": queue, **request}))
            except client.exceptions.ClientError as error:
                answers.append({"error": error.response["Error"]["Code"]})
        return answers

    def same(self, answers, *fields):
        seen = [{f: a.get(f) for f in ("error", *fields)} for a in answers]
        self.assertEqual(seen[0], seen[1])
        return answers

    def test_sends_receives_and_deletes(self):
        for name, attributes in [("plain", {}), ("ordered.fifo", {"FifoQueue": "true", "ContentBasedDeduplication": "true"})]:
            with self.subTest(name):
                self.queues = [c.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"] for c in self.clients]
                group = {"MessageGroupId": "g"} if attributes else {}
                for n in range(3):
                    self.same(self.each("send_message", MessageBody=f"m{n % 2}", **group))  # m0 twice: deduplicated in FIFO
                self.same(self.each("send_message_batch", Entries=[{"Id": str(n), "MessageBody": f"b{n}", **group} for n in range(3)]))
                first = self.each("receive_message", MaxNumberOfMessages=1, VisibilityTimeout=0)
                again = self.each("receive_message", MaxNumberOfMessages=1, VisibilityTimeout=30)
                bodies = lambda answers: [[m["Body"] for m in a.get("Messages", [])] for a in answers]
                self.assertEqual(bodies(first), bodies(again))  # the same message, received twice
                self.assertEqual(bodies(first)[0], bodies(first)[1])
                handles = lambda answers: [a["Messages"][0]["ReceiptHandle"] for a in answers]
                for handles_now in (handles(first), handles(first), handles(again)):  # the old handle, twice, then the new
                    answers = []
                    for client, queue, handle in zip(self.clients, self.queues, handles_now):
                        client.delete_message(QueueUrl=queue, ReceiptHandle=handle)
                        answers.append(client.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"])
                    counts = [{k: v for k, v in a.items() if k.startswith("Approximate")} for a in answers]
                    self.assertEqual(counts[0], counts[1])
                self.same(self.each("delete_message", ReceiptHandle="never-given"))
                rest = [sorted(m["Body"] for m in a.get("Messages", [])) for a in self.each("receive_message", MaxNumberOfMessages=10)]
                self.assertEqual(rest[0], rest[1])
                self.assertTrue(rest[0], "nothing left to compare")
                # every message now in flight: a long poll waits its second and gets nothing
                self.same(self.each("receive_message", MaxNumberOfMessages=10, WaitTimeSeconds=1), "Messages")
                if not attributes:  # and one sent while it waits wakes it (FIFO: its group is in flight)
                    late = threading.Timer(0.5, lambda: self.each("send_message", MessageBody="late"))
                    late.start()
                    woken = [[m["Body"] for m in a.get("Messages", [])] for a in self.each("receive_message", WaitTimeSeconds=10)]
                    late.join()
                    self.assertEqual(woken, [["late"], ["late"]])


class SqsDeletesAtOnce(unittest.TestCase):
    """Two deletes of one message by its receipt handle at once (a consumer's retry while its
    first delete is still under way): the emulator serves SQS requests on threads with no lock,
    so one delete may run whole between two steps of the other. moto's own delete takes both;
    the shortcut's (module doc, 8) must too. A switch between threads at just that point is
    rare, so here it is made to happen: moto's SQS backend in a process of its own, whose queue
    runs the second delete the first time the first one reads its messages."""

    SCRIPT = r'''
import sys
sys.path.insert(0, sys.argv[2])
import emulator
from moto.sqs.models import SQSBackend
if sys.argv[1] == "shortcuts":
    emulator._sqs_without_queue_scans()
backend = SQSBackend("us-east-1", "123456789012")
queue = backend.create_queue("q")
for n in range(3):
    backend.send_message("q", f"m{n}")
[message] = backend.receive_message("q", 1, 0, 30)
outcomes = []

def delete():
    try:
        backend.delete_message("q", message.receipt_handle)
        outcomes.append("ok")
    except Exception as error:
        outcomes.append(type(error).__name__)

class Interrupted(list):
    """The queue's messages; the first read of them lets the other delete run whole."""
    def interrupt(self):
        if queue._messages is self:
            queue._messages = list(list.__iter__(self))
            delete()
    def __iter__(self):
        self.interrupt()
        return list.__iter__(self)
    def __contains__(self, item):
        self.interrupt()
        return list.__contains__(self, item)

queue._messages = Interrupted(queue._messages)
delete()
print(outcomes, [m.body for m in queue._messages])
'''

    def test_one_message_deleted_twice_at_once(self):
        answers = [subprocess.run([sys.executable, "-c", self.SCRIPT, which, str(EMULATOR.parent)], capture_output=True,
                                  text=True, timeout=120, check=True).stdout.strip() for which in ("shortcuts", "as-is")]
        self.assertEqual(answers[0], answers[1])


class TaskTokens(BesideMotoAsIs):
    """Step Functions and SQS clients of both emulators, and what a call answered."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sfn = [e.client("stepfunctions") for e in cls.emulators]
        cls.sqs = [e.client("sqs") for e in cls.emulators]

    def outcome(self, call):
        try:
            call()
            return "ok"
        except Exception as error:  # botocore's ClientError: the code is the answer compared
            return error.response["Error"]["Code"]


class TaskTokensGiveMotosAnswers(TaskTokens):
    """SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat go to the token's own execution
    (module doc, 8): the same calls, on tokens of running and ended executions and on one never
    issued, on an emulator with the shortcuts and one without; the same answers, and
    the executions end the same."""

    def run_on(self, sfn, sqs):
        """What each call on this emulator answered, and how its executions ended."""
        queue = sqs.create_queue(QueueName="tasks")["QueueUrl"]
        definition = {"StartAt": "Wait", "States": {"Wait": {
            "Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken", "HeartbeatSeconds": 300,
            "Parameters": {"QueueUrl": queue, "MessageBody": {"name.$": "$.name", "token.$": "$$.Task.Token"}}, "End": True}}}
        machine = sfn.create_state_machine(name="waits", definition=json.dumps(definition),
                                           roleArn="arn:aws:iam::123456789012:role/r")["stateMachineArn"]
        runs = {n: sfn.start_execution(stateMachineArn=machine, name=n, input=json.dumps({"name": n}))["executionArn"]
                for n in ("a", "b", "c")}
        tokens, deadline = {}, time.monotonic() + 60
        while len(tokens) < 3 and time.monotonic() < deadline:
            for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
                body = json.loads(m["Body"])
                tokens[body["name"]] = body["token"]
        self.assertEqual(len(tokens), 3, "every execution sent its task")

        def ended(name):
            while sfn.describe_execution(executionArn=runs[name])["status"] == "RUNNING" and time.monotonic() < deadline:
                time.sleep(0.1)
            return sfn.describe_execution(executionArn=runs[name])["status"]

        deadline = time.monotonic() + 60
        answers = [self.outcome(lambda: sfn.send_task_heartbeat(taskToken=tokens["a"])),
                   self.outcome(lambda: sfn.send_task_success(taskToken=tokens["a"], output="{}")), ended("a"),
                   self.outcome(lambda: sfn.send_task_success(taskToken=tokens["a"], output="{}")),
                   self.outcome(lambda: sfn.send_task_heartbeat(taskToken=tokens["a"])),
                   self.outcome(lambda: sfn.send_task_failure(taskToken=tokens["b"], error="E")), ended("b"),
                   self.outcome(lambda: sfn.send_task_failure(taskToken=tokens["b"], error="E")),
                   self.outcome(lambda: sfn.send_task_success(taskToken=tokens["c"], output="{}")), ended("c"),
                   self.outcome(lambda: sfn.send_task_heartbeat(taskToken=tokens["c"])),
                   self.outcome(lambda: sfn.send_task_success(taskToken="never-issued", output="{}"))]
        return answers

    def test_answers_on_tokens_of_running_and_ended_executions(self):
        first, second = (self.run_on(sfn, sqs) for sfn, sqs in zip(self.sfn, self.sqs))
        self.assertEqual(first, second)
        self.assertEqual(first[:3], ["ok", "ok", "SUCCEEDED"])


class HeartbeatWhileAnExecutionStarts(TaskTokens):
    """On emulators of its own: the execution it leaves parsing its definition would fail
    moto's answer to any other test's SendTask* until it is parsed (seconds, on a busy machine)."""

    def test_a_heartbeat_while_another_machines_execution_is_starting(self):
        """moto asks every running execution whether the token is its own, in the order the
        state machines were made, and an execution that has started but not yet parsed its
        definition has no environment to ask (AttributeError, 500): a heartbeat for a token of a
        later machine, sent while an execution of an earlier one is starting, gets moto's 500.
        The shortcut asks the token's own execution only, and answers: the one place it does
        not give moto's answer (module doc, 8), as AWS would not fail there either."""
        role = "arn:aws:iam::123456789012:role/r"
        states = {f"P{i}": {"Type": "Pass", "Next": f"P{i + 1}"} for i in range(1500)}  # parsed in about 0.4 s
        states["P1500"] = {"Type": "Wait", "Seconds": 60, "End": True}

        once = [e.client("stepfunctions", retries={"max_attempts": 1}) for e in self.emulators]
        answers = []
        for sfn, sqs, heartbeat in zip(self.sfn, self.sqs, once):
            slow = sfn.create_state_machine(name="slow-to-parse", definition=json.dumps({"StartAt": "P0", "States": states}),
                                            roleArn=role)["stateMachineArn"]
            queue = sqs.create_queue(QueueName="heartbeats")["QueueUrl"]
            waits = {"StartAt": "W", "States": {"W": {
                "Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken", "HeartbeatSeconds": 300,
                "Parameters": {"QueueUrl": queue, "MessageBody": {"token.$": "$$.Task.Token"}}, "End": True}}}
            machine = sfn.create_state_machine(name="waits-for-heartbeats", definition=json.dumps(waits), roleArn=role)["stateMachineArn"]
            sfn.start_execution(stateMachineArn=machine, name="w")
            token, deadline = None, time.monotonic() + 60
            while token is None and time.monotonic() < deadline:
                for m in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages", []):
                    token = json.loads(m["Body"])["token"]
            self.assertIsNotNone(token, "the execution sent its task")
            sfn.start_execution(stateMachineArn=slow, name="starting")
            answers.append(self.outcome(lambda: heartbeat.send_task_heartbeat(taskToken=token)))  # not retried
        self.assertEqual(answers[0], "ok")  # moto as it is (answers[1]) fails in the race, most of the time


if __name__ == "__main__":
    unittest.main()
