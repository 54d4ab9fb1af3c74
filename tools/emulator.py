"""baton's local AWS emulator: moto_server with the two fixes baton needs.

1. Conditional writes are atomic. moto's DynamoDB backend is not thread-safe: with 50
   concurrent conditional UpdateItems on one item, two writers won in 7 of 100 rounds
   (docs/EMULATOR_DEVIATIONS.md). This launcher serializes every DynamoDB request (X-Amz-Target
   `DynamoDB_*`) behind one lock and materialises the response inside it, so a race in a test
   is a real race against correct semantics. `--no-dynamodb-lock` turns the lock off, to show
   the failure it prevents.
2. Step Functions really executes state machines. Execution is switched on before the first
   request, because switching it later hides state machines created earlier.

It also binds first and sets MOTO_PORT to the bound port before moto handles a request: the
Step Functions interpreter calls SQS and DynamoDB back over HTTP on localhost:$MOTO_PORT.

3. Faults on request, for tests that must see what production does when AWS fails. A test posts
   a rule to `/_baton/faults`; matching requests then get an AWS error instead of (`"when":
   "before"`) or after (`"when": "after"`: the request takes effect, then its answer is lost)
   moto's answer:

       POST   /_baton/faults  {"operation": "AWSStepFunctions.SendTaskSuccess",
                               "match": ["k-1"], "times": 3, "when": "before",
                               "status": 500, "code": "InternalServerError"}
       GET    /_baton/faults  every rule, with how often it fired ("hits")
       DELETE /_baton/faults  removes every rule
       DELETE /_baton/faults?id=N  retires rule N (it keeps its hits), leaving the others

   `operation` is the X-Amz-Target of the JSON protocols (DynamoDB, SQS, Step Functions);
   `match` lists substrings that must all be in the request body, so tests sharing one
   emulator only ever fault their own requests; `times` bounds how often the rule fires
   (default: unbounded) and `share` is the fraction of matching requests it fires on (default
   1). Each rule draws from a generator of its own, seeded alike, so which of its requests it
   fires on depends only on how many it has matched, never on what other tests send: a rule
   with `share` 0.5 fires on the third request it matches, and on about half after. The error
   body has the shape AWS's JSON protocol uses (`__type`, `message`).

   The throttling switch: `"throttle": true` answers with the error the service throttles
   with, as AWS sends it: DynamoDB `400 com.amazonaws.dynamodb.v20120810#
   ProvisionedThroughputExceededException`, Step Functions `400 ThrottlingException` ("Rate
   exceeded"), SQS `400 com.amazonaws.sqs#RequestThrottled`. With a `share` below 1 it throttles
   that fraction of the operation's calls, as a busy partition or a token bucket does.

4. A record of the calls each function makes (`--record-calls PATH`), for the policy contract
   (tools/policy-check.py). A request tagged `x-baton-function` (the local runtime tags each
   function's clients, local/src/identity.rs), or signed with an access key id
   `baton.<Function>.<stack>` (a function's real binary under the Lambda Runtime API harness,
   tests/src/functions.rs), is written as one JSON line: the function,
   its stack, the IAM action, and the ARN of the resource it touches. A task token is traced to
   the state machine that issued it, which is what AWS authorizes SendTask* against. `POST
   /_baton/stacks` writes a stack's resolved names and ARNs to the same file.

5. Executions start through an alias. moto 5.2.5 keeps aliases and versions but cannot start
   an execution through an alias ARN (StateMachineDoesNotExist). A StartExecution on
   `...:stateMachine:<name>:<alias>` is started on the machine itself when the alias points at
   its latest version, whose definition is the machine's current one: the same execution AWS
   would start. An alias pointing elsewhere is refused with an error that says so. Nothing
   else is changed. The call is recorded (4) against the state machine's unqualified ARN, with
   the alias as its `qualifier`: AWS authorizes a call made through an alias or a version
   against the state machine's own ARN ("Authorization for versions and aliases", Step
   Functions Developer Guide), so a grant on the alias ARN alone would be denied.

6. API calls counted (`--count-calls`), for `make cost`: every JSON-protocol request (DynamoDB,
   SQS, Step Functions, Secrets Manager) by caller and operation. The caller is the function
   (as in 4), `StepFunctions` for the state machines' own calls (moto's interpreter signs them
   with the access key `ak`), or `other`. DynamoDB calls also keep what they are billed on:
   the item before and after each write (read inside the DynamoDB lock, so nothing comes
   between), whether its condition held, and the items each read returned. moto's own
   `ConsumedCapacity` is a constant (1.0 or 0.5 whatever the size), so the units are computed
   from these items by DynamoDB's rules (tests/src/cost.rs). A ReceiveMessage that returned
   messages is also counted as `sqs:ReceiveMessage (with messages)`: one invocation of the
   function behind the event source mapping.

       GET    /_baton/calls   {"calls": [{"caller", "operation", "count"}], "dynamodb": [...]}
       DELETE /_baton/calls   starts counting again from zero

7. Loopback clients only. moto answers every Origin with CORS `*` and every Host, so any web
   page the operator visits could read the table (live task tokens included) or reset it,
   directly or through a name it rebinds to 127.0.0.1. The emulator refuses a request whose
   `Host` is not a loopback name or address (127.0.0.0/8, localhost, [::1]) on its own port
   (421), and one that carries an `Origin` other than its own loopback origin (403), CORS
   preflights included; it sends no CORS headers at all. The SDK clients send no Origin, and
   moto's Step Functions interpreter calls back on `localhost:$MOTO_PORT`, so both still pass.

8. Costs that do not grow with what moto holds (`quicker_moto`). Under a load of a few hundred
   workflows, most of the emulator's time went to moto doing, on every request, work that grows
   with what it holds (docs/PERFORMANCE.md, "The local stack under load"). Each shortcut gives
   the same answer as the code it replaces, and hands moto the requests it would fail on (a
   Query key of a type no key has, a Limit under 1, a start key moto cannot place):
   - a Query reads the partition it names, of the table or of an index; moto sorted every item
     of the table and kept the partition's, and went through every item of the table for an
     index's. An index's partitions are listed on its first Query and kept as each PutItem,
     UpdateItem and DeleteItem lands. Installed only with the DynamoDB lock on (1): the
     partition is handed to moto's own Query for that one call, which checks, sorts, pages and
     projects as before (tools/emulator_test.py compares its answers with moto's own);
   - an index Query hands moto only the partition's items the key condition on the sort key
     holds for (found by bisection in the partition kept sorted as moto sorts it), and past them
     the next item and the largest: moto's answer depends on those too (it ends a page at any
     item past the last it returns once it has `Limit` items or 1 MB, with a LastEvaluatedKey);
   - an SQS receive reads the queue's retention period from the queue, and a send reads the one
     attribute it needs (`ContentBasedDeduplication`); moto computed every attribute of the queue
     for each message it returned or sent, three of them by scanning every message the queue
     holds. A delete finds its message by receipt handle in a table of the handles given,
     where moto scanned the queue twice. A long poll waiting on a queue asks whether any
     message can be received, not for the list of them, at every send to it;
   - whether a message is visible or delayed reads the clock once, as a float, not through two
     datetimes;
   - the list of moto's services, which it read from the disk (a directory listing and a stat
     per service) on every request, is read once;
   - SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat go to the execution that issued the
     token (a table of the tokens given); moto asked every execution it held, and failed (500)
     when one had started but not yet parsed its definition: the one answer not moto's;
   - the state machines' SQS and DynamoDB clients are made once per region and service, not for
     every task state (a boto3 client is safe to share between threads), each JSONPath of a
     definition is parsed once, not at every evaluation, and each definition is parsed (ANTLR)
     once, not at every execution;
   - the process's own futex hash (Linux 6.16 on) has 65,536 slots, not 16: each execution
     waiting on a task token holds three or four threads blocked on futexes, and every futex
     wake (each hand-over of the interpreter lock) walked the chain of its slot, about a
     thousand waiters at 5,000 executions.
   `--moto-as-is` leaves moto's own code and the kernel's default, to measure what these save.

9. Where the time goes (`--stats`, for `make soak`): each request by caller (as in 6) and
   operation (X-Amz-Target, or `other` for the rest), with how long moto took to answer it, and
   for DynamoDB how long it waited for the lock (1) first. Cheap enough to leave on under load:
   four clock reads and a counter per request.

       GET    /_baton/stats   {"operations": [{"caller", "operation", "count", "seconds", "cpu_seconds"}],
                               "dynamodb_lock": {"requests", "wait_seconds", "held_seconds"},
                               "gc": [{"generation", "collections", "seconds"}], "objects",
                               "futex_hash_slots"}

   `seconds` is request in to answer out (a long poll's wait, and waits for the interpreter lock,
   included); `cpu_seconds` is the CPU the request's own thread used (the state machines'
   interpreter threads are not in any operation's). `gc` is Python's cycle collector by
   generation, `objects` how many objects it tracks, and `futex_hash_slots` the size of the
   process's own futex hash (8; null: the kernel has none).

Usage: python tools/emulator.py [--port 0] [--ready-file PATH]
Prints `ready <url>` on stdout once it accepts requests. Stops on SIGINT or SIGTERM.
"""

import argparse
import bisect
import collections
import functools
import gc
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", help="also write the URL here once ready")
    parser.add_argument("--no-dynamodb-lock", action="store_true")
    parser.add_argument("--record-calls", metavar="PATH", help="append each function's calls here")
    parser.add_argument("--count-calls", action="store_true", help="count API calls, read at /_baton/calls")
    parser.add_argument("--moto-as-is", action="store_true", help="without the shortcuts of module doc 8, to measure them")
    parser.add_argument("--stats", action="store_true", help="time each operation and the DynamoDB lock, read at /_baton/stats")
    args = parser.parse_args()

    from werkzeug.serving import make_server

    # Bind before importing moto so MOTO_PORT is right from the first request on.
    holder = {}
    server = make_server(args.host, args.port, lambda e, s: holder["app"](e, s), threaded=True,
                         request_handler=_request_handler())
    port = server.socket.getsockname()[1]
    os.environ["MOTO_PORT"] = str(port)

    from moto.moto_api._internal.models import moto_api_backend
    from moto.moto_server.threaded_moto_server import (
        DomainDispatcherApplication,
        create_backend_app,
    )

    moto_api_backend.set_config({"stepfunctions": {"execute_state_machine": True}})
    if not args.moto_as_is:
        quicker_moto(lock=not args.no_dynamodb_lock)
    app = DomainDispatcherApplication(create_backend_app)
    if args.count_calls:
        app = Counter(app)
    stats = Stats() if args.stats else None
    app = Faults(app if args.no_dynamodb_lock else serialize_dynamodb(app, stats))
    app = AliasStarts(app)
    app = Recorder(app, args.record_calls) if args.record_calls else app
    app = stats.wrap(app) if stats else app
    holder["app"] = LoopbackOnly(app, port)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    url = f"http://{args.host}:{port}"
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(url)
        os.replace(tmp, args.ready_file)
    print(f"ready {url}", flush=True)
    server.serve_forever()


def _request_handler():
    from moto.server import MotoRequestHandler

    return MotoRequestHandler


def serialize_dynamodb(app, stats=None):
    """Wrap the WSGI app so DynamoDB requests run one at a time, response included."""
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return app(environ, start_response)
        asked = time.perf_counter()
        with lock:
            got = time.perf_counter()
            status, headers, exc_info, body = _call(app, environ)
            if stats:
                stats.locked(got - asked, time.perf_counter() - got)
        start_response(status, headers, exc_info)
        return [body]

    return wrapped


def quicker_moto(lock):
    """Shortcuts through moto's costs that grow with what it holds (module doc, 8)."""
    import moto.backends
    from moto.dynamodb.models.table import Table
    from moto.sqs.models import Message, SQSBackend

    if lock:
        _query_reads_one_partition(Table)

    def within_retention(self, queue_name, message):
        retention = int(self.get_queue(queue_name).message_retention_period)
        return retention + message.sent_timestamp / 1000 > time.time()

    SQSBackend.is_message_valid_based_on_retention_period = within_retention
    Message.visible = property(lambda self: time.time() * 1000.0 > self.visible_at)
    Message.delayed = property(lambda self: time.time() * 1000.0 < self.delayed_until)
    _sqs_without_queue_scans()
    modules = tuple(moto.backends.list_of_moto_modules())
    moto.backends.list_of_moto_modules = lambda: modules
    _share_state_machine_clients()
    _task_tokens_know_their_execution()
    # A JSONPath, parsed once: jsonpath_ng builds its parser (ply's tables) for every parse,
    # and a state machine's paths are few. A parsed path is not changed by evaluating it.
    from moto.stepfunctions.parser.asl.utils import json_path

    json_path.parse = functools.lru_cache(maxsize=4096)(json_path.parse)
    _parse_each_definition_once()
    _futex_hash_for_many_threads()


# prctl(2) PR_FUTEX_HASH (Linux 6.16 on): the process's own futex hash table, and its size.
_PR_FUTEX_HASH, _PR_FUTEX_HASH_SET_SLOTS, _PR_FUTEX_HASH_GET_SLOTS = 78, 1, 2
FUTEX_HASH_SLOTS = 65536


def _futex_hash_for_many_threads():
    """A futex hash table sized for the threads moto runs (module doc, 8). moto's Step Functions
    runs three or four threads for each execution waiting on a task token, 18,000 at 5,000
    executions, each blocked on a futex of its own. Linux 6.16 on gives a threaded process its
    own futex hash, of 16 slots here whatever the threads (6.18), so every futex wake (each
    hand-over of the interpreter lock, each lock released to a waiter) walked a chain of about
    a thousand waiters under a spin lock: `futex_wake` was 18 % of the machine's samples at
    10,000 workflows. 65,536 slots (64 bytes each) keep the chains short. An older kernel,
    without the call, keeps its shared table of 256 slots a CPU."""
    _futex_hash(_PR_FUTEX_HASH_SET_SLOTS, FUTEX_HASH_SLOTS)


def futex_hash_slots():
    """The slots of this process's own futex hash; None: the kernel has none (before 6.16)."""
    slots = _futex_hash(_PR_FUTEX_HASH_GET_SLOTS)
    return slots if slots >= 0 else None


def _futex_hash(operation, slots=0):
    import ctypes

    return ctypes.CDLL(None).prctl(_PR_FUTEX_HASH, operation, slots, 0, 0)


def _query_reads_one_partition(Table):
    """A Query reads the partition it names, of the table or of an index (module doc, 8). moto
    goes through every item of the table for both. Installed only with the DynamoDB lock on (1):
    the partition is handed to moto's own Query for that one call, which still checks every
    condition, sorts, pages and projects as it does."""
    from moto.dynamodb.models import DynamoDBBackend

    original_query = Table.query

    def query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
              projection_expressions, index_name=None, *args, **kwargs):
        def moto_query():
            return original_query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                                  scan_index_forward, projection_expressions, index_name, *args, **kwargs)

        if "all_items" in vars(self):
            return moto_query()
        if index_name is None:
            items = _table_partition(self, hash_key)
        else:
            items = _index_partition(self, index_name, range_comparison, range_objs, scan_index_forward, limit,
                                     exclusive_start_key, kwargs)
        if items is None:
            return moto_query()
        self.all_items = lambda: items
        try:
            return moto_query()
        finally:
            del self.all_items

    Table.query = query
    # Every write moto makes to a table goes through these three; an UpdateItem changes the item
    # in place, so the item's place in each index is read again after it, whatever it did.
    original_put, original_delete, original_update = Table.put_item, Table.delete_item, DynamoDBBackend.update_item

    def put_item(self, *args, **kwargs):
        item = original_put(self, *args, **kwargs)
        _IndexPartitions.place(self, (item.hash_key, item.range_key))
        return item

    def delete_item(self, hash_key, range_key):
        item = original_delete(self, hash_key, range_key)
        _IndexPartitions.place(self, (hash_key, range_key))
        return item

    def update_item(self, table_name, key, *args, **kwargs):
        try:
            return original_update(self, table_name, key, *args, **kwargs)
        finally:
            try:
                table = self.get_table(table_name)
                key = self.get_keys_value(table, key)
            except Exception:  # moto refused the table or the key: it wrote nothing
                table = None
            if table is not None:
                _IndexPartitions.place(table, key)

    Table.put_item, Table.delete_item, DynamoDBBackend.update_item = put_item, delete_item, update_item


def _sqs_without_queue_scans():
    """An SQS send, a delete and a long poll's wait cost the same however many messages the
    queue holds (module doc, 8). moto worked out every attribute of the queue for each message
    sent, to read one (`ContentBasedDeduplication`), three of them by scanning every message;
    it found the message a receipt handle deletes by scanning the queue twice; and a waiting
    receive listed every message it could take at each send to the queue."""
    import weakref

    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Message, Queue, SQSBackend

    sending = threading.local()  # the queue this thread is sending to, if any
    every_attribute = Queue.attributes.fget

    def attributes(queue):
        if getattr(sending, "queue", None) is not queue:
            return every_attribute(queue)
        # All a send reads (moto's send_message, _validate_message, add_message), as moto words it.
        if not queue.fifo_queue:
            return {}
        value = queue.content_based_deduplication
        return {"ContentBasedDeduplication": str(value).lower() if isinstance(value, bool) else value}

    def sends(original):
        def send(self, queue_name, *args, **kwargs):
            before, sending.queue = getattr(sending, "queue", None), self.get_queue(queue_name)
            try:
                return original(self, queue_name, *args, **kwargs)
            finally:
                sending.queue = before

        return send

    Queue.attributes = property(attributes)
    SQSBackend.send_message = sends(SQSBackend.send_message)
    SQSBackend.send_message_batch = sends(SQSBackend.send_message_batch)

    received = weakref.WeakValueDictionary()  # every receipt handle given -> its message
    mark_received = Message.mark_received

    def mark_and_file(self, *args, **kwargs):
        mark_received(self, *args, **kwargs)
        received[self.receipt_handle] = self

    def delete_message(self, receipt_handle):
        if receipt_handle in self.deleted_messages:  # already deleted: nothing to do, as moto
            return
        message = received.get(receipt_handle)
        if message is None or message not in self._messages:  # a Message is equal to itself only
            raise ReceiptHandleIsInvalid()
        self.pending_messages.discard(message)
        self.deleted_messages.update(message.all_receipt_handles)
        # A new list, as moto's: a scan under way keeps its own, and a delete of the same message
        # at the same time (moto serves SQS on threads, unlocked) finds it gone, not an error.
        self._messages = [m for m in self._messages if m is not message]

    Message.mark_received = mark_and_file
    Queue.delete_message = delete_message

    # A long poll waits until a message can be received. moto's test listed every message the
    # queue can give, and ran on every send to it, in each receive waiting on the queue (32
    # workers, 10,000 messages): whether there is one is answered at the first.
    def wait_for_messages(self, timeout):
        with self._messages_lock:
            self._messages_lock.wait_for(lambda: any(m.visible and not m.delayed for m in self._messages), timeout)

    Queue.wait_for_messages = wait_for_messages


def _table_partition(table, hash_key):
    """The items of one partition of the table, in its sort key's order; None: ask moto."""
    if hash_key is None or hash_key.type not in _KEY_TYPES:  # another type: moto's answer, or its failure
        return None
    partition = table.items.get(hash_key)
    if partition is None:
        return []
    if table.range_key_attr:
        return sorted(partition.values(), key=lambda item: item.range_key)
    return [partition]


def _index_partition(table, index_name, range_comparison, range_objs, scan_index_forward, limit, start, kwargs):
    """The items an index Query for one value of the index's partition key may return, and the
    ones moto's answer also depends on (below); None: ask moto (an unknown index, another kind
    of condition). moto then checks, sorts, pages and projects them as it would every item."""
    index = next((i for i in table.all_indexes() if i.name == index_name), None)
    hash_conditions = kwargs.get("hash_key_conditions") or []
    range_conditions = kwargs.get("range_key_conditions") or []
    # moto fails (500) on the first item it compares with a Limit under 1: let it.
    if index is None or len(hash_conditions) != 1 or set(kwargs) - _QUERY_KEYWORDS or (limit is not None and limit < 1):
        return None
    partitions = _IndexPartitions.of(table, index)
    (name, value), = hash_conditions
    if partitions is None or name != partitions.hash_attr or len(range_conditions) > 1 or value.type not in _KEY_TYPES:
        return None
    if range_conditions and range_conditions[0][0] != partitions.range_attr:
        return None
    if start is not None and not partitions.orders(start, value, table):
        return None
    return partitions.candidates(value, range_comparison, range_objs, scan_index_forward)


# What moto's Table.query takes by keyword; another (the legacy KeyConditions' filters) is moto's.
_QUERY_KEYWORDS = {"consistent_read", "filter_expression", "hash_key_conditions", "range_key_conditions"}
_KEY_TYPES = ("S", "N", "B")


class _IndexPartitions:
    """One index's partitions in one table: for each value of its partition key, its items in
    the order moto sorts an index Query's (the index's sort key, then the table's keys), with
    each item's size. Built from every item on the index's first Query, then kept as each write
    lands (`place`)."""

    def __init__(self, index, table):
        self.schema = index.schema
        self.hash_attr = next(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
        self.range_attr = next((k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"), None)
        self.range_type = None
        # Sort keys Python cannot order as moto would (two types, a map): moto answers from then on.
        self.unordered = False
        self.table_items = table.items  # a table restored from a backup gets a new dict: built again
        self.partitions = {}  # value -> [(sort key, size, item)], sorted
        self.entry_of = {}  # (hash key, range key) -> (value, its entry)
        for item in table.all_items():
            self.put((item.hash_key, item.range_key), item)

    @staticmethod
    def of(table, index):
        kept = vars(table).setdefault("_baton_index_partitions", {})
        partitions = kept.get(index.name)
        if partitions is None or partitions.schema != index.schema or partitions.table_items is not table.items:
            partitions = kept[index.name] = _IndexPartitions(index, table)
        return None if partitions.unordered else partitions

    @staticmethod
    def place(table, key):
        """Files the item at `key` as it now stands (or nowhere, gone) in each index kept."""
        kept = vars(table).get("_baton_index_partitions", {})
        if not kept:
            return
        hash_key, range_key = key
        held = table.items.get(hash_key)
        item = held.get(range_key) if table.range_key_attr and held is not None else held
        for partitions in kept.values():
            partitions.remove(key)
            if item is not None:
                partitions.put(key, item)

    def put(self, key, item):
        """Files `item` under its partition, if the index holds it (every key attribute there)."""
        value = item.attrs.get(self.hash_attr)
        if self.unordered or value is None or value.type not in _KEY_TYPES:  # only a key's types match
            return
        sort = ()
        if self.range_attr is not None:
            in_range = item.attrs.get(self.range_attr)
            if in_range is None:
                return
            self.range_type = self.range_type or in_range.type
            if in_range.type != self.range_type or in_range.type not in _KEY_TYPES:
                self.unordered = True
                return
            sort = (in_range.cast_value,)
        table_key = (item.hash_key.cast_value, None if item.range_key is None else item.range_key.cast_value)
        entry = (sort + table_key, item.size(), item)
        partition = self.partitions.setdefault(value, [])
        partition.insert(bisect.bisect_left(partition, entry[0], key=_sort_key), entry)
        self.entry_of[key] = (value, entry)

    def remove(self, key):
        held = self.entry_of.pop(key, None)
        if held is not None and not self.unordered:
            value, entry = held
            partition = self.partitions[value]
            del partition[bisect.bisect_left(partition, entry[0], key=_sort_key)]
            if not partition:
                del self.partitions[value]

    def orders(self, start, value, table):
        """Whether moto can place ExclusiveStartKey `start` among this partition's items without
        failing: every key it sorts by there, of the types it compares them with."""
        types = {self.hash_attr: value.type, self.range_attr: self.range_type,
                 table.hash_key_attr: table.hash_key_type, table.range_key_attr: table.range_key_type}
        return all(isinstance(start.get(name), dict) and list(start[name]) == [kind]
                   for name, kind in types.items() if name is not None and kind is not None)

    def candidates(self, value, comparison, objs, forward):
        """The items of partition `value` the key condition on the sort key holds for (a run, in
        this order), and past them in the Query's direction the next item and the largest: moto
        ends a page at any item past the last it returns, once it has `Limit` items or at 1 MB,
        and gives LastEvaluatedKey, so its answer depends on them too; the items before the run
        it only steps over. None: a comparison this does not know, or of another type."""
        partition = self.partitions.get(value, [])
        bounds = self.run(partition, comparison, objs) if comparison else (0, len(partition))
        if bounds is None:
            return None
        lo, hi = bounds
        past = partition[hi:] if forward else partition[:lo]
        if past:
            beyond = [past[0] if forward else past[-1], max(past, key=lambda entry: entry[1])]
        else:
            beyond = []
        return [entry[2] for entry in partition[lo:hi]] + [entry[2] for entry in beyond]

    def run(self, partition, comparison, objs):
        """[lo, hi) of the entries whose sort key meets `comparison` on `objs`, as moto's
        `DynamoType.compare` has it (the same values compared), or None."""
        if self.range_attr is None or any(o.type != self.range_type for o in objs):
            return None
        values = [o.cast_value for o in objs]
        left = lambda v: bisect.bisect_left(partition, v, key=_range_value)
        right = lambda v: bisect.bisect_right(partition, v, key=_range_value)
        end = len(partition)
        bounds = {
            "EQ": lambda v: (left(v), right(v)), "LT": lambda v: (0, left(v)), "LE": lambda v: (0, right(v)),
            "GT": lambda v: (right(v), end), "GE": lambda v: (left(v), end),
            "BETWEEN": lambda a, b: (left(a), max(left(a), right(b))),
        }
        name = {"=": "EQ", "<": "LT", "<=": "LE", ">": "GT", ">=": "GE"}.get(comparison, comparison)
        if name == "BEGINS_WITH" and len(values) == 1 and self.range_type != "N":  # on a number moto fails
            lo = hi = left(values[0])
            while hi < end and partition[hi][2].attrs[self.range_attr].compare(comparison, objs):
                hi += 1
            return lo, hi
        if name not in bounds:
            return None
        try:
            return bounds[name](*values)
        except TypeError:  # a wrong number of values: moto says what is wrong
            return None


def _sort_key(entry):
    return entry[0]


def _range_value(entry):
    return entry[0][0]


def _parse_each_definition_once():
    """A state machine's definition, parsed by ANTLR once, not for every execution (module doc,
    8). Each execution still gets its own program (moto's preprocessor visits the parse tree,
    which it only reads), so no execution shares state with another."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    original = AmazonStateLanguageParser.parse
    trees = {}

    def parse(definition):
        tree = trees.get(definition)
        if tree is None:
            program, tree = original(definition)
            trees[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    AmazonStateLanguageParser.parse = staticmethod(parse)


def _task_tokens_know_their_execution():
    """SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat go to the execution that issued
    the token (module doc, 8). moto asked every execution it holds, running or not, whether the
    token was its own; a token is issued by one execution only, so asking that one gives the same
    answer, InvalidToken included. A token this did not see issued is looked for as moto does."""
    import weakref

    from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackPoolManager
    from moto.stepfunctions.parser.backend.execution import Execution
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend as Backend

    pools = weakref.WeakValueDictionary()  # task token -> the callback pool it was added to
    only = threading.local()  # the executions this thread's request may concern

    def files(add):
        def add_and_file(self, callback_id, *args, **kwargs):
            endpoint = add(self, callback_id, *args, **kwargs)
            pools[callback_id] = self
            return endpoint

        return add_and_file

    CallbackPoolManager.add = files(CallbackPoolManager.add)
    CallbackPoolManager.add_activity_task = files(CallbackPoolManager.add_activity_task)

    worker_of = Execution._get_start_execution_worker
    environment_of = ExecutionWorker._get_evaluation_environment

    def worker(self):
        made = worker_of(self)
        made.baton_execution = weakref.ref(self)
        return made

    def environment(self):
        made = environment_of(self)
        made.callback_pool_manager.baton_execution = getattr(self, "baton_execution", None)
        return made

    Execution._get_start_execution_worker = worker
    ExecutionWorker._get_evaluation_environment = environment

    get_executions = Backend._get_executions

    def executions(self, execution_status=None):
        if getattr(only, "executions", None) is None:
            return get_executions(self, execution_status)
        return [e for e in only.executions if execution_status is None or e.status == execution_status]

    Backend._get_executions = executions

    def to_its_execution(answer):
        def answered(self, task_token, *args, **kwargs):
            pool = pools.get(task_token)
            owner = getattr(pool, "baton_execution", None)
            execution = owner() if owner is not None else None
            # Still one of this backend's (moto's own list), found by identity: no Python loop.
            if execution is None or not any(execution in sm.executions for sm in self.state_machines):
                return answer(self, task_token, *args, **kwargs)
            only.executions = [execution]
            try:
                return answer(self, task_token, *args, **kwargs)
            finally:
                only.executions = None

        return answered

    for name in ("send_task_success", "send_task_failure", "send_task_heartbeat"):
        setattr(Backend, name, to_its_execution(getattr(Backend, name)))


def _share_state_machine_clients():
    """The state machines' boto3 clients, made once per region and service (module doc, 8)."""
    import sys

    from moto.stepfunctions.parser.asl.utils import boto_client

    original = boto_client.boto_client_for
    clients = {}
    lock = threading.Lock()

    # moto 5.2.5's `boto_client_for` takes the state's credentials and does not use them: every
    # client signs with the same fixed key, so one per region and service is the same client.
    def shared(region, service, state_credentials=None):
        with lock:
            if (region, service) not in clients:
                clients[(region, service)] = original(region, service, state_credentials)
            return clients[(region, service)]

    # The modules that import it later get this one; those that did already are mended.
    boto_client.boto_client_for = shared
    for module in list(sys.modules.values()):
        if getattr(module, "boto_client_for", None) is original:
            module.boto_client_for = shared


class Stats:
    """Requests by operation with the time moto took, and the DynamoDB lock's (module doc, 9)."""

    PATH = "/_baton/stats"

    def __init__(self):
        self.lock = threading.Lock()
        self.operations = collections.defaultdict(lambda: [0, 0.0, 0.0])
        self.dynamodb_lock = [0, 0.0, 0.0]
        # Python's cycle collector, by generation: collections and seconds. A full collection
        # walks every object the process holds, so its cost grows with what moto keeps.
        self.gc = [[0, 0.0] for _ in range(3)]
        self.gc_began = None
        gc.callbacks.append(self.collected)

    def collected(self, phase, info):
        # Called by the thread that triggered the collection, with the GIL held throughout.
        if phase == "start":
            self.gc_began = time.perf_counter()
        elif self.gc_began is not None:
            entry = self.gc[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - self.gc_began

    def wrap(self, app):
        def timed(environ, start_response):
            if environ.get("PATH_INFO") == self.PATH:
                return self.admin(environ, start_response)
            operation = environ.get("HTTP_X_AMZ_TARGET") or "other"
            caller = _who(environ)
            began, cpu = time.perf_counter(), time.thread_time()
            status, headers, exc_info, body = _call(app, environ)
            took, cpu = time.perf_counter() - began, time.thread_time() - cpu
            with self.lock:
                entry = self.operations[(caller, operation)]
                entry[0] += 1
                entry[1] += took
                entry[2] += cpu
            start_response(status, headers, exc_info)
            return [body]

        return timed

    def locked(self, wait, held):
        with self.lock:
            self.dynamodb_lock[0] += 1
            self.dynamodb_lock[1] += wait
            self.dynamodb_lock[2] += held

    def admin(self, environ, start_response):
        if environ.get("REQUEST_METHOD") != "GET":
            return _json(start_response, 405, {"error": "GET only"})
        with self.lock:
            operations = [{"caller": c, "operation": o, "count": n, "seconds": round(t, 6),
                           "cpu_seconds": round(u, 6)}
                          for (c, o), (n, t, u) in sorted(self.operations.items())]
            requests, wait, held = self.dynamodb_lock
        collector = [{"generation": g, "collections": n, "seconds": round(t, 6)}
                     for g, (n, t) in enumerate(self.gc)]
        return _json(start_response, 200, {"operations": operations, "dynamodb_lock": {
            "requests": requests, "wait_seconds": round(wait, 6), "held_seconds": round(held, 6)},
            "gc": collector, "objects": len(gc.get_objects()), "futex_hash_slots": futex_hash_slots()})


class LoopbackOnly:
    """Answers the machine's own clients only, with no CORS headers (see the module doc, 7)."""

    def __init__(self, app, port):
        self.app = app
        self.port = port

    def __call__(self, environ, start_response):
        host = environ.get("HTTP_HOST", "")
        if not self.own_host(host):
            return _json(start_response, 421, {"__type": "MisdirectedRequest",
                                               "message": f"the emulator answers loopback hosts on port {self.port} only"})
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not (origin.startswith("http://") and self.own_host(origin[len("http://"):])):
            return _json(start_response, 403, {"__type": "ForeignOrigin",
                                               "message": "the emulator answers no other site's page"})

        def without_cors(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, without_cors)

    def own_host(self, host):
        """Whether `host` (a Host header, or an origin without its scheme) is loopback on our port."""
        import ipaddress

        name, sep, port = host.rpartition(":")
        if not sep or port != str(self.port):
            return False
        if name == "localhost" or name == "[::1]":
            return True
        try:
            return ipaddress.IPv4Address(name) in ipaddress.IPv4Network("127.0.0.0/8")
        except ValueError:
            return False


class Faults:
    """The fault switch (see the module doc): a WSGI wrapper around the emulator."""

    PATH = "/_baton/faults"

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.rules = []
        # Each rule's own generator, by rule id (see `share` in the module doc).
        self.draws = {}

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == self.PATH:
            return self.admin(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        with self.lock:
            candidates = [r for r in self.rules if r["operation"] == target and r["times"] != 0]
        if not candidates:
            return self.app(environ, start_response)
        body = _read_body(environ)
        text = body.decode("utf-8", "replace")
        rule = None
        with self.lock:
            for r in candidates:
                if r["times"] != 0 and all(m in text for m in r["match"]) and self.draws[r["id"]].random() < r["share"]:
                    r["times"] -= 1
                    r["hits"] += 1
                    rule = r
                    break
        if rule is None:
            return self.app(environ, start_response)
        if rule["when"] == "after":
            result = self.app(environ, lambda *_: (lambda _data: None))
            try:
                b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close:
                    close()
        return _json(start_response, rule["status"], {"__type": rule["code"], "message": rule["message"]},
                     [("x-amzn-ErrorType", rule["code"])])

    def admin(self, environ, start_response):
        method = environ.get("REQUEST_METHOD")
        if method == "GET":
            with self.lock:
                return _json(start_response, 200, {"rules": self.rules})
        if method == "DELETE":
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            with self.lock:
                if "id" in query:
                    # One rule retired: it fires no more, and keeps its hits for GET.
                    for r in self.rules:
                        if str(r["id"]) in query["id"]:
                            r["times"] = 0
                    return _json(start_response, 200, {"rules": self.rules})
                self.rules = []
                self.draws = {}
            return _json(start_response, 200, {"rules": []})
        if method != "POST":
            return _json(start_response, 405, {"error": f"{method} is not supported"})
        try:
            spec = json.loads(_read_body(environ) or b"{}")
            if spec.get("throttle"):
                spec = {**_throttle_shape(str(spec["operation"])), **spec}
            rule = {
                "operation": str(spec["operation"]),
                "match": [str(m) for m in spec.get("match", [])],
                "times": int(spec.get("times", -1)),
                "share": float(spec.get("share", 1.0)),
                "when": spec.get("when", "before"),
                "status": int(spec.get("status", 500)),
                "code": str(spec.get("code", "InternalServerError")),
                "message": str(spec.get("message", "injected by tools/emulator.py")),
                "hits": 0,
            }
            if rule["when"] not in ("before", "after"):
                raise ValueError("when must be before or after")
        except (KeyError, ValueError, TypeError) as e:
            return _json(start_response, 400, {"error": f"bad fault rule: {e!r}"})
        with self.lock:
            rule["id"] = len(self.rules) + 1
            self.rules.append(rule)
            self.draws[rule["id"]] = random.Random(0)
        return _json(start_response, 200, rule)


class Counter:
    """Counts API calls, and keeps the items DynamoDB bills on (see the module doc, 6).

    It sits inside the DynamoDB lock: the reads of an item before and after a write are
    requests of its own to moto, made while nothing else can write."""

    PATH = "/_baton/calls"
    WRITES = ("PutItem", "UpdateItem", "DeleteItem")

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.dynamodb = []
        self.key_names = {}

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == self.PATH:
            return self.admin(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target:
            return self.app(environ, start_response)
        service, _, operation = target.partition(".")
        service = {"AmazonSQS": "sqs", "AWSStepFunctions": "states"}.get(service, service)
        if service.startswith("DynamoDB_"):
            service = "dynamodb"
        caller = _who(environ)
        with self.lock:
            key = (caller, f"{service}:{operation}")
            self.counts[key] += 1
        if operation == "ReceiveMessage":
            # A receive that returns messages is one invocation of the mapping's function.
            status, headers, body = self.call(self.app, environ)
            if json.loads(body or b"{}").get("Messages"):
                with self.lock:
                    key = (caller, "sqs:ReceiveMessage (with messages)")
                    self.counts[key] += 1
            start_response(status, headers)
            return [body]
        if service != "dynamodb":
            return self.app(environ, start_response)
        request = json.loads(_read_body(environ) or b"{}")
        table = request.get("TableName", "")
        item_key = None
        before = None
        if operation in self.WRITES:
            item_key = request.get("Key") or self.key_of(environ, table, request.get("Item", {}))
            before = self.get_item(environ, table, item_key)
        status, headers, body = self.call(self.app, environ)
        event = {"caller": caller, "operation": operation, "table": table, "ok": status.startswith("200")}
        if operation in self.WRITES:
            event.update(before=before, after=self.get_item(environ, table, item_key))
        elif event["ok"] and operation in ("GetItem", "Query", "Scan"):
            answer = json.loads(body or b"{}")
            event.update(items=[answer["Item"]] if "Item" in answer else answer.get("Items", []),
                         key=request.get("Key"), consistent=bool(request.get("ConsistentRead")),
                         index=request.get("IndexName"),
                         prefix=request.get("ExpressionAttributeValues", {}).get(":prefix", {}).get("S"),
                         select=request.get("Select"), scanned=answer.get("ScannedCount"))
        with self.lock:
            self.dynamodb.append(event)
        start_response(status, headers)
        return [body]

    def key_of(self, environ, table, item):
        """The primary key attributes of `item`, by the table's key schema (cached)."""
        if table not in self.key_names:
            status, _, body = self.call(self.app, self.sub_request(environ, "DescribeTable", {"TableName": table}))
            schema = json.loads(body).get("Table", {}).get("KeySchema", []) if status.startswith("200") else []
            self.key_names[table] = [k["AttributeName"] for k in schema]
        return {name: item[name] for name in self.key_names[table] if name in item}

    def get_item(self, environ, table, key):
        if not key:
            return None
        status, _, body = self.call(
            self.app, self.sub_request(environ, "GetItem", {"TableName": table, "Key": key, "ConsistentRead": True}))
        return json.loads(body).get("Item") if status.startswith("200") else None

    @staticmethod
    def sub_request(environ, operation, doc):
        import io

        data = json.dumps(doc).encode()
        sub = dict(environ)
        sub.update({"wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data)),
                    "HTTP_X_AMZ_TARGET": f"DynamoDB_20120810.{operation}"})
        return sub

    @staticmethod
    def call(app, environ):
        status, headers, _, body = _call(app, environ)
        return status, headers, body

    def admin(self, environ, start_response):
        method = environ.get("REQUEST_METHOD")
        with self.lock:
            if method == "DELETE":
                self.counts, self.dynamodb = collections.Counter(), []
            elif method != "GET":
                return _json(start_response, 405, {"error": f"{method} is not supported"})
            calls = [{"caller": c, "operation": o, "count": n} for (c, o), n in sorted(self.counts.items())]
            return _json(start_response, 200, {"calls": calls, "dynamodb": list(self.dynamodb)})


class AliasStarts:
    """Starts an execution asked through an alias on the machine it points at (module doc, 5)."""

    TARGET = "AWSStepFunctions.StartExecution"

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET") != self.TARGET:
            return self.app(environ, start_response)
        import io

        body = json.loads(_read_body(environ) or b"{}")
        arn = str(body.get("stateMachineArn", ""))
        parts = arn.split(":")
        if len(parts) != 8 or parts[7].isdigit():
            return self.app(environ, start_response)
        machine = ":".join(parts[:7])
        problem = _alias_problem(arn, machine, _region(environ))
        if problem:
            return _json(start_response, 400, {"__type": "ValidationException", "message": problem},
                         [("x-amzn-ErrorType", "ValidationException")])
        body["stateMachineArn"] = machine
        data = json.dumps(body).encode()
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        return self.app(environ, start_response)


def _alias_problem(alias_arn, machine_arn, region):
    """Why an execution cannot start through `alias_arn` here, or None."""
    from moto.stepfunctions.responses import get_backend

    backend = get_backend(ACCOUNT, region)
    try:
        alias = backend.describe_state_machine_alias(alias_arn)
        machine = backend.describe_state_machine(machine_arn)
    except Exception as e:  # the alias or the machine does not exist: say so
        return f"cannot start through {alias_arn}: {e}"
    routes = alias.routing_configuration
    latest = machine.latest_version
    if len(routes) != 1 or latest is None or routes[0]["stateMachineVersionArn"] != latest.arn:
        return (f"tools/emulator.py starts executions through an alias only when it points at the "
                f"latest version alone; {alias_arn} routes {routes}")
    return None


class Recorder:
    """Writes down the calls of the local functions (see the module doc, 4)."""

    STACKS = "/_baton/stacks"

    def __init__(self, app, path):
        self.app = app
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1)

    def write(self, doc):
        with self.lock:
            self.file.write(json.dumps(doc, sort_keys=True) + "\n")

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == self.STACKS and environ.get("REQUEST_METHOD") == "POST":
            try:
                stack = json.loads(_read_body(environ))
                self.write({"kind": "stack", **stack})
                return _json(start_response, 200, {"recorded": stack.get("stack")})
            except ValueError as e:
                return _json(start_response, 400, {"error": f"not a stack: {e}"})
        function, stack = _caller(environ)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if function and target:
            body = {}
            try:
                body = json.loads(_read_body(environ) or b"{}")
                action, resources = _action_and_resources(target, body, _region(environ))
            except Exception as e:  # a call that cannot be read is recorded as such, not dropped
                action, resources = target, [f"unreadable: {e!r}"]
            qualifier = _qualifier(target, body)
            for resource in resources:
                call = {"kind": "call", "function": function, "stack": stack,
                        "action": action, "resource": resource}
                if qualifier:
                    call["qualifier"] = qualifier
                self.write(call)
        return self.app(environ, start_response)


ACCOUNT = "123456789012"


# How each service answers when it throttles (X-Amz-Target prefix -> status, code, message).
_THROTTLES = [
    ("DynamoDB_", 400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
     "The level of configured provisioned throughput for the table was exceeded. Consider increasing "
     "your provisioning level with the UpdateTable API."),
    ("AWSStepFunctions.", 400, "ThrottlingException", "Rate exceeded"),
    ("AmazonSQS.", 400, "com.amazonaws.sqs#RequestThrottled", "Request is throttled."),
]


def _throttle_shape(operation):
    for prefix, status, code, message in _THROTTLES:
        if operation.startswith(prefix):
            return {"status": status, "code": code, "message": message}
    raise ValueError(f"no throttling shape for {operation}")


def _caller(environ):
    """The function making a call, and its stack: from the local runtime's headers, or, for a
    function's real binary (the Lambda Runtime API tests), from its access key id, which the
    harness sets to `baton.<Function>.<stack>` (an SDK sends no custom header of its own)."""
    function = environ.get("HTTP_X_BATON_FUNCTION")
    if function:
        return function, environ.get("HTTP_X_BATON_STACK", "")
    auth = environ.get("HTTP_AUTHORIZATION", "")
    marker = "Credential=baton."
    if marker in auth:
        parts = auth.split(marker, 1)[1].split("/", 1)[0].split(".")
        if len(parts) == 2:
            return parts[0], parts[1]
    return None, ""


def _who(environ):
    """Who makes a call, as 6 and 9 count it: the function (as `_caller` finds it), `StepFunctions`
    for the state machines' own calls (moto's interpreter signs them with the access key `ak`), or
    `other`."""
    function = _caller(environ)[0]
    if function:
        return function
    return "StepFunctions" if "Credential=ak/" in environ.get("HTTP_AUTHORIZATION", "") else "other"


def _region(environ):
    auth = environ.get("HTTP_AUTHORIZATION", "")
    marker = "Credential="
    if marker in auth:
        scope = auth.split(marker, 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 3:
            return scope[2]
    return "us-east-1"


def _action_and_resources(target, body, region):
    """The IAM action of a JSON-protocol request, and the ARNs it is authorized against."""
    service, _, operation = target.partition(".")
    if service.startswith("DynamoDB_"):
        arn = f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{body['TableName']}"
        if body.get("IndexName"):
            arn += f"/index/{body['IndexName']}"
        return f"dynamodb:{operation}", [arn]
    if service == "AmazonSQS":
        name = body["QueueUrl"].rstrip("/").rsplit("/", 1)[1]
        return f"sqs:{operation}", [f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"]
    if service == "AWSStepFunctions":
        if "stateMachineArn" in body:
            # Through an alias or a version, authorized against the machine itself (module doc, 5).
            return f"states:{operation}", [":".join(body["stateMachineArn"].split(":")[:7])]
        if "executionArn" in body:
            return f"states:{operation}", [body["executionArn"]]
        if "taskToken" in body:
            return f"states:{operation}", [_token_owner(body["taskToken"], region)]
        return f"states:{operation}", ["*"]
    if service == "secretsmanager":
        return f"secretsmanager:{operation}", [_secret_arn(body["SecretId"], region)]
    return target, ["*"]


def _qualifier(target, body):
    """The alias or version a Step Functions call names after the state machine, or None."""
    parts = str(body.get("stateMachineArn", "")).split(":") if target.startswith("AWSStepFunctions.") else []
    return parts[7] if len(parts) == 8 else None


def _token_owner(token, region):
    """The state machine whose execution issued `token` (moto keeps every token it issued)."""
    from moto.stepfunctions.responses import get_backend

    for execution in get_backend(ACCOUNT, region)._get_executions():
        env = getattr(getattr(execution, "exec_worker", None), "env", None)
        if env is not None and env.callback_pool_manager.get(token) is not None:
            return execution.state_machine_arn
    return "unknown-task-token"


def _secret_arn(secret_id, region):
    if secret_id.startswith("arn:"):
        return secret_id
    from moto.secretsmanager.models import secretsmanager_backends

    secrets = secretsmanager_backends[ACCOUNT][region].secrets
    return secrets[secret_id].arn if secret_id in secrets else f"unknown-secret:{secret_id}"


def _call(app, environ):
    """Runs the wrapped app to the end: (status, headers, exc_info, body)."""
    captured = []

    def capture(status, headers, exc_info=None):
        captured.append((status, headers, exc_info))
        return lambda _data: None

    result = app(environ, capture)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close:
            close()
    status, headers, exc_info = captured[0]
    return status, headers, exc_info, body


def _read_body(environ) -> bytes:
    """Reads the request body and puts it back, so the wrapped app still sees it."""
    import io

    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _json(start_response, status, doc, headers=()):
    from http import HTTPStatus

    body = json.dumps(doc).encode()
    start_response(f"{status} {HTTPStatus(status).phrase}",
                   [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body))), *headers])
    return [body]


if __name__ == "__main__":
    sys.exit(main())
