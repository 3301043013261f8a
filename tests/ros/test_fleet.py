"""Robots that check each other: two sion_memory nodes (two processes, two memory directories,
namespaces /robot_a and /robot_b on one DDS graph) commit to one fleet ledger — a real etcd,
`sion ledger serve`, and a witness — and are asked about each other:

- an rclpy reader asks robot A over ROS and checks the answer here (sion_verify) against the
  fleet ledger's key and a witness it trusts, both obtained from the operator, never from A;
  `sion memory verify --ledger URL` then fetches the Pulse's header from the fleet ledger;
- robot B's side, in Rust (examples/fleet_peer.rs), asks A the same and checks it likewise;
- A's header backdated is refused, and A's writer trying to rewrite its past on the fleet
  ledger with its own key is refused with the reason each time.

Run by scripts/test.sh inside a network namespace with only loopback up.
"""

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
from sion_memory_msgs.srv import Remember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import ask  # noqa: E402
import etcd_member  # noqa: E402
import launch as launcher  # noqa: E402
import robot_run  # noqa: E402

A, B = '/robot_a/sion_memory', '/robot_b/sion_memory'
TARGET = os.environ.get('CARGO_TARGET_DIR', os.path.join(ROOT, 'target'))
PEER = os.path.join(TARGET, 'debug', 'examples', 'fleet_peer')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_port(port, what, seconds=30.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f'{what} did not listen on port {port} within {seconds:.0f} s')


def sion(*args):
    return subprocess.run(['sion', *args], capture_output=True, text=True)


class Fleet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which('etcd') is None:
            raise RuntimeError('etcd is not installed (Debian: apt install etcd-server; scripts/setup.sh test)')
        if not os.access(PEER, os.X_OK):
            raise RuntimeError(f'{PEER} is missing: cargo build --features ros --example fleet_peer')
        cls.work = tempfile.mkdtemp(prefix='sion-fleet-test-')
        cls.processes = []
        cls.logs = []
        # Run even when setUpClass fails half-way: no etcd or node outlives the test.
        cls.addClassCleanup(cls.stop_processes)

        def start(name, command):
            log = open(os.path.join(cls.work, f'{name}.log'), 'w')
            cls.logs.append(log)
            p = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            cls.processes.append(p)
            return p

        etcd_process, etcd = etcd_member.start(cls.work)
        cls.processes.append(etcd_process)
        # The operator: the ledger's key stays here; robots and readers get its public half.
        ledger_key_file = os.path.join(cls.work, 'ledger.key')
        for _ in range(50):
            out = sion('ledger', 'init', '--etcd', etcd, '--key', ledger_key_file)
            if out.returncode == 0:
                break
            time.sleep(0.2)
        assert out.returncode == 0, out.stdout + out.stderr
        cls.ledger_key = out.stdout.split('key ')[1][:64]
        # A witness, run by someone else; its key goes to the service and to readers.
        cls.witness_key = os.path.join(cls.work, 'witness.key')
        out = sion('ledger', 'witness', '--key', cls.witness_key, '--show-key')
        assert out.returncode == 0, out.stdout + out.stderr
        cls.witness_public = out.stdout.strip()
        cls.witnesses = os.path.join(cls.work, 'witnesses')
        with open(cls.witnesses, 'w') as f:
            f.write(f'auditor {cls.witness_public}\n')
        port = free_port()
        cls.url = f'http://127.0.0.1:{port}'
        start('ledger', ['sion', 'ledger', 'serve', '--etcd', etcd, '--key', ledger_key_file,
                         '--listen', f'127.0.0.1:{port}', '--witnesses', cls.witnesses])
        wait_port(port, 'sion ledger serve')

        # Two robots: their own memory directories, namespaces and topics; neither holds a
        # ledger key.
        node = launcher.find_executable('sion_memory', 'sion_memory_node')
        cls.data = {robot: os.path.join(cls.work, robot) for robot in ('robot_a', 'robot_b')}
        for robot, topics in (('robot_a', ''), ('robot_b', '/robot_b')):
            params = os.path.join(cls.work, f'{robot}.yaml')
            # Robot A also reads B's memory (read-only): ~/fleet_recall asks both.
            others = cls.data['robot_b'] if robot == 'robot_a' else ''
            with open(params, 'w') as f:
                f.write('/**:\n  ros__parameters:\n'
                        f'    data_dir: "{cls.data[robot]}"\n'
                        f'    agent: "{robot}"\n'
                        f'    ledger: "{cls.url}"\n'
                        f'    robot: "{robot}"\n'
                        '    commit_period_s: 3600.0\n'
                        '    commit_every_atoms: 1000000\n'
                        f'    believe_from: "{others}"\n'
                        '    topics:\n' + ''.join(
                            f'      {k}: "{topics}/{v}"\n' for k, v in (
                                ('pose', 'pose'), ('odom', 'odom'), ('tf', 'tf'), ('tf_static', 'tf_static'),
                                ('map', 'map'))) +
                        f'      cameras: ["{topics}/camera/image_raw", "{topics}/camera/image_raw/compressed"]\n')
            start(robot, [node, '--ros-args', '-r', f'__ns:=/{robot}', '--params-file', params])

        rclpy.init()
        cls.client = rclpy.create_node('fleet_reader')
        cls.publisher = rclpy.create_node('robot_a_run')
        # Robot A drives; B is told what it saw. Each commits twice.
        cls.first, _ = robot_run.play(cls.publisher, 1.0)
        cls.a1 = ask.commit(cls.client, peer=A)
        assert cls.a1.ok, cls.a1.error
        _, cls.last = robot_run.play(cls.publisher, 1.0)
        cls.a2 = ask.commit(cls.client, peer=A)
        assert cls.a2.ok, cls.a2.error
        for i in range(2):
            request = Remember.Request()
            request.atoms_json = [json.dumps({
                'kind': 'claim', 'frame': 'map', 'min': [1000 * i, 0, 0], 'max': [1000 * i + 500, 500, 500],
                'from': 1, 'to': 2, 'confidence': 900, 'subject': f'pallet-{i}'})]
            remembered = ask.call(cls.client, Remember, f'{B}/remember', request)
            assert remembered.ok, remembered.error
            committed = ask.commit(cls.client, peer=B)
            assert committed.ok, committed.error
        cls.witness_once()
        cls.box = [-10000, -10000, -1000, 10000, 10000, 3000]

    @classmethod
    def witness_once(cls):
        """The witness follows the chain up to its head: every Pulse so far is cosigned (a
        witness runs all the time; here it is asked to catch up before each check)."""
        out = sion('ledger', 'witness', '--ledger', cls.url, '--ledger-key', cls.ledger_key,
                   '--key', cls.witness_key, '--state', os.path.join(cls.work, 'witness.state'), '--once')
        assert out.returncode == 0, out.stdout + out.stderr

    @classmethod
    def tearDownClass(cls):
        cls.client.destroy_node()
        cls.publisher.destroy_node()
        rclpy.shutdown()

    @classmethod
    def stop_processes(cls):
        for p in reversed(cls.processes):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for log in cls.logs:
            log.close()
        shutil.rmtree(cls.work, ignore_errors=True)

    def question(self):
        return dict(frame='map', box=self.box, from_ns=self.first, to_ns=self.last + 1)

    def test_both_robots_commit_to_the_one_fleet_ledger(self):
        # Each robot's log is on the fleet ledger: no ledger of its own, its key pinned.
        logs = set()
        for robot in ('robot_a', 'robot_b'):
            self.assertFalse(os.path.exists(os.path.join(self.data[robot], 'ledger')), robot)
            with open(os.path.join(self.data[robot], 'memory.json')) as f:
                config = json.load(f)
            self.assertEqual((config['ledger_url'], config['ledger_key']), (self.url, self.ledger_key))
            logs.add(config['log'])
        self.assertEqual(len(logs), 2, 'two logs on the one ledger')
        self.assertEqual(bytes(self.a2.head.ledger_key).hex(), self.ledger_key)
        self.assertGreater(self.a2.head.size, self.a1.head.size)

    def test_a_reader_checks_robot_a_against_the_fleet_ledger(self):
        self.witness_once()
        answer = ask.query_range(self.client, 'map', self.box, self.first, self.last + 1, peer=A)
        self.assertTrue(answer.ok, answer.error)
        poses = [a for a in answer.atoms if a.kind == 'pose']
        self.assertGreaterEqual(len(poses), 150)
        # Checked here: the fleet ledger's key and the witness come from the operator and the
        # auditor; nothing robot A says decides it.
        checked = ask.sion_verify.verify(bytes(answer.proof), self.ledger_key, witnesses=[self.witness_public],
                                         quorum=1, **self.question())
        self.assertEqual(checked['cosigned_by'], [self.witness_public])
        self.assertIn(f'these {len(answer.atoms)} atoms are everything', checked['statement'])
        # The Pulse's header, fetched from the fleet ledger by the reader's own tool, is the one
        # the proof carries.
        path = os.path.join(self.work, 'a.sionproof')
        with open(path, 'wb') as f:
            f.write(bytes(answer.proof))
        out = sion('memory', 'verify', '--ledger', self.url, '--ledger-key', self.ledger_key,
                   '--witnesses', self.witnesses, '--expect-frame', 'map',
                   '--expect-box', ','.join(map(str, self.box)), '--expect-from', str(self.first),
                   '--expect-to', str(self.last + 1), path)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn('cosigned by 1 of the 1 witnesses named (quorum 1): auditor', out.stdout)
        # Robot A's header backdated by a second: the ledger's signature no longer holds.
        proof = bytearray(answer.proof)
        time_at = 8 + 1 + 32 + 1 + 8  # magic, attested, ledger key, header version, number
        t = int.from_bytes(proof[time_at:time_at + 8], 'little', signed=True) - 1_000_000_000
        proof[time_at:time_at + 8] = t.to_bytes(8, 'little', signed=True)
        with self.assertRaises(ask.sion_verify.ProofError) as refused:
            ask.sion_verify.verify(bytes(proof), self.ledger_key, **self.question())
        self.assertEqual(refused.exception.code, 'attestation')
        # And a witness the reader does not trust counts for nothing.
        with self.assertRaises(ask.sion_verify.ProofError) as refused:
            ask.sion_verify.verify(bytes(answer.proof), self.ledger_key, witnesses=['11' * 32], **self.question())
        self.assertEqual(refused.exception.code, 'witnesses')

    def test_a_fleet_recall_over_ros_is_complete_across_both_robots(self):
        from builtin_interfaces.msg import Time
        from sion_memory_msgs.srv import FleetRecall
        # B's claims are valid at 1 ns, A's observations now: one interval holds both.
        to_ns = self.last + 1
        request = FleetRecall.Request()
        request.frame_id = '/map'
        request.min.x, request.min.y, request.min.z = (v / 1000 for v in self.box[:3])
        request.max.x, request.max.y, request.max.z = (v / 1000 for v in self.box[3:])
        request.from_time = Time(sec=0, nanosec=0)
        request.to_time = Time(sec=to_ns // 10**9, nanosec=to_ns % 10**9)
        answer = ask.call(self.client, FleetRecall, f'{A}/fleet_recall', request)
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual((answer.logs_in_scope, sorted(answer.agents)), (2, ['robot_a', 'robot_b']))
        self.assertEqual(sum(answer.counts), answer.atoms)
        self.assertEqual(answer.counts[list(answer.agents).index('robot_b')], 2, 'both of B\'s claims')
        # Checked here, against the operator's key: neither robot's word decides it.
        checked = ask.sion_verify.check_fleet(bytes(answer.bundle), self.ledger_key, frame='map', box=self.box,
                                              from_ns=0, to_ns=to_ns)
        self.assertEqual((checked['in_scope'], len(checked['atoms'])), (2, answer.atoms))
        self.assertEqual(checked['pulse'], answer.pulse)
        # By cells (SIONFLT2): only the logs the ledger's cells list in the box; the same atoms.
        request.by_cells = True
        cells = ask.call(self.client, FleetRecall, f'{A}/fleet_recall', request)
        request.by_cells = False
        self.assertTrue(cells.ok, cells.error)
        self.assertEqual(cells.atoms, answer.atoms)
        self.assertTrue(bytes(cells.bundle).startswith(b'SIONFLT2'))
        checked = ask.sion_verify.check_fleet(bytes(cells.bundle), self.ledger_key, frame='map', box=self.box,
                                              from_ns=0, to_ns=to_ns)
        self.assertEqual(len(checked['atoms']), answer.atoms)
        # Robot B alone (a group of one agent); and another group's question is not this one.
        request.group = 'robot_b'
        one = ask.call(self.client, FleetRecall, f'{A}/fleet_recall', request)
        self.assertTrue(one.ok, one.error)
        self.assertEqual((one.logs_in_scope, list(one.agents), list(one.counts)), (1, ['robot_b'], [2]))
        with self.assertRaises(ask.sion_verify.ProofError) as refused:
            ask.sion_verify.check_fleet(bytes(one.bundle), self.ledger_key, frame='map', box=self.box,
                                        from_ns=0, to_ns=to_ns)
        self.assertEqual(refused.exception.code, 'left_out')
        # Robot B's node was given no other memory: it cannot answer for A, and says so.
        request.group = ''
        refused = ask.call(self.client, FleetRecall, f'{B}/fleet_recall', request)
        self.assertFalse(refused.ok)
        self.assertIn('robot_a', refused.error)

    def test_robot_b_checks_robot_a_in_rust(self):
        self.witness_once()
        out = subprocess.run(
            [PEER, 'ask', '--peer', A, '--ledger', self.url, '--ledger-key', self.ledger_key,
             '--witnesses', self.witnesses, '--quorum', '1', '--frame', 'map',
             '--box=' + ','.join(map(str, self.box)), '--from', str(self.first), '--to', str(self.last + 1)],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn(f'VALID answer from {A}', out.stdout)
        self.assertIn('cosigned by 1 witness(es)', out.stdout)
        self.assertIn("is the fleet ledger's", out.stdout)
        self.assertIn('REFUSED backdated header that names its own key: wrong_ledger', out.stdout)
        self.assertIn("REFUSED backdated header that names the fleet's key: attestation", out.stdout)

    def test_a_writer_cannot_rewrite_its_past_on_the_fleet_ledger(self):
        out = subprocess.run([PEER, 'backdate', '--data', self.data['robot_a'], '--ledger', self.url],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn('REFUSED a commit built on the version before the latest: stale', out.stdout)
        self.assertIn('REFUSED the latest version moved back to an older head: shrinks', out.stdout)
        self.assertIn('REFUSED the latest head rewritten (same size, another root): root_changed', out.stdout)
        # Robot A goes on committing after them.
        robot_run.play(self.publisher, 0.3)
        again = ask.commit(self.client, peer=A)
        self.assertTrue(again.ok, again.error)
        self.assertGreater(again.head.size, self.a2.head.size)


if __name__ == '__main__':
    unittest.main()
