"""One memory, many clients, and belief over ROS 2 (docs/BELIEF.md, docs/ROS.md).

The node is its memory's one writer and also serves the memory's verbs as MCP tools
(`mcp_listen`). Two Python `mcp` clients (a real client no one here wrote) and an rclpy client
write to it at once: nothing is lost, every atom is proved, the log audits clean, and a second
writer process on the same memory is refused. Then an atom is revised over ROS and over MCP, and
two readers believe differently about it from the same bundle, each checking that bundle in its
own process against the ledger key it chose (sion_verify.believe).

Run by scripts/test.sh inside a loopback-only network namespace, like test_graph.py; needs the
`mcp` package (test.sh installs it) and the sion_verify package.
"""

import asyncio
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import rclpy
from rclpy.executors import SingleThreadedExecutor
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from sion_memory_msgs.srv import Believe, Commit, Count, QuerySubject, Recall, Remember, Revise

import sion_verify
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 30.0
T0 = 1767225600000000000
EACH = 100  # atoms each client remembers


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def observation(x, i, subject):
    return {'kind': 'observation', 'frame': 'map', 'min': [x, 0, 0], 'max': [x + 500, 500, 500],
            'from': T0 + i, 'to': T0 + i + 1, 'confidence': 900, 'subject': subject}


def call(node, kind, name, request):
    """A service call on this node with its own executor (each thread spins its own)."""
    client = node.create_client(kind, name)
    try:
        if not client.wait_for_service(timeout_sec=TIMEOUT_S):
            raise AssertionError(f'{name} is not available')
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=TIMEOUT_S)
        executor.remove_node(node)
        if future.result() is None:
            raise AssertionError(f'{name} did not answer within {TIMEOUT_S:.0f} s')
        return future.result()
    finally:
        node.destroy_client(client)


async def tool(session, name, args=None):
    res = await session.call_tool(name, args or {})
    text = res.content[0].text
    return res.is_error, (text if res.is_error else json.loads(text))


class OneWriterManyClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='sion-ros-belief-')
        cls.memory = os.path.join(cls.dir, 'memory')
        cls.port = free_port()
        # The package's parameter file with MCP served on a loopback port.
        with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
            config = f.read()
        assert 'mcp_listen: ""' in config
        cls.config = os.path.join(cls.dir, 'robot.yaml')
        # MCP clients present a token of the node's token file (docs/ROS.md): a `remember` one.
        assert 'mcp_tokens: ""' in config
        cls.tokens = os.path.join(cls.dir, 'mcp-tokens')
        cls.token = base64.b16encode(os.urandom(32)).decode().lower()
        with open(os.open(cls.tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 'w') as f:
            f.write(f'remember {cls.token}\n')
        with open(cls.config, 'w') as f:
            f.write(config.replace('mcp_listen: ""', f'mcp_listen: "127.0.0.1:{cls.port}"')
                    .replace('mcp_tokens: ""', f'mcp_tokens: "{cls.tokens}"'))
        cls.node_log = open(os.path.join(cls.dir, 'node.log'), 'w')
        cls.node = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'),
             os.path.join(ROOT, 'launch', 'robot.launch.py'), f'data_dir:={cls.memory}', f'config:={cls.config}'],
            stdout=cls.node_log, stderr=subprocess.STDOUT)
        cls.url = f'http://127.0.0.1:{cls.port}/mcp'
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(('127.0.0.1', cls.port)).close()
                break
            except OSError:
                if time.time() > deadline or cls.node.poll() is not None:
                    raise AssertionError(f'the node did not serve MCP (see {cls.node_log.name})')
                time.sleep(0.1)
        rclpy.init()
        cls.client = rclpy.create_node('sion_belief_test')

    @classmethod
    def tearDownClass(cls):
        cls.client.destroy_node()
        rclpy.shutdown()
        if cls.node.poll() is None:
            cls.node.send_signal(signal.SIGINT)
            cls.node.wait(timeout=60)
        cls.node_log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def http(self):
        return create_mcp_http_client(headers={'Authorization': f'Bearer {self.token}'})

    async def mcp_writer(self, k):
        async with self.http() as h, streamable_http_client(self.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for i in range(EACH):
                    err, out = await tool(s, 'sion_memory_remember',
                                          {'atoms': [observation(k * 100000 + i * 10, i, f'mcp-{k}')]})
                    self.assertFalse(err, out)
                    if i % 10 == 9:
                        err, out = await tool(s, 'sion_memory_commit')
                        self.assertFalse(err, out)

    def ros_writer(self):
        node = rclpy.create_node('sion_belief_ros_writer')
        try:
            for i in range(EACH):
                request = Remember.Request()
                request.atoms_json = [json.dumps(observation(300000 + i * 10, i, 'ros-0'))]
                answer = call(node, Remember, '/sion_memory/remember', request)
                self.assertTrue(answer.ok, answer.error)
                if i % 10 == 9:
                    committed = call(node, Commit, '/sion_memory/commit', Commit.Request())
                    self.assertTrue(committed.ok, committed.error)
        finally:
            node.destroy_node()

    async def at_once(self):
        await asyncio.gather(self.mcp_writer(1), self.mcp_writer(2), asyncio.to_thread(self.ros_writer))

    def subject(self, subject, key, at_least):
        request = QuerySubject.Request()
        request.subject = subject
        answer = call(self.client, QuerySubject, '/sion_memory/query_subject', request)
        self.assertTrue(answer.ok, answer.error)
        return sion_verify.verify(bytes(answer.proof), key, subject=subject, at_least=at_least)

    def test_1_two_mcp_clients_and_a_ros_client_at_once(self):
        asyncio.run(self.at_once())
        committed = call(self.client, Commit, '/sion_memory/commit', Commit.Request())
        self.assertTrue(committed.ok, committed.error)
        key = bytes(committed.head.ledger_key).hex()
        positions = set()
        for subject in ['mcp-1', 'mcp-2', 'ros-0']:
            proved = self.subject(subject, key, committed.head.size)
            self.assertEqual(len(proved['atoms']), EACH, subject)
            positions |= {a['position'] for a in proved['atoms']}
        self.assertEqual(len(positions), 3 * EACH, 'an atom was lost or two took one position')
        # Asked of one subject in a box and interval (~/recall and ~/count with `subject`): the
        # subject's atoms there, from its own tree, proved and checked here as asked.
        ros = sorted(a['position'] for a in self.subject('ros-0', key, committed.head.size)['atoms'])
        request = Recall.Request()
        request.frame_id, request.subject = 'map', 'ros-0'
        request.min, request.max = Point(x=0.0, y=0.0, z=0.0), Point(x=1000.0, y=1.0, z=1.0)
        request.from_time, request.to_time = Time(sec=T0 // 10**9), Time(sec=T0 // 10**9 + 1)
        recalled = call(self.client, Recall, '/sion_memory/recall', request)
        self.assertTrue(recalled.ok, recalled.error)
        self.assertEqual([a.position for a in recalled.atoms], ros)
        checked = sion_verify.verify(bytes(recalled.proof), key, frame='map', box=[0, 0, 0, 1000000, 1000, 1000],
                                     from_ns=T0, to_ns=T0 + 10**9, subject='ros-0')
        self.assertIn('about "ros-0"', checked['statement'])
        with self.assertRaises(sion_verify.ProofError):
            sion_verify.verify(bytes(recalled.proof), key, frame='map', box=[0, 0, 0, 1000000, 1000, 1000],
                               from_ns=T0, to_ns=T0 + 10**9)
        counted = Count.Request()
        counted.frame_id, counted.subject, counted.min, counted.max = 'map', 'mcp-1', request.min, request.max
        counted.from_time, counted.to_time = request.from_time, request.to_time
        count = call(self.client, Count, '/sion_memory/count', counted)
        self.assertTrue(count.ok, count.error)
        self.assertEqual(count.count, EACH)
        sion_verify.verify(bytes(count.proof), key, count={'frame': 'map', 'box': [0, 0, 0, 1000000, 1000, 1000],
                                                           'from_ns': T0, 'to_ns': T0 + 10**9, 'subject': 'mcp-1'})
        # The writer's own view through MCP agrees, and the log audits clean.
        asyncio.run(self.check_through_mcp(committed.head))
        # A second writer process on the same memory is refused, saying where to go.
        second = subprocess.run(['sion', 'mcp', '--data', self.memory], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn('has a writer already', second.stderr)
        self.assertIn('mcp_listen', second.stderr)

    def test_0_mcp_without_a_token_is_refused(self):
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=TIMEOUT_S)
        conn.request('POST', '/mcp', body=json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {
            'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'x', 'version': '0'}}}),
            headers={'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'})
        answer = conn.getresponse()
        self.assertEqual(answer.status, 401, answer.read())
        conn.close()

    async def check_through_mcp(self, head):
        async with self.http() as h, streamable_http_client(self.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, me = await tool(s, 'sion_memory_open')
                self.assertFalse(err, me)
                self.assertEqual(me['ledger_key'], bytes(head.ledger_key).hex())
                self.assertGreaterEqual(me['committed'], head.size)
                err, audit = await tool(s, 'sion_memory_audit')
                self.assertFalse(err, audit)
                self.assertTrue(audit['root_matches'], audit)
                self.assertIsNone(audit['first_bad'], audit)

    def believe(self, policy, target):
        request = Believe.Request()
        request.policy_json, request.target_ids = json.dumps(policy), [target]
        return call(self.client, Believe, '/sion_memory/believe', request)

    def test_2_revised_over_ros_and_mcp_believed_two_ways(self):
        committed = call(self.client, Commit, '/sion_memory/commit', Commit.Request())
        key = bytes(committed.head.ledger_key).hex()
        target = self.subject('ros-0', key, 0)['atoms'][0]
        # Disputed over ROS, then accepted again over MCP: nothing is deleted.
        request = Revise.Request()
        request.position, request.state, request.why = target['position'], 'disputes', 'an operator saw it elsewhere'
        disputed = call(self.client, Revise, '/sion_memory/revise', request)
        self.assertTrue(disputed.ok, disputed.error)
        self.assertEqual(disputed.target_id, target['id'])
        self.assertGreater(disputed.head.size, disputed.revision_position)
        writer, via_mcp = asyncio.run(self.accept_through_mcp(target['position']))
        self.assertEqual(via_mcp['target'], target['id'])

        # Reader A trusts the robot's writer key (latest wins): accepted. Reader B trusts no
        # reviser: asserted, as remembered. Both from the node's one bundle, checked here.
        trusting = {'revisers': [{'name': 'robot', 'key': writer, 'rank': 1}], 'prefer': 'latest'}
        sceptic = {'revisers': [], 'prefer': 'latest'}
        answer = self.believe(trusting, target['id'])
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual((list(answer.targets), list(answer.states)), ([target['id']], ['accepted']))
        decided = json.loads(answer.beliefs_json[0])
        self.assertEqual(decided['decided_by'], [via_mcp['revision']])
        # Both statements stay visible: the dispute stands beside the acceptance that won.
        self.assertEqual(sorted(x['state'] for x in decided['standing']), ['accepted', 'disputed'])
        self.assertIn(disputed.revision_id, [x['by'] for x in decided['standing']])
        bundle = bytes(answer.bundle)
        a = sion_verify.believe(bundle, key, [target['id']], trusting, as_of=answer.pulse)
        b = sion_verify.believe(bundle, key, [target['id']], sceptic, as_of=answer.pulse)
        self.assertEqual([x['state'] for x in a['beliefs']], ['accepted'])
        self.assertEqual([x['state'] for x in b['beliefs']], ['asserted'])
        # The same bundle against a key the reader did not choose, or for a later Pulse: refused.
        with self.assertRaises(sion_verify.BundleError) as wrong:
            sion_verify.believe(bundle, writer, [target['id']], trusting)
        self.assertEqual(wrong.exception.code, 'proof')
        with self.assertRaises(sion_verify.BundleError) as stale:
            sion_verify.believe(bundle, key, [target['id']], trusting, as_of=answer.pulse + 1)
        self.assertEqual(stale.exception.code, 'stale')

        # Refusals name the field.
        request = Revise.Request()
        request.position, request.state = target['position'], 'maybe'
        bad = call(self.client, Revise, '/sion_memory/revise', request)
        self.assertFalse(bad.ok)
        self.assertIn('state', bad.error)
        request = Believe.Request()
        request.policy_json, request.target_ids = '{not json', [target['id']]
        bad = call(self.client, Believe, '/sion_memory/believe', request)
        self.assertFalse(bad.ok)
        self.assertIn('policy_json', bad.error)

    async def accept_through_mcp(self, position):
        async with self.http() as h, streamable_http_client(self.url, http_client=h) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                err, me = await tool(s, 'sion_memory_open')
                err, revised = await tool(s, 'sion_memory_revise',
                                          {'position': position, 'state': 'accepts', 'why': 'seen again'})
                self.assertFalse(err, revised)
                policy = {'revisers': [{'name': 'robot', 'key': me['writer'], 'rank': 1}], 'prefer': 'latest'}
                err, believed = await tool(s, 'sion_memory_believe', {'policy': policy, 'positions': [position]})
                self.assertFalse(err, believed)
                self.assertEqual(believed['beliefs'][0]['state'], 'accepted')
                base64.b64decode(believed['bundle'], validate=True)
                return me['writer'], revised


if __name__ == '__main__':
    unittest.main()
