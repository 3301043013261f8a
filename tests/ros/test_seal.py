"""A sealed memory behind the node, on a real ROS 2 graph (docs/SEAL.md).

The operator makes the robot's memory sealed and adds a member before the node starts (`sion
memory open --sealed`, `space add`). The node then seals every camera frame and map tile it
keeps: a member asks /sion_memory/payload and opens the answer with their own key (the node never
answers in the clear), a stranger is refused, and /sion_memory/forget forgets a frame so that
no one gets it again while its atom stays proved in the log.

Run by scripts/test.sh inside a loopback-only network namespace, like test_graph.py.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import rclpy
from sion_memory_msgs.srv import Forget, Payload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import ask  # noqa: E402
import robot_run  # noqa: E402

RUN_SECONDS = 2.0
SEALED = 'application/x-sion-sealed'


def sion(*args):
    out = subprocess.run(['sion', *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f'sion {" ".join(args)}: {out.stdout}{out.stderr}')
    return out.stdout


def member_hash(keys):
    """BLAKE3 of a member's public key, as `sion memory space keygen` prints it."""
    out = sion('memory', 'space', 'keygen', '--keys', keys)
    return bytes.fromhex(out.split()[2])


class Sealed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='sion-ros-seal-')
        cls.memory = os.path.join(cls.dir, 'memory')
        sion('memory', 'open', '--data', cls.memory, '--sealed', '--agent', 'robot')
        cls.ana_keys = os.path.join(cls.dir, 'ana')
        cls.ana = member_hash(cls.ana_keys)
        cls.stranger = member_hash(os.path.join(cls.dir, 'stranger'))
        wrap = os.path.join(cls.dir, 'ana.sionwrap')
        sion('memory', 'space', 'add', '--data', cls.memory, '--name', 'ana',
             '--member', os.path.join(cls.ana_keys, 'member.pub'), '--out', wrap)
        sion('memory', 'space', 'join', '--keys', cls.ana_keys, '--wrap', wrap)
        cls.node_log = open(os.path.join(cls.dir, 'node.log'), 'w')
        cls.node = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'),
             os.path.join(ROOT, 'launch', 'robot.launch.py'), f'data_dir:={cls.memory}'],
            stdout=cls.node_log, stderr=subprocess.STDOUT)
        rclpy.init()
        cls.client = rclpy.create_node('sion_seal_test')
        cls.publisher = rclpy.create_node('robot_run')
        cls.first, cls.last = robot_run.play(cls.publisher, RUN_SECONDS)
        cls.committed = ask.commit(cls.client)
        answer = ask.query_range(cls.client, 'map', [-100000, -100000, -100000, 100000, 100000, 100000],
                                 cls.first, cls.last + 1)
        assert answer.ok, answer.error
        key = bytes(cls.committed.head.ledger_key).hex()
        box = (-100000, -100000, -100000, 100000, 100000, 100000)
        cls.checked = ask.verify(answer, key, frame='map', box=box, from_ns=cls.first, to_ns=cls.last + 1)
        cls.frames = [a for a in cls.checked['atoms'] if a['kind'] == 'observation']
        # The default retention keeps one frame's image a second per camera (docs/SEAL.md).
        cls.kept = [a for a in cls.frames if 'blob' in a.get('payload', {})]

    @classmethod
    def tearDownClass(cls):
        cls.client.destroy_node()
        cls.publisher.destroy_node()
        rclpy.shutdown()
        if cls.node.poll() is None:
            cls.node.send_signal(signal.SIGINT)
            cls.node.wait(timeout=60)
        cls.node_log.close()

    def payload(self, position, member):
        request = Payload.Request()
        request.position, request.member = position, list(member)
        return ask.call(self.client, Payload, '/sion_memory/payload', request)

    def forget(self, positions, why):
        request = Forget.Request()
        request.positions, request.who, request.why = positions, 'test', why
        return ask.call(self.client, Forget, '/sion_memory/forget', request)

    def open_answer(self, answer, name):
        """`sion memory open-payload` on a service answer, with Ana's key: the frame as published."""
        paths = {}
        for part in ('atom', 'sealed', 'wrapped_key'):
            paths[part] = os.path.join(self.dir, f'{name}.{part}')
            with open(paths[part], 'wb') as f:
                f.write(bytes(getattr(answer, part)))
        out = os.path.join(self.dir, f'{name}.cdr')
        sion('memory', 'open-payload', '--keys', self.ana_keys, '--wrapped', paths['wrapped_key'],
             '--atom', paths['atom'], '--sealed', paths['sealed'], '--out', out)
        with open(out, 'rb') as f:
            return f.read()

    def test_every_kept_frame_is_sealed(self):
        self.assertTrue(self.committed.ok, self.committed.error)
        # robot_run publishes a frame every 20 steps of 10 ms: every one remembered; one image a
        # second kept (retention's every_s), and sealed; the others without their image.
        self.assertEqual(len(self.frames), int(RUN_SECONDS * 100) // 20)
        self.assertEqual(len(self.kept), int(RUN_SECONDS))
        for atom in self.kept:
            self.assertTrue(atom['payload']['blob']['media_type'].startswith(SEALED + '; epoch='), json.dumps(atom))
        tiles = [a for a in self.checked['atoms'] if a['kind'] == 'map_tile']
        self.assertTrue(tiles and all(a['payload']['blob']['media_type'].startswith(SEALED) for a in tiles))

    def test_a_member_opens_a_frame_the_service_hands_out(self):
        position = self.kept[0]['position']
        answer = self.payload(position, self.ana)
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual(len(answer.wrapped_key), 1281)
        frame = self.open_answer(answer, 'frame0')
        # A 320 × 240 rgb8 image of one shade (its data, last in the message), as robot_run
        # publishes it, byte for byte.
        self.assertIn(bytes([frame[-1]]) * (320 * 240 * 3), frame)
        self.assertEqual(frame[:4], b'\x00\x01\x00\x00', 'not CDR as published')

    def test_a_stranger_is_refused_and_nothing_is_in_the_clear(self):
        position = self.kept[0]['position']
        answer = self.payload(position, self.stranger)
        self.assertFalse(answer.ok)
        self.assertIn('no member', answer.error)
        bad = self.payload(position, b'\x01' * 5)
        self.assertFalse(bad.ok)
        self.assertIn('32', bad.error)

    def test_a_forgotten_frame_is_handed_out_to_no_one_and_its_atom_stays_proved(self):
        position = self.kept[-1]['position']
        self.assertTrue(self.payload(position, self.ana).ok)
        done = self.forget([position], 'a person asked')
        self.assertTrue(done.ok, done.error)
        self.assertEqual(len(done.forget_positions), 1)
        again = self.payload(position, self.ana)
        self.assertFalse(again.ok)
        self.assertIn('forgotten', again.error)
        # A pose's payload is not sealed: nothing to forget, and nothing forgotten.
        poses = [a for a in self.checked['atoms'] if a['kind'] == 'pose']
        refused = self.forget([poses[0]['position']], 'not sealed')
        self.assertFalse(refused.ok)
        self.assertIn('only sealed payloads can be forgotten', refused.error)
        # Committed: the forget atom is in the log, the frame's atom is still answered and proved.
        committed = ask.commit(self.client)
        self.assertTrue(committed.ok, committed.error)
        listed = ask.query_subject(self.client, 'sion/forget')
        self.assertTrue(listed.ok, listed.error)
        self.assertEqual([a.position for a in listed.atoms], list(done.forget_positions))
        answer = ask.query_range(self.client, 'map', [-100000, -100000, -100000, 100000, 100000, 100000],
                                 self.first, self.last + 1)
        self.assertIn(position, [a.position for a in answer.atoms])
        # Ana honours it (from the committed log) and her own key no longer opens it either.
        out = sion('memory', 'space', 'honour', '--data', self.memory, '--keys', self.ana_keys)
        self.assertIn('honoured 1 forget atom', out)


class SealedRetention(unittest.TestCase):
    """The brain's retention phase on the node: camera frames kept for 2 s of stamps, every
    frame's image kept, segments of 1 KiB (robot_run's one-shade frames seal to a few hundred
    bytes), a check every half second. What fell out is forgotten with forget atoms that say
    who and why, and its segments are gone from the disk."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='sion-ros-retention-')
        cls.memory = os.path.join(cls.dir, 'memory')
        sion('memory', 'open', '--data', cls.memory, '--sealed', '--agent', 'robot')
        with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
            config = f.read()
        config = (config.replace('keep_s: 604800.0', 'keep_s: 2.0')
                  .replace('every_s: 1.0', 'every_s: 0.0')
                  .replace('check_s: 10.0', 'check_s: 0.5'))
        cls.config = os.path.join(cls.dir, 'robot.yaml')
        with open(cls.config, 'w') as f:
            f.write(config)
        cls.node_log = open(os.path.join(cls.dir, 'node.log'), 'w')
        cls.node = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'),
             os.path.join(ROOT, 'launch', 'robot.launch.py'), f'data_dir:={cls.memory}', f'config:={cls.config}'],
            stdout=cls.node_log, stderr=subprocess.STDOUT, env={**os.environ, 'SION_SEGMENT_KIB': '1'})
        rclpy.init()
        cls.client = rclpy.create_node('sion_retention_test')
        cls.publisher = rclpy.create_node('robot_run')
        robot_run.play(cls.publisher, 6.0)
        time.sleep(1.5)  # three checks of retention after the last frame
        cls.committed = ask.commit(cls.client)

    @classmethod
    def tearDownClass(cls):
        cls.client.destroy_node()
        cls.publisher.destroy_node()
        rclpy.shutdown()
        if cls.node.poll() is None:
            cls.node.send_signal(signal.SIGINT)
            cls.node.wait(timeout=60)
        cls.node_log.close()

    def test_old_frames_are_forgotten_and_their_segments_gone(self):
        self.assertTrue(self.committed.ok, self.committed.error)
        forgets = ask.query_subject(self.client, 'sion/forget')
        self.assertTrue(forgets.ok, forgets.error)
        self.assertGreater(len(forgets.atoms), 0, 'nothing was forgotten')
        key = bytes(self.committed.head.ledger_key).hex()
        checked = ask.verify(forgets, key, subject='sion/forget')
        first_kept = None
        for atom in checked['atoms']:
            record = json.loads(atom['payload']['text'])
            self.assertEqual(record['who'], 'retention')
            self.assertIn('camera payloads older than 2 s', record['why'])
            [[epoch, start, end]] = record['leaves']
            first_kept = max(first_kept or 0, end)
        # No segment left on disk holds a forgotten leaf: each begins at or past the last cut.
        lane = os.path.join(self.memory, 'lanes', 'camera')
        firsts = [int(name.split('-L')[1].split('.')[0], 16) for name in os.listdir(lane)]
        self.assertTrue(firsts and all(f >= first_kept for f in firsts), (firsts, first_kept))

if __name__ == '__main__':
    unittest.main()
