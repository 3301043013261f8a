"""sion_fleet_recall over MCP, driven by the Python `mcp` package: three robots' memories on a
fleet ledger (a real etcd member, `sion ledger serve`), one `sion mcp` reading them all (its
own memory and `--also` the others). The bundle it hands back is checked by `sion fleet verify`
against the ledger key the test holds; a server not given one robot's memory refuses, naming
that robot; a group asks one agent's logs; a memory on an embedded ledger is refused.

    SION_BIN=target/debug/sion bash scripts/isolated.sh python3 -m unittest tests/mcp/test_fleet.py -v
"""

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from test_mcp import SION, T0, call, free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import etcd_member  # noqa: E402

DAY = 86_400 * 10**9
QUESTION = {"frame": "map", "min": [0, 0, 0], "max": [1_000_000, 1_000_000, 30_000], "from": T0, "to": T0 + 40 * DAY}
CLI_QUESTION = ["--frame", "map", "--box", "0,0,0,1000000,1000000,30000", "--from", str(T0), "--to", str(T0 + 40 * DAY)]


def run(*args, stdin=None):
    out = subprocess.run([SION, *args], input=stdin, capture_output=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"sion {' '.join(args)}: {out.stderr.decode()} {out.stdout.decode()}")
    return out.stdout.decode()


class FleetRecall(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)
        self.etcd, etcd_url = etcd_member.start(self.tmp)
        self.addCleanup(self.stop, self.etcd)
        key = f"{self.tmp}/ledger.key"
        deadline = time.time() + 30
        while True:
            init = subprocess.run([SION, "ledger", "init", "--etcd", etcd_url, "--key", key], capture_output=True)
            if init.returncode == 0:
                break
            if time.time() > deadline:
                raise AssertionError(f"sion ledger init: {init.stderr.decode()}")
            time.sleep(0.3)
        # The ledger key, as the operator hands it to readers: from `sion ledger init`, not from
        # any robot or server.
        self.ledger_key = init.stdout.decode().split("key ")[1][:64]
        listen = free_port()
        self.url = f"http://127.0.0.1:{listen}"
        self.ledger = subprocess.Popen([SION, "ledger", "serve", "--etcd", etcd_url, "--key", key,
                                        "--listen", f"127.0.0.1:{listen}"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop, self.ledger)
        atoms = run("sim", "--atoms", "60").encode()
        deadline = time.time() + 30
        while True:
            opened = subprocess.run([SION, "memory", "open", "--data", f"{self.tmp}/robot-0", "--agent", "robot-0",
                                     "--ledger", self.url], capture_output=True)
            if opened.returncode == 0:
                break
            if time.time() > deadline:
                raise AssertionError(f"sion memory open: {opened.stderr.decode()}")
            time.sleep(0.3)
        for i in range(3):
            d = f"{self.tmp}/robot-{i}"
            if i > 0:
                run("memory", "open", "--data", d, "--agent", f"robot-{i}", "--ledger", self.url)
            run("memory", "remember", "--data", d, "-", stdin=atoms)
            run("memory", "commit", "--data", d)
        shown = json.loads(run("memory", "show", "--data", f"{self.tmp}/robot-0", "--json"))
        self.assertEqual(shown["ledger"]["key"], self.ledger_key, "the robot pinned the operator's key")

    @staticmethod
    def stop(process):
        process.kill()
        process.wait()

    def test_a_fleet_recall_over_mcp_is_checked_and_names_a_robot_left_out(self):
        asyncio.run(self.fleet())

    async def session(self, *args):
        return StdioServerParameters(command=SION, args=["mcp", *args])

    async def fleet(self):
        everyone = ["--data", f"{self.tmp}/robot-0", "--also", f"{self.tmp}/robot-1", "--also", f"{self.tmp}/robot-2"]
        # The server's standard error, read after it stops: a server holding a fleet ledger's
        # link used to panic at exit, dropping the link's runtime on an async thread.
        errlog = open(f"{self.tmp}/server.err", "w+")
        self.addCleanup(errlog.close)
        async with stdio_client(await self.session(*everyone), errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                self.assertIn("sion_fleet_recall", tools)
                self.assertIn("group", tools["sion_fleet_recall"].input_schema["properties"])
                err, out = await call(s, "sion_fleet_recall", QUESTION)
                self.assertFalse(err, out)
                self.assertEqual(out["logs_in_scope"], 3)
                self.assertEqual(len(out["answered"]), 3)
                self.assertGreater(out["atoms"], 0)
                self.assertEqual(sum(a["atoms"] for a in out["answered"]), out["atoms"])
                bundle = f"{self.tmp}/fleet.bundle"
                with open(bundle, "wb") as f:
                    f.write(base64.b64decode(out["bundle"]))
                said = run("fleet", "verify", bundle, "--ledger-key", self.ledger_key, *CLI_QUESTION)
                self.assertIn(f"VALID: {out['atoms']} atom(s) from 3 log(s)", said)
                # One robot's logs only.
                err, one = await call(s, "sion_fleet_recall", {**QUESTION, "group": "robot-1"})
                self.assertFalse(err, one)
                self.assertEqual((one["logs_in_scope"], [a["agent"] for a in one["answered"]]), (1, ["robot-1"]))
                err, bad = await call(s, "sion_fleet_recall", {**QUESTION, "group": "Robot 1"})
                self.assertTrue(err and "group" in bad, bad)
                err, bad = await call(s, "sion_fleet_recall", {**QUESTION, "as_of": 10})
                self.assertTrue(err and "as_of" in bad, bad)
                # By cells (SIONFLT2): the same atoms, checked by the same command.
                self.assertIn("by_cells", tools["sion_fleet_recall"].input_schema["properties"])
                err, cells = await call(s, "sion_fleet_recall", {**QUESTION, "by_cells": True})
                self.assertFalse(err, cells)
                self.assertEqual(cells["atoms"], out["atoms"])
                self.assertTrue(base64.b64decode(cells["bundle"]).startswith(b"SIONFLT2"))
                with open(bundle, "wb") as f:
                    f.write(base64.b64decode(cells["bundle"]))
                said = run("fleet", "verify", bundle, "--ledger-key", self.ledger_key, *CLI_QUESTION)
                self.assertIn(f"VALID: {out['atoms']} atom(s)", said)
                # As of the Pulse the first answer was of: the same answer.
                err, again = await call(s, "sion_fleet_recall", {**QUESTION, "pulse": out["pulse"]})
                self.assertFalse(err, again)
                self.assertEqual((again["pulse"], again["bundle"]), (out["pulse"], out["bundle"]))
        errlog.seek(0)
        self.assertNotIn("panicked", errlog.read())
        # A server not given robot 2's memory: no bundle, and the robot named.
        async with stdio_client(await self.session(*everyone[:4])) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, out = await call(s, "sion_fleet_recall", QUESTION)
                self.assertTrue(err, out)
                self.assertIn("robot-2", out)
                self.assertIn("no memory of it was given", out)
        # A memory on an embedded ledger holds only its own log.
        async with stdio_client(await self.session("--data", f"{self.tmp}/alone")) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, out = await call(s, "sion_fleet_recall", QUESTION)
                self.assertTrue(err and "embedded ledger" in out, out)


if __name__ == "__main__":
    unittest.main()
