"""The MCP server's doors, issue 30 (4), run against `sion mcp --listen` with raw sockets, plain
HTTP and the Python `mcp` 2.3.0 client (docs/ROS.md, "Who may call the MCP tools" and "Bounds on
MCP clients"):

- Slow and silent clients: connections that send nothing, or a header byte a second, are closed
  within the bound (`--request-read-s`) while a client with a token is served meanwhile; a head
  over 32 KiB closes its connection, one under it is served; a body trickled past the bound is
  answered 408; a refused request closes its connection; past `--max-connections` the next one
  waits for a place instead of being served or dropped.
- The token file: a symbolic link, another user's file, and a file in a directory others can
  write to are refused, naming the file and the fix.
- A Unix socket (`--listen unix:PATH`): made 0600 in a directory made 0700; a client running as
  the server's user is served with `--unix-role`'s roles (read unless told); run as user
  `nobody` (setpriv, as root), a client is kept out by the socket's mode, then, with the socket
  opened to others by `--unix-allow`, refused by its uid unless listed, and served when listed.

    SION_BIN=target/debug/sion python3 -m unittest discover -s tests/mcp -v
"""

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from test_access import INIT, Server, post_once
from test_mcp import SION, bearer, call, observation

READ, REMEMBER = "r" * 48, "w" * 48
NOBODY = 65534
BOUND = 3  # --request-read-s in these tests (10 s by default)


def closed_within(sock, seconds, since=None):
    """How long after `since` (now, by default) the server closed `sock` (its reads end or
    reset), or None if it still had not `seconds` after `since`."""
    start = time.monotonic() if since is None else since
    sock.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
    return None


def raw_request(port, head, body=b""):
    """One request on a connection of its own: its status and the connection, still open."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(head + body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        part = s.recv(65536)
        if not part:
            break
        answer += part
    return int(answer.split(b" ")[1]) if answer else None, answer, s


def head(token=None, length=None, extra=b""):
    lines = [b"POST /mcp HTTP/1.1", b"Host: 127.0.0.1", b"Content-Type: application/json",
             b"Accept: application/json, text/event-stream"]
    if token:
        lines.append(b"Authorization: Bearer " + token.encode())
    if length is not None:
        lines.append(b"Content-Length: " + str(length).encode())
    return b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n"


async def served(url, token):
    """A client with a token: initialize, then `sion_memory_open`; how long it took."""
    start = time.monotonic()
    async with bearer(token) as h, streamable_http_client(url, http_client=h) as (r, w, *_):
        async with ClientSession(r, w) as s:
            await asyncio.wait_for(s.initialize(), 30)
            err, me = await asyncio.wait_for(call(s, "sion_memory_open"), 30)
            assert not err, me
    return time.monotonic() - start


def uds_client(path):
    """An HTTP client over the Unix socket at `path` (httpx2, as the `mcp` client uses)."""
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=path),
                              timeout=httpx2.Timeout(30.0, read=300.0))


class Slow(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sion-mcp-slow-")
        self.tokens = os.path.join(self.tmp, "tokens")
        Path(self.tokens).write_text(f"read {READ}\nremember {REMEMBER}\n")
        os.chmod(self.tokens, 0o600)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_silent_and_trickling_connections_are_closed_while_a_client_is_served(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--request-read-s", str(BOUND))
        try:
            opened = time.monotonic()
            silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
            trickling = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(10)]
            stop = threading.Event()

            def trickle():
                # A header byte a second on each: never a whole head.
                request = head(READ)
                for i in range(len(request)):
                    for s in trickling:
                        try:
                            s.send(request[i:i + 1])
                        except OSError:
                            pass
                    if stop.wait(1):
                        return

            t = threading.Thread(target=trickle)
            t.start()
            try:
                # Meanwhile, a client with a token is served, promptly.
                took = asyncio.run(served(server.url, READ))
                self.assertLess(took, BOUND, "the client waited for the slow ones")
                # Every slow connection is closed within the bound (and a little scheduling).
                times = [closed_within(s, BOUND + 3, since=opened) for s in silent + trickling]
            finally:
                stop.set()
                t.join()
            self.assertNotIn(None, times, "a slow connection was still open past the bound")
            print(f"\n  50 slow connections closed after {min(times):.1f}..{max(times):.1f} s (bound {BOUND} s)")
            for s in silent + trickling:
                s.close()
            # And the server serves on.
            self.assertLess(asyncio.run(served(server.url, READ)), BOUND)
        finally:
            server.stop()

    def test_heads_bodies_and_refusals_are_bounded(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--request-read-s", str(BOUND))
        try:
            body = json.dumps(INIT).encode()
            # A head under 32 KiB is served; one over it closes the connection at once.
            status, answer, s = raw_request(server.port, head(READ, len(body), b"X-Pad: " + b"p" * (20 << 10) + b"\r\n"), body)
            self.assertEqual(status, 200, answer[:300])
            s.close()
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(head(READ)[:-2] + b"X-Pad: " + b"p" * (40 << 10))
            took = closed_within(s, BOUND + 3)
            self.assertIsNotNone(took)
            self.assertLess(took, BOUND, "a head over the bound waited for the clock")
            s.close()
            # A body that does not arrive in time: 408, and the connection closed.
            status, answer, s = raw_request(server.port, head(READ, 1000), b"{")
            self.assertEqual(status, 408, answer[:300])
            self.assertIn(b"did not arrive", answer)
            self.assertIsNotNone(closed_within(s, 5))
            s.close()
            # A request refused for want of a token closes its connection: it cannot idle there.
            status, answer, s = raw_request(server.port, head(None, len(body)), body)
            self.assertEqual(status, 401)
            self.assertIn(b"connection: close", answer.lower())
            self.assertIsNotNone(closed_within(s, 5))
            s.close()
            # A kept-alive connection with a token, idle after its answer, is closed in time too.
            status, answer, s = raw_request(server.port, head(READ, len(body)), body)
            self.assertEqual(status, 200)
            took = closed_within(s, BOUND + 3)
            self.assertIsNotNone(took, "an idle kept-alive connection stayed open")
            s.close()
        finally:
            server.stop()

    def test_past_the_connections_bound_the_next_waits_for_a_place(self):
        server = Server(self.tmp, "--tokens", self.tokens, "--request-read-s", str(BOUND), "--max-connections", "8")
        try:
            # wait_listening's own probe connection must be gone before the eight are opened.
            time.sleep(0.5)
            silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
            time.sleep(0.5)
            # The ninth is served, but only once the silent ones are closed, within the bound.
            took = asyncio.run(served(server.url, READ))
            self.assertGreater(took, BOUND - 1.5, "served past the bound on connections")
            self.assertLess(took, BOUND + 5)
            for s in silent:
                s.close()
        finally:
            server.stop()


class TokenFile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sion-mcp-tokenfile-")
        self.real = os.path.join(self.tmp, "real")
        Path(self.real).write_text(f"read {READ}\n")
        os.chmod(self.real, 0o600)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def refused(self, tokens):
        r = subprocess.run([SION, "mcp", "--data", f"{self.tmp}/mem", "--listen", "127.0.0.1:0", "--tokens", tokens],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        return r.stderr

    def test_a_symlink_is_refused_naming_the_file(self):
        link = os.path.join(self.tmp, "tokens")
        os.symlink(self.real, link)
        said = self.refused(link)
        self.assertIn(f"{link} is a symbolic link", said)
        self.assertIn("readlink -f", said)

    def test_others_can_read_it_is_refused_naming_the_fix(self):
        for mode in [0o640, 0o604, 0o620]:
            os.chmod(self.real, mode)
            self.assertIn(f"chmod 600 {self.real}", self.refused(self.real))

    def test_a_file_in_a_directory_others_can_write_is_refused(self):
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        tokens = os.path.join(shared, "tokens")
        shutil.copy(self.real, tokens)
        os.chmod(tokens, 0o600)
        said = self.refused(tokens)
        self.assertIn(f"{shared}, the directory of the token file", said)
        self.assertIn(f"chmod go-w {shared}", said)

    @unittest.skipUnless(os.geteuid() == 0, "needs root, to give the file to another user")
    def test_another_users_file_is_refused(self):
        os.chown(self.real, NOBODY, NOBODY)
        said = self.refused(self.real)
        self.assertIn(f"{self.real} belongs to uid {NOBODY}", said)
        self.assertIn(f"chown {os.geteuid()} {self.real}", said)


def nobody_can_run():
    """Whether this process can run a command as `nobody` (root, not in a user namespace that
    has no such user)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "true"],
                       capture_output=True)
    return r.returncode == 0


# A raw `initialize` over the Unix socket, as the user it is run as: prints the status and the
# body's start, or the error connecting.
AS_NOBODY = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror); sys.exit(0)
body = sys.argv[2].encode()
s.sendall(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
          b"Accept: application/json, text/event-stream\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
answer = b""
while b"\r\n\r\n" not in answer:
    part = s.recv(65536)
    if not part: break
    answer += part
print(answer.split(b" ")[1].decode(), answer.split(b"\r\n\r\n", 1)[-1][:600].decode(errors="replace"))
"""


class UnixSocket(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sion-mcp-unix-")
        self.sock = os.path.join(self.tmp, "run", "mcp.sock")
        self.procs = []

    def tearDown(self):
        for p, log in self.procs:
            p.terminate()
            p.wait(timeout=30)
            log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, *extra, data="mem"):
        log = open(os.path.join(self.tmp, f"server-{len(self.procs)}.log"), "w+")
        p = subprocess.Popen([SION, "mcp", "--data", f"{self.tmp}/{data}", "--listen", f"unix:{self.sock}", *extra],
                             stderr=log)
        self.procs.append((p, log))
        deadline = time.time() + 30
        while "serving MCP" not in Path(log.name).read_text():
            if p.poll() is not None or time.time() > deadline:
                raise AssertionError(f"sion mcp did not serve: {Path(log.name).read_text()}")
            time.sleep(0.1)
        return p

    async def session(self, body):
        async with uds_client(self.sock) as h, streamable_http_client("http://localhost/mcp", http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), 30)
                return await body(s)

    def test_the_servers_user_is_served_with_its_roles_and_the_socket_is_private(self):
        self.serve("--unix-role", "remember")
        self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o600)
        self.assertTrue(stat.S_ISSOCK(os.stat(self.sock).st_mode))
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.sock)).st_mode), 0o700)

        async def write(s):
            err, out = await call(s, "sion_memory_remember", {"atoms": [observation(0, 0, "pallet-1")]})
            self.assertFalse(err, out)
            err, out = await call(s, "sion_memory_commit")
            self.assertFalse(err, out)
            err, msg = await call(s, "sion_memory_forget", {"positions": [0], "who": "x", "why": "x"})
            self.assertTrue(err)
            self.assertIn("needs the role forget (or admin); this request, from uid", msg)
            self.assertIn("has the role read,remember", msg)
            err, me = await call(s, "sion_memory_open")
            return me["size"]

        self.assertEqual(asyncio.run(self.session(write)), 1)

    def test_by_default_the_servers_user_only_reads(self):
        self.serve()

        async def try_write(s):
            err, msg = await call(s, "sion_memory_remember", {"atoms": [observation(0, 0, "fire-exit-3-clear")]})
            self.assertTrue(err)
            self.assertIn("needs the role remember", msg)
            self.assertIn("over the Unix socket, has the role read (", msg)
            err, me = await call(s, "sion_memory_open")
            self.assertFalse(err, me)
            return me["size"]

        self.assertEqual(asyncio.run(self.session(try_write)), 0)

    def test_a_socket_in_use_or_a_directory_others_can_write_is_refused(self):
        self.serve()
        second = subprocess.run([SION, "mcp", "--data", f"{self.tmp}/other", "--listen", f"unix:{self.sock}"],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn("another server answers on it", second.stderr)
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        r = subprocess.run([SION, "mcp", "--data", f"{self.tmp}/other", "--listen", f"unix:{shared}/mcp.sock"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("can be changed by others", r.stderr)
        r = subprocess.run([SION, "mcp", "--data", f"{self.tmp}/other", "--listen", f"unix:{shared}/mcp.sock",
                            "--tokens", "x"], capture_output=True, text=True, timeout=60)
        self.assertIn("--tokens is for a TCP --listen", r.stderr)

    def test_a_stale_socket_is_replaced(self):
        os.makedirs(os.path.dirname(self.sock), mode=0o700)
        left = socket.socket(socket.AF_UNIX)
        left.bind(self.sock)
        left.close()  # bound, never listening: what a killed server leaves
        self.serve()
        self.assertEqual(asyncio.run(self.session(lambda s: call(s, "sion_memory_open")))[0], False)

    def test_a_silent_connection_on_the_socket_is_closed(self):
        self.serve("--request-read-s", str(BOUND))
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.sock)
        self.assertIsNotNone(closed_within(s, BOUND + 3))
        s.close()

    @unittest.skipUnless(nobody_can_run(), "needs root and setpriv, to run a client as the user nobody")
    def test_another_user_is_refused_by_its_uid_unless_allowed(self):
        # The tests' directory must let `nobody` reach the socket's directory at all.
        os.chmod(self.tmp, 0o711)
        init = json.dumps(INIT)

        def as_nobody():
            r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                "python3", "-c", AS_NOBODY, self.sock, init], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout

        # Only the server's user: the socket (0600, in a 0700 directory) keeps nobody out.
        p = self.serve()
        self.assertIn("connect: Permission denied", as_nobody())
        p.terminate()
        p.wait(timeout=30)
        # Another user allowed: the socket is opened to all (0666, directory 0711) and the
        # kernel's word on the peer's uid alone decides: nobody (65534) is not that user.
        shutil.rmtree(os.path.dirname(self.sock))
        self.serve("--unix-allow", "12345=admin", data="mem2")
        self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o666)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.sock)).st_mode), 0o711)
        said = as_nobody()
        self.assertTrue(said.startswith("403"), said)
        self.assertIn(f"uid {NOBODY} is not admitted", said)
        # The server's own user is still served.
        self.assertEqual(asyncio.run(self.session(lambda s: call(s, "sion_memory_open")))[0], False)
        self.procs[-1][0].terminate()
        self.procs[-1][0].wait(timeout=30)
        # nobody allowed (read): served.
        self.serve("--unix-allow", f"{NOBODY}", data="mem3")
        said = as_nobody()
        self.assertTrue(said.startswith("200"), said)
        self.assertIn("serverInfo", said)


if __name__ == "__main__":
    unittest.main()
