"""What a token holder (a `read` token is enough) can make the MCP server spend, issue 30 (4)
and (6), run against `sion mcp --listen` with plain HTTP: tool calls in flight are bounded
(`--max-calls`), so however many clients recall at once the server's memory stays bounded and
a writer's `remember` still gets through; a call that finds no place in time is refused as
busy; sessionless requests (MCP 2026-07-28) hold a place among the sessions while served, so
`--max-sessions` bounds them too; and one token cannot take every session
(`--max-sessions-per-token`).

    SION_BIN=target/debug/sion python3 -m unittest discover -s tests/mcp -v
"""

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from test_access import INIT, Server, post, post_once, rss_kib
from test_mcp import T0, observation

READ, REMEMBER = "r" * 48, "w" * 48
# The per-request metadata of MCP 2026-07-28, whose requests carry no session.
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bounds", "version": "0"}}
ATOMS = 20_000
EVERYTHING = {"frame": "map", "min": [-10**9] * 3, "max": [10**9] * 3, "from": T0, "to": T0 + 10**9}


def sessionless(port, tool, args, token, timeout=120):
    """A 2026-07-28 `tools/call` with no session, on a connection of its own: (status, the
    tool's answer or None, what it said)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": META}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": tool}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        raw = r.read().decode()
    finally:
        conn.close()
    if r.status != 200:
        return r.status, None, raw
    for line in raw.splitlines():
        if line.startswith("data: {"):
            msg = json.loads(line[len("data: "):])
            result = msg.get("result") or {}
            text = (result.get("content") or [{}])[0].get("text", json.dumps(msg))
            return 200, result, text
    return 200, None, raw


class Bounds(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        """A memory of 20,000 committed atoms (an everything-recall answers all of them, the
        most a recall gives), written once and copied for each test."""
        cls.base = tempfile.mkdtemp(prefix="sion-mcp-bounds-")
        cls.tokens = os.path.join(cls.base, "tokens")
        with open(cls.tokens, "w") as f:
            f.write(f"read {READ}\nremember {REMEMBER}\n")
        os.chmod(cls.tokens, 0o600)
        server = Server(cls.base, "--tokens", cls.tokens)
        try:
            for start in range(0, ATOMS, 2000):
                atoms = [observation((i % 200) * 1000, i, f"pallet-{i}") for i in range(start, start + 2000)]
                status, result, text = sessionless(server.port, "sion_memory_remember", {"atoms": atoms}, REMEMBER)
                assert status == 200 and not result.get("isError"), text
            status, result, text = sessionless(server.port, "sion_memory_commit", {}, REMEMBER)
            assert status == 200 and not result.get("isError"), text
        finally:
            server.stop()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.base, ignore_errors=True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sion-mcp-bounds-")
        shutil.copytree(os.path.join(self.base, "mem"), os.path.join(self.tmp, "mem"), symlinks=True)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_concurrent_recalls_are_bounded_and_a_writer_gets_through(self):
        n = int(os.environ.get("SION_MCP_RECALLS", "200"))
        server = Server(self.tmp, "--tokens", self.tokens)
        try:
            pid = server.proc.pid
            status, result, text = sessionless(server.port, "sion_memory_open", {}, READ)
            self.assertEqual(status, 200, text)
            before = rss_kib(pid)
            peak = [before]
            done = threading.Event()

            def watch():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_kib(pid))
                    time.sleep(0.02)

            watcher = threading.Thread(target=watch)
            watcher.start()
            outcomes = {}
            wrote = {}
            try:
                def writer():
                    time.sleep(1)
                    t = time.monotonic()
                    wrote["answer"] = sessionless(server.port, "sion_memory_remember",
                                                  {"atoms": [observation(0, ATOMS + 1, "fire-exit-3-clear")]}, REMEMBER)
                    wrote["s"] = time.monotonic() - t

                w = threading.Thread(target=writer)
                w.start()
                with ThreadPoolExecutor(max_workers=n) as pool:
                    for status, result, text in pool.map(
                            lambda _: sessionless(server.port, "sion_memory_recall", EVERYTHING, READ), range(n)):
                        kind = (status, "busy" if "busy, retry" in text else "error" if result and result.get("isError") else "ok")
                        outcomes[kind] = outcomes.get(kind, 0) + 1
                w.join()
            finally:
                done.set()
                watcher.join()
            print(f"\n  {n} concurrent everything-recalls (20,000 atoms): RSS {before} KiB, peak {peak[0]} KiB; "
                  f"{outcomes}; a remember meanwhile took {wrote.get('s', 0):.2f} s")
            # Some were answered, the rest refused as busy or over the sessions' bound: none failed otherwise.
            self.assertGreater(outcomes.get((200, "ok"), 0), 0, outcomes)
            self.assertEqual(set(outcomes) - {(200, "ok"), (200, "busy"), (503, "ok")}, set(), outcomes)
            # Two provers at once (about 280 MiB over the start, measured; unbounded, 16 recalls at
            # once took 840 MiB over it, 200 would take gigabytes).
            self.assertLess(peak[0] - before, 640 << 10, f"RSS {before} KiB -> peak {peak[0]} KiB")
            status, result, text = wrote["answer"]
            self.assertEqual(status, 200, text)
            self.assertFalse(result.get("isError"), text)
            self.assertLess(wrote["s"], 10, "the writer's remember waited behind the recalls")
        finally:
            server.stop()

    def test_a_call_that_finds_no_place_is_refused_as_busy(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--max-calls", "1", "--call-wait-s", "0")
        try:
            # Eight everything-recalls at once (each proves 20,000 atoms; a recall answers with a
            # page, so none is slow enough alone to be waited for): one place, no wait.
            with ThreadPoolExecutor(max_workers=8) as pool:
                answers = list(pool.map(lambda _: sessionless(server.port, "sion_memory_recall", EVERYTHING, READ), range(8)))
            busy = [text for _, result, text in answers if result.get("isError")]
            served = [text for _, result, text in answers if not result.get("isError")]
            self.assertTrue(busy and served, [t[:120] for _, _, t in answers])
            self.assertTrue(all(status == 200 for status, _, _ in answers))
            for text in busy:
                self.assertIn("busy, retry", text)
                self.assertIn("at most 1 tool calls", text)
            # Its place given back, the next call is served.
            status, result, text = sessionless(server.port, "sion_memory_open", {}, READ)
            self.assertFalse(result.get("isError"), text)
        finally:
            server.stop()

    def test_sessionless_requests_count_against_the_sessions_bound(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--max-sessions", "2")
        try:
            # Sessionless calls are served while there is room, and the roles hold on them.
            status, result, text = sessionless(server.port, "sion_memory_open", {}, READ)
            self.assertEqual(status, 200, text)
            self.assertFalse(result.get("isError"), text)
            status, result, text = sessionless(server.port, "sion_memory_remember", {"atoms": []}, READ)
            self.assertTrue(result.get("isError"), text)
            self.assertIn("needs a token with the role remember", text)
            # Two sessions open (one each): the bound. A sessionless call is refused as an
            # initialize is.
            conn = server.conn()
            sessions = {}
            for token in [READ, REMEMBER]:
                status, session, _ = post(conn, INIT, token)
                self.assertEqual(status, 200)
                sessions[token] = session
            for token in [READ, REMEMBER]:
                status, _, text = sessionless(server.port, "sion_memory_open", {}, token)
                self.assertEqual(status, 503, text)
                self.assertIn("sessions open", text)
            status, _, _ = post(conn, INIT, REMEMBER)
            self.assertEqual(status, 503)
            # One closed: sessionless calls are served again.
            conn.request("DELETE", "/mcp", headers={"Authorization": f"Bearer {READ}", "Mcp-Session-Id": sessions[READ]})
            r = conn.getresponse()
            r.read()
            self.assertLess(r.status, 300)
            conn.close()
            status, result, text = sessionless(server.port, "sion_memory_open", {}, READ)
            self.assertEqual(status, 200, text)
            self.assertFalse(result.get("isError"), text)
            # In flight, one holds its place until answered: with one session open, recalls at
            # once cannot all be served.
            with ThreadPoolExecutor(max_workers=6) as pool:
                many = list(pool.map(lambda _: sessionless(server.port, "sion_memory_recall", EVERYTHING, READ), range(6)))
            statuses = sorted(s for s, _, _ in many)
            self.assertTrue(set(statuses) == {200, 503}, [t[:200] for _, _, t in many])
        finally:
            server.stop()

    def test_one_token_cannot_take_every_session(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--max-sessions", "4")
        try:
            conn = server.conn()
            held = [post(conn, INIT, READ)[0] for _ in range(5)]
            # Half of --max-sessions for one token by default; the rest stays for the others.
            self.assertEqual(held, [200, 200, 503, 503, 503])
            status, _, body = post_once(server, INIT, READ)
            self.assertEqual(status, 503)
            self.assertIn(b"this token has 2 sessions open", body)
            status, session, _ = post_once(server, INIT, REMEMBER)
            self.assertEqual(status, 200)
            self.assertIsNotNone(session)
            # A sessionless call of the holder at its bound is refused too; the writer's is served.
            status, _, text = sessionless(server.port, "sion_memory_open", {}, READ)
            self.assertEqual(status, 503, text)
            status, result, text = sessionless(server.port, "sion_memory_remember",
                                               {"atoms": [observation(0, ATOMS + 2, "dock-2-open")]}, REMEMBER)
            self.assertEqual(status, 200, text)
            self.assertFalse(result.get("isError"), text)
            conn.close()
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
