"""Tests that the emulator (tools/emulator.py) answers the machine's own clients only.

Any web page the operator visits could otherwise read the table, live task tokens included, or
reset it: moto answers every Origin with CORS `*`, and every Host (DNS rebinding). These start
the emulator on a free port and try a foreign Origin, a foreign Host and a CORS preflight, and
check that the clients baton has (the SDKs send no Origin; moto's Step Functions interpreter
calls back on localhost:$MOTO_PORT) are still answered; and that `--stats` counts what it
answers. Run with the venv's Python (moto):
python -m unittest tools/emulator_test.py
"""

import http.client
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import unittest

EMULATOR = pathlib.Path(__file__).with_name("emulator.py")
LIST_QUEUES = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0",
               "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, "
                                "SignedHeaders=host, Signature=0"}


class LoopbackOnly(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        ready = os.path.join(cls.dir.name, "url")
        cls.process = subprocess.Popen([sys.executable, str(EMULATOR), "--port", "0", "--stats", "--ready-file", ready],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if cls.process.poll() is not None or time.monotonic() > deadline:
                cls.tearDownClass()
                raise RuntimeError("the emulator did not start")
            time.sleep(0.1)
        with open(ready) as f:
            cls.port = int(f.read().rsplit(":", 1)[1])

    @classmethod
    def tearDownClass(cls):
        cls.process.terminate()
        try:
            cls.process.wait(10)
        except subprocess.TimeoutExpired:  # moto sometimes ignores SIGTERM (docs/EMULATOR_DEVIATIONS.md)
            cls.process.kill()
            cls.process.wait()
        cls.dir.cleanup()

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


if __name__ == "__main__":
    unittest.main()
