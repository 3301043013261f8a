"""Who may call the MCP server over HTTP (docs/ROS.md, "Who may call the MCP tools"): the
attacks of issue 30 (4) run against `sion mcp --listen` with the Python `mcp` 2.3.0 client and
plain HTTP. Without a token nothing is served (401) and nothing changes; a `read` token cannot
remember, commit, revise, forget or share; a `remember` token cannot forget or share; a token
file others can read is refused at start; a flood of `initialize` posts opens no more sessions
than the bound, the rest refused (503), and the server's memory stays bounded; an idle session
is closed and its place given back. What a token holder can make the server spend:
test_bounds.py.

    SION_BIN=target/debug/sion python3 -m unittest discover -s tests/mcp -v
"""

import asyncio
import http.client
import json
import os
import stat
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from test_mcp import SION, bearer, call, free_port, observation, tokens_of, wait_listening

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "flood", "version": "0"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def post(conn, body, token=None, session=None):
    """One POST on a kept-alive connection: (status, session id, body)."""
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if session is not None:
        headers["Mcp-Session-Id"] = session
    conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    return r.status, r.getheader("mcp-session-id"), r.read()


def post_once(server, body, token=None, session=None):
    """One POST on a connection of its own (the server closes one whose request it refused unread)."""
    conn = server.conn()
    try:
        return post(conn, body, token, session)
    finally:
        conn.close()


def said(e):
    """What an exception says, with what the exceptions it groups say (anyio's task groups)."""
    return " | ".join([str(e)] + [said(x) for x in getattr(e, "exceptions", [])])


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Server:
    """`sion mcp --listen` on a free port, over a memory of its own."""

    def __init__(self, tmp, *extra):
        self.port = free_port()
        self.log = open(os.path.join(tmp, f"server-{self.port}.log"), "w")
        self.proc = subprocess.Popen([SION, "mcp", "--data", f"{tmp}/mem", "--listen", f"127.0.0.1:{self.port}", *extra],
                                     stderr=self.log)
        wait_listening(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Access(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sion-mcp-access-")
        self.tokens = os.path.join(self.tmp, "tokens")
        self.role = {"read": "r" * 48, "remember": "w" * 48, "admin": "a" * 48}
        Path(self.tokens).write_text("".join(f"{k} {v}\n" for k, v in self.role.items()))
        os.chmod(self.tokens, 0o600)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp], check=False)

    async def size(self, server):
        async with bearer(self.role["read"]) as h, streamable_http_client(server.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, me = await call(s, "sion_memory_open")
                self.assertFalse(err, me)
                return me["size"]

    async def initialize(self, server, token):
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with create_mcp_http_client(headers=headers) as h, streamable_http_client(server.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), 30)

    def test_no_token_is_refused_and_nothing_changes(self):
        server = Server(self.tmp, "--tokens", self.tokens)
        try:
            remember = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "sion_memory_remember", "arguments": {"atoms": [observation(0, 0, "fire-exit-3-clear")]}}}
            for token in [None, "", "w" * 47, "w" * 49, "Basic " + "w" * 48]:
                status, session, body = post_once(server, INIT, token)
                self.assertEqual(status, 401, (token, body))
                self.assertIsNone(session)
                self.assertIn(b"Bearer", body)
                status, _, _ = post_once(server, remember, token, session="made-up")
                self.assertEqual(status, 401)
            # The `mcp` client with no token, or a wrong one, is told why.
            for token in [None, "x" * 48]:
                with self.assertRaises(Exception) as refused:
                    asyncio.run(self.initialize(server, token))
                self.assertIn("Authorization: Bearer", said(refused.exception))
            # The attack's sequence from issue 30 with no token: nothing was written.
            self.assertEqual(asyncio.run(self.size(server)), 0)
        finally:
            server.stop()

    def test_roles_separate_reading_remembering_forgetting_and_sharing(self):
        server = Server(self.tmp, "--tokens", self.tokens)
        try:
            asyncio.run(self.roles(server))
        finally:
            server.stop()

    async def roles(self, server):
        atoms = {"atoms": [observation(0, 0, "fire-exit-3-clear")]}
        forget = {"positions": [0], "who": "x", "why": "x"}
        share = {"name": "x", "member_public": "AAAA"}
        async with bearer(self.role["read"]) as h, streamable_http_client(server.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for tool, args, needs in [("sion_memory_remember", atoms, "remember"), ("sion_memory_commit", {}, "remember"),
                                          ("sion_memory_revise", {"position": 0, "state": "refutes"}, "remember"),
                                          ("sion_memory_forget", forget, "forget"), ("sion_memory_share", share, "share")]:
                    err, msg = await call(s, tool, args)
                    self.assertTrue(err, (tool, msg))
                    self.assertIn(f"needs a token with the role {needs}", msg)
                    self.assertIn("role read", msg)
                err, audit = await call(s, "sion_memory_audit")
                self.assertFalse(err, audit)
        self.assertEqual(await self.size(server), 0)
        async with bearer(self.role["remember"]) as h, streamable_http_client(server.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, out = await call(s, "sion_memory_remember", atoms)
                self.assertFalse(err, out)
                err, out = await call(s, "sion_memory_commit")
                self.assertFalse(err, out)
                for tool, args, needs in [("sion_memory_forget", forget, "forget"), ("sion_memory_share", share, "share")]:
                    err, msg = await call(s, tool, args)
                    self.assertTrue(err, (tool, msg))
                    self.assertIn(f"needs a token with the role {needs}", msg)
        # The admin's calls pass the door (this memory is in the clear, so the verb itself says no).
        async with bearer(self.role["admin"]) as h, streamable_http_client(server.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, msg = await call(s, "sion_memory_forget", forget)
                self.assertTrue(err)
                self.assertNotIn("needs a token", msg)
                self.assertIn("sealed", msg)
        self.assertEqual(await self.size(server), 1)

    def test_token_files_others_can_read_are_refused_and_the_default_is_private(self):
        os.chmod(self.tokens, 0o640)
        refused = subprocess.run([SION, "mcp", "--data", f"{self.tmp}/mem", "--listen", "127.0.0.1:0", "--tokens", self.tokens],
                                 capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(f"chmod 600 {self.tokens}", refused.stderr)
        # With no --tokens: DATA/mcp/tokens, written 0600 in a 0700 directory, whatever the umask.
        server = subprocess.Popen([SION, "mcp", "--data", f"{self.tmp}/mem2", "--listen", "127.0.0.1:0"],
                                  stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0o002))
        try:
            line = ""
            while "serving MCP" not in line:
                line = server.stderr.readline()
                self.assertTrue(line, "sion mcp said nothing")
            path = f"{self.tmp}/mem2/mcp/tokens"
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
            self.assertEqual(sorted(tokens_of(path)), ["admin", "read", "remember"])
        finally:
            server.terminate()
            server.wait(timeout=30)
            server.stderr.close()

    def test_a_flood_of_sessions_is_bounded_and_idle_ones_close(self):
        # One token here, so it may hold every place (by default one token holds half: test_bounds.py).
        server = Server(self.tmp, "--tokens", self.tokens, "--max-sessions", "16", "--max-sessions-per-token", "16",
                        "--session-idle-s", "3")
        try:
            conn = server.conn()
            status, _, _ = post(conn, INIT, self.role["read"])
            self.assertEqual(status, 200)
            before = rss_kib(server.proc.pid)
            statuses = {}
            for _ in range(2000):
                status, _, body = post(conn, INIT, self.role["read"])
                statuses[status] = statuses.get(status, 0) + 1
            after = rss_kib(server.proc.pid)
            # Sixteen sessions at most (one was opened before), every other initialize refused.
            self.assertEqual(statuses, {200: 15, 503: 1985}, statuses)
            self.assertIn(b"sessions open", body)
            print(f"\n  2,000 initialize posts: RSS {before} KiB -> {after} KiB, {statuses}")
            self.assertLess(after - before, 32 << 10, f"RSS {before} KiB -> {after} KiB")
            # Idle sessions close, and their places are given back.
            time.sleep(5)
            status, session, _ = post(conn, INIT, self.role["read"])
            self.assertEqual(status, 200)
            self.assertIsNotNone(session)
            conn.close()
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
