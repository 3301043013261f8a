"""The MCP server (`sion mcp`) driven by the Python `mcp` package (2.3.0): a real client no one
here wrote. Over stdio: every tool listed with a JSON schema; remember, commit, recall, verify
(against the ledger key the client chose), revise and believe; a bad atom refused naming the
field; a line over the bound answered with an error, and the next one served. Over streamable
HTTP on loopback: two clients at once lose nothing, and a second writer process on the same
memory is refused, saying where to connect. Who may call (tests/mcp/test_access.py): a token
from the server's token file, its roles, sessions bounded and expired.

    SION_BIN=target/debug/sion python3 -m unittest discover -s tests/mcp -v
"""

import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[2]
SION = os.environ.get("SION_BIN", str(ROOT / "target" / "debug" / "sion"))
T0 = 1767225600000000000


def observation(x, i, subject):
    return {"kind": "observation", "frame": "map", "min": [x, 0, 0], "max": [x + 500, 500, 500],
            "from": T0 + i, "to": T0 + i + 1, "confidence": 900, "subject": subject}


async def call(session, tool, args=None):
    res = await session.call_tool(tool, args or {})
    text = res.content[0].text
    return res.is_error, (text if res.is_error else json.loads(text))


async def proof_of(session, recalled):
    """A recall's proof, read from its MCP resource (base64)."""
    read = await session.read_resource(recalled["proof_resource"])
    return read.contents[0].blob


class Stdio(unittest.TestCase):
    def test_the_verbs_over_stdio(self):
        asyncio.run(self.verbs())

    async def verbs(self):
        with tempfile.TemporaryDirectory() as tmp:
            params = StdioServerParameters(command=SION, args=["mcp", "--data", f"{tmp}/mem"])
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    tools = {t.name: t for t in (await s.list_tools()).tools}
                    for name in ["sion_memory_open", "sion_memory_remember", "sion_memory_commit",
                                 "sion_memory_recall", "sion_memory_verify", "sion_memory_revise",
                                 "sion_memory_believe", "sion_memory_forget", "sion_memory_share",
                                 "sion_memory_audit", "sion_memory_last_seen", "sion_memory_nearest",
                                 "sion_memory_count"]:
                        self.assertIn(name, tools)
                        self.assertEqual(tools[name].input_schema.get("type"), "object", name)
                    self.assertIn("frame", tools["sion_memory_recall"].input_schema["properties"])

                    err, out = await call(s, "sion_memory_remember",
                                          {"atoms": [observation(0, 0, "pallet-17"), observation(50000, 1, "pallet-9")]})
                    self.assertFalse(err, out)
                    self.assertEqual(out["positions"], [0, 1])
                    err, head = await call(s, "sion_memory_commit")
                    self.assertFalse(err, head)
                    self.assertEqual(head["size"], 2)

                    err, rec = await call(s, "sion_memory_recall", {"frame": "map", "min": [0, 0, 0],
                                                                    "max": [5000, 5000, 5000], "from": T0, "to": T0 + 10})
                    self.assertFalse(err, rec)
                    self.assertEqual([a["position"] for a in rec["atoms"]], [0])
                    self.assertEqual(rec["warnings"], [])
                    # The same question in metres and seconds (docs/UNITS.md), the frame as tf2
                    # writes it: the same answer.
                    err, in_m = await call(s, "sion_memory_recall", {"frame": "/map", "min": ["0m", "0m", "0m"],
                                                                     "max": ["5m", "5m", "5000mm"], "from": f"{T0}ns",
                                                                     "to": f"{T0 + 10}ns"})
                    self.assertFalse(err, in_m)
                    self.assertEqual(in_m["statement"], rec["statement"])
                    err, in_ros = await call(s, "sion_memory_recall", {"frame": "map", "min": ["0m", "0m", "0m"],
                                                                       "max": ["5m", "5m", "5m"], "from": {"sec": T0 // 10**9},
                                                                       "to": {"sec": T0 // 10**9, "nanosec": 10}})
                    self.assertFalse(err, in_ros)
                    self.assertEqual(in_ros["statement"], rec["statement"])
                    # A fraction given as a number: which field, and how to write it.
                    err, msg = await call(s, "sion_memory_recall", {"frame": "map", "min": [0.5, 0, 0],
                                                                    "max": [5000, 5000, 5000], "from": T0, "to": T0 + 10})
                    self.assertTrue(err, msg)
                    self.assertIn("min.x", msg)
                    self.assertIn('"0.5m"', msg)
                    err, msg = await call(s, "sion_memory_recall", {"frame": "map", "min": [0, 0, 0],
                                                                    "max": [5000, 5000, 5000], "from": "1767225600.5", "to": T0})
                    self.assertTrue(err, msg)
                    self.assertIn("1767225600.5s", msg)
                    # A frame never recorded: proved empty, with a warning naming the frames held.
                    err, none = await call(s, "sion_memory_recall", {"frame": "base_footprint", "min": ["0m", "0m", "0m"],
                                                                     "max": ["5m", "5m", "5m"], "from": T0, "to": T0 + 10})
                    self.assertFalse(err, none)
                    self.assertEqual(none["atoms"], [])
                    self.assertEqual(len(none["warnings"]), 1, none)
                    self.assertIn('no frame "base_footprint"; it holds "map"', none["warnings"][0])
                    err, me = await call(s, "sion_memory_open")
                    # The reader checks the proof against the ledger key it chose, and what it asked;
                    # the proof is an MCP resource, read apart from the answer.
                    proof = await proof_of(s, rec)
                    expect = {"box": [0, 0, 0, 5000, 5000, 5000], "frame": "map", "from_ns": T0, "to_ns": T0 + 10}
                    err, ok = await call(s, "sion_memory_verify", {"proof": proof, "ledger_key": me["ledger_key"], "expect": expect})
                    self.assertTrue(ok["valid"], ok)
                    err, bad = await call(s, "sion_memory_verify", {"proof": proof, "ledger_key": "11" * 32})
                    self.assertFalse(bad["valid"], bad)
                    wrong = dict(expect, box=[0, 0, 0, 9000, 9000, 9000])
                    err, other = await call(s, "sion_memory_verify", {"proof": proof, "ledger_key": me["ledger_key"], "expect": wrong})
                    self.assertFalse(other["valid"], other)

                    # Last seen and nearest: small answers, their proofs inline, checked as asked.
                    # pallet-17 (at x = 0, T0) and pallet-9 (at x = 50 m, T0 + 1): over the whole
                    # interval, pallet-9 was seen last; at T0, pallet-17 is the one valid.
                    err, last = await call(s, "sion_memory_last_seen", {"frame": "map", "min": ["0m", "0m", "0m"],
                                                                        "max": ["60m", "1m", "1m"], "from": T0, "to": T0 + 10})
                    self.assertFalse(err, last)
                    self.assertEqual([a["position"] for a in last["atoms"]], [1], last)
                    latest = {"latest": {"frame": "map", "box": [0, 0, 0, 60000, 1000, 1000], "from_ns": T0, "to_ns": T0 + 10}}
                    err, ok = await call(s, "sion_memory_verify", {"proof": last["proof"], "ledger_key": me["ledger_key"],
                                                                   "expect": latest})
                    self.assertTrue(ok["valid"], ok)
                    err, near = await call(s, "sion_memory_nearest", {"frame": "map", "point": ["10m", "0m", "0m"],
                                                                      "at": T0, "k": 3})
                    self.assertFalse(err, near)
                    self.assertEqual([a["position"] for a in near["atoms"]], [0], near)
                    self.assertAlmostEqual(near["distances_m"][0], 9.5, places=3)
                    nearest = {"nearest": {"frame": "map", "point": [10000, 0, 0], "from_ns": T0, "to_ns": T0, "k": 3}}
                    err, ok = await call(s, "sion_memory_verify", {"proof": near["proof"], "ledger_key": me["ledger_key"],
                                                                   "expect": nearest})
                    self.assertTrue(ok["valid"], ok)
                    err, msg = await call(s, "sion_memory_nearest", {"frame": "map", "point": [0, 0, 0], "at": T0, "k": 101})
                    self.assertTrue(err, msg)
                    self.assertIn("k", msg)

                    # Count: how many observations in the box, for how long in all, proved;
                    # about poses alone, none; an unknown kind is named back.
                    box = {"frame": "map", "min": ["0m", "0m", "0m"], "max": ["60m", "1m", "1m"], "from": T0, "to": T0 + 10}
                    err, count = await call(s, "sion_memory_count", {**box, "kinds": ["observation"]})
                    self.assertFalse(err, count)
                    self.assertEqual(count["count"]["atoms"], 2, count)
                    expect = {"count": {"frame": "map", "box": [0, 0, 0, 60000, 1000, 1000], "from_ns": T0,
                                        "to_ns": T0 + 10, "kinds": ["observation"]}}
                    err, ok = await call(s, "sion_memory_verify", {"proof": count["proof"], "ledger_key": me["ledger_key"],
                                                                   "expect": expect})
                    self.assertTrue(ok["valid"], ok)
                    err, poses = await call(s, "sion_memory_count", {**box, "kinds": ["pose"]})
                    self.assertFalse(err, poses)
                    self.assertEqual(poses["count"]["atoms"], 0, poses)
                    err, msg = await call(s, "sion_memory_count", {**box, "kinds": ["person"]})
                    self.assertTrue(err, msg)
                    self.assertIn("not a kind of atom", msg)
                    # About one subject: pallet-17 alone was last seen first, and is counted once.
                    err, last17 = await call(s, "sion_memory_last_seen", {**box, "subject": "pallet-17"})
                    self.assertFalse(err, last17)
                    self.assertEqual([a["position"] for a in last17["atoms"]], [0], last17)
                    err, one = await call(s, "sion_memory_count", {**box, "subject": "pallet-9"})
                    self.assertFalse(err, one)
                    self.assertEqual(one["count"]["atoms"], 1, one)
                    about = {"count": {"frame": "map", "box": [0, 0, 0, 60000, 1000, 1000], "from_ns": T0,
                                       "to_ns": T0 + 10, "subject": "pallet-9"}}
                    err, ok = await call(s, "sion_memory_verify", {"proof": one["proof"], "ledger_key": me["ledger_key"],
                                                                   "expect": about})
                    self.assertTrue(ok["valid"], ok)
                    err, ok = await call(s, "sion_memory_verify", {"proof": one["proof"], "ledger_key": me["ledger_key"],
                                                                   "expect": expect})
                    self.assertFalse(ok["valid"], ok)

                    # Revise and believe: the writer disputes its own observation; a reader
                    # trusting it believes the dispute, one trusting nobody sees it asserted.
                    err, rev = await call(s, "sion_memory_revise", {"position": 0, "state": "disputes", "why": "it moved"})
                    self.assertFalse(err, rev)
                    policy = {"revisers": [{"name": "robot", "key": me["writer"], "rank": 1}], "prefer": "latest"}
                    err, b = await call(s, "sion_memory_believe", {"policy": policy, "positions": [0]})
                    self.assertFalse(err, b)
                    self.assertEqual(b["beliefs"][0]["state"], "disputed")
                    err, b2 = await call(s, "sion_memory_believe", {"policy": {"revisers": [], "prefer": "latest"}, "positions": [0]})
                    self.assertEqual(b2["beliefs"][0]["state"], "asserted")

                    err, audit = await call(s, "sion_memory_audit")
                    self.assertFalse(err, audit)
                    self.assertTrue(audit["root_matches"], audit)
                    # Refusals name the field; forgetting a memory in the clear says why.
                    err, msg = await call(s, "sion_memory_remember", {"atoms": [{"kind": "observation"}]})
                    self.assertTrue(err)
                    self.assertIn("atoms[0]", msg)
                    err, msg = await call(s, "sion_memory_forget", {"positions": [0], "who": "t", "why": "t"})
                    self.assertTrue(err)
                    self.assertIn("sealed", msg)

    def test_a_large_answer_comes_in_pages_with_a_summary_and_its_proof_apart(self):
        asyncio.run(self.pages())

    async def pages(self):
        """An agent asks about 240 atoms: it reads a summary and 50 atoms at a time (a few KB,
        not the whole answer), pages through with the cursor on the same head even while the
        memory grows, and reads the proof of the whole answer as a resource."""
        with tempfile.TemporaryDirectory() as tmp:
            params = StdioServerParameters(command=SION, args=["mcp", "--data", f"{tmp}/mem"])
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    atoms = [observation(10 * i, i, f"pallet-{i % 3}") for i in range(240)]
                    err, out = await call(s, "sion_memory_remember", {"atoms": atoms})
                    self.assertFalse(err, out)
                    err, head = await call(s, "sion_memory_commit")
                    question = {"frame": "map", "min": ["0m", "0m", "0m"], "max": ["5m", "1m", "1m"],
                                "from": T0, "to": T0 + 1000}
                    res = await s.call_tool("sion_memory_recall", question)
                    first = json.loads(res.content[0].text)
                    self.assertLess(len(res.content[0].text), 40_000, "a page, not the whole answer")
                    self.assertEqual(first["summary"]["atoms"], 240)
                    self.assertEqual(first["summary"]["kinds"], {"observation": 240})
                    self.assertEqual(first["summary"]["subjects"], [["pallet-0", 80], ["pallet-1", 80], ["pallet-2", 80]])
                    self.assertIn("2026-01-01", first["summary"]["valid"])
                    self.assertEqual(len(first["atoms"]), 50)
                    self.assertEqual(first["next_cursor"], f"{head['size']}:50")
                    # The memory grows between pages: the cursor keeps the answer's head.
                    err, _ = await call(s, "sion_memory_remember", {"atoms": [observation(20, 999, "late")]})
                    err, _ = await call(s, "sion_memory_commit")
                    seen, page = list(first["atoms"]), first
                    while "next_cursor" in page:
                        err, page = await call(s, "sion_memory_recall", dict(question, cursor=page["next_cursor"], limit=100))
                        self.assertFalse(err, page)
                        self.assertEqual(page["head_size"], head["size"])
                        seen += page["atoms"]
                    self.assertEqual([a["position"] for a in seen], sorted(a["position"] for a in seen))
                    self.assertEqual(len({a["position"] for a in seen}), 240)
                    # The proof of the whole answer, read apart, checks against the question.
                    err, me = await call(s, "sion_memory_open")
                    expect = {"box": [0, 0, 0, 5000, 1000, 1000], "frame": "map", "from_ns": T0, "to_ns": T0 + 1000}
                    proof = await proof_of(s, first)
                    self.assertEqual(len(proof) * 3 // 4 // 1000, first["proof_bytes"] // 1000)
                    err, ok = await call(s, "sion_memory_verify", {"proof": proof, "ledger_key": me["ledger_key"], "expect": expect})
                    self.assertTrue(ok["valid"], ok)
                    self.assertIn("these 240 atoms are everything", ok["statement"])
                    # A cursor that is not one, and a proof URI that is not one, are named.
                    err, msg = await call(s, "sion_memory_recall", dict(question, cursor="soon"))
                    self.assertTrue(err)
                    self.assertIn("cursor", msg)
                    with self.assertRaises(Exception) as refused:
                        await s.read_resource("sion://proof/range?frame=map")
                    self.assertIn("box", str(refused.exception))
                    templates = await s.list_resource_templates()
                    self.assertTrue(any(t.uri_template.startswith("sion://proof/range") for t in templates.resource_templates))

    def test_a_line_over_the_bound_is_answered_and_the_next_served(self):
        asyncio.run(self.over_long())

    async def over_long(self):
        # Over 16 MiB in one message: the server answers it with a JSON-RPC error naming the
        # bound (before, it dropped the line and the client waited for ever), then goes on.
        with tempfile.TemporaryDirectory() as tmp:
            params = StdioServerParameters(command=SION, args=["mcp", "--data", f"{tmp}/mem"])
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    huge = dict(observation(0, 0, "x" * (17 << 20)))
                    with self.assertRaises(Exception) as refused:
                        await asyncio.wait_for(s.call_tool("sion_memory_remember", {"atoms": [huge]}), 60)
                    self.assertNotIsInstance(refused.exception, asyncio.TimeoutError, "no answer to an over-long line")
                    self.assertIn("16777216 bytes", str(refused.exception))
                    err, out = await asyncio.wait_for(call(s, "sion_memory_remember", {"atoms": [observation(0, 0, "pallet-1")]}), 60)
                    self.assertFalse(err, out)
                    self.assertEqual(out["positions"], [0])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bearer(token):
    return create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})


def tokens_of(path):
    """The token file's tokens by their roles."""
    return {line.split()[0]: line.split()[1] for line in Path(path).read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def wait_listening(port, server):
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                raise AssertionError("sion mcp did not listen")
            time.sleep(0.1)


class Http(unittest.TestCase):
    def test_two_clients_one_writer(self):
        asyncio.run(self.two_clients())

    async def client(self, url, k, n):
        async with bearer(self.token) as http, streamable_http_client(url, http_client=http) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for i in range(n):
                    err, out = await call(s, "sion_memory_remember", {"atoms": [observation(k * 100000 + i * 10, i, f"client-{k}")]})
                    self.assertFalse(err, out)
                    if i % 10 == 9:
                        err, out = await call(s, "sion_memory_commit")
                        self.assertFalse(err, out)

    async def two_clients(self):
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            server = subprocess.Popen([SION, "mcp", "--data", f"{tmp}/mem", "--listen", f"127.0.0.1:{port}"],
                                      stderr=subprocess.DEVNULL)
            try:
                wait_listening(port, server)
                # With no --tokens, the server wrote a token per role into the memory.
                self.token = tokens_of(f"{tmp}/mem/mcp/tokens")["remember"]
                url = f"http://127.0.0.1:{port}/mcp"
                await asyncio.gather(self.client(url, 1, 60), self.client(url, 2, 60))
                # A second writer process on the same memory: refused, saying where to go.
                second = subprocess.run([SION, "mcp", "--data", f"{tmp}/mem"], stdin=subprocess.DEVNULL,
                                        capture_output=True, text=True, timeout=30)
                self.assertNotEqual(second.returncode, 0)
                self.assertIn("has a writer already", second.stderr)
                async with bearer(self.token) as http, streamable_http_client(url, http_client=http) as (r, w, *_):
                    async with ClientSession(r, w) as s:
                        await s.initialize()
                        err, me = await call(s, "sion_memory_open")
                        self.assertEqual((me["size"], me["committed"]), (120, 120), me)
                        err, audit = await call(s, "sion_memory_audit")
                        self.assertTrue(audit["root_matches"], audit)
            finally:
                server.terminate()
                server.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
