"""The sion_memory node on a real ROS 2 graph (rcl + Fast DDS), driven by rclpy.

Run by scripts/test.sh inside a network namespace with only loopback up:

    unshare -n bash -c 'ip link set lo up && python3 -m unittest discover -s tests/ros -v'

It brings the node up from launch/robot.launch.py (through scripts/launch.py), plays a generated
robot run with a few malformed messages onto its topics, and checks the answers, their proofs,
the counters and that the node keeps serving.
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
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import Log
from sion_memory_msgs.msg import Head, Stats
from sion_memory_msgs.srv import Remember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import ask  # noqa: E402
import launch as launcher  # noqa: E402
import robot_run  # noqa: E402

RUN_SECONDS = 3.0


class Graph(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = tempfile.mkdtemp(prefix='sion-ros-test-')
        cls.node_log = open(os.path.join(cls.data, 'node.log'), 'w')
        cls.node = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'),
             os.path.join(ROOT, 'launch', 'robot.launch.py'), f'data_dir:={cls.data}/memory'],
            stdout=cls.node_log, stderr=subprocess.STDOUT)
        rclpy.init()
        cls.client = rclpy.create_node('sion_test')
        cls.stats, cls.heads = [], []
        cls.client.create_subscription(Stats, '/sion_memory/stats', cls.stats.append, 10)
        latched = rclpy.qos.QoSProfile(depth=1, durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL)
        cls.client.create_subscription(Head, '/sion_memory/head', cls.heads.append, latched)
        # The node logs through rcl: its lines are on /rosout (kept for late joiners, as rcl's
        # rosout publisher is transient local).
        cls.rosout = []
        rosout_qos = rclpy.qos.QoSProfile(depth=1000, durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL)
        cls.client.create_subscription(Log, '/rosout', cls.rosout.append, rosout_qos)
        cls.diagnostics = []
        cls.client.create_subscription(DiagnosticArray, '/diagnostics', cls.diagnostics.append, 10)
        cls.publisher = rclpy.create_node('robot_run')
        cls.first, cls.last = robot_run.play(cls.publisher, RUN_SECONDS, bad=True)
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

    def spin_until(self, condition, seconds=10.0):
        deadline = time.time() + seconds
        while time.time() < deadline and not condition():
            rclpy.spin_once(self.client, timeout_sec=0.1)
        return condition()

    def verify(self, answer, **question):
        """Check the proof here (sion_verify), against the ledger key the node published on its
        committed head and the question asked; also through the node's own service."""
        key = bytes(self.committed.head.ledger_key).hex()
        checked = ask.verify(answer, key, **question)
        by_node = ask.verify_by_node(self.client, answer.proof)
        self.assertTrue(by_node.ok, by_node.error)
        self.assertEqual(by_node.statement, checked['statement'])
        return checked

    def verify_offline(self, proof):
        """`sion memory verify` on the proof bytes, as a file, against the ledger's key."""
        path = os.path.join(self.data, 'answer.sionproof')
        with open(path, 'wb') as f:
            f.write(bytes(proof))
        # The node holds the ledger open, so the key comes from the published head.
        key = bytes(self.committed.head.ledger_key).hex()
        out = subprocess.run(['sion', 'memory', 'verify', '--ledger-key', key, path],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn('VALID', out.stdout)

    def test_the_log_is_on_rosout(self):
        def seen(level, text):
            return any(m.name == 'sion_memory' and m.level == level and text in m.msg for m in self.rosout)
        self.assertTrue(self.spin_until(lambda: seen(Log.INFO, 'sion_memory is up')),
                        [(m.name, m.level, m.msg[:80]) for m in self.rosout][:20])
        # A refusal is a warning, at the ROS level of one.
        self.assertTrue(self.spin_until(lambda: seen(Log.WARN, 'refused'), seconds=15),
                        [(m.name, m.level, m.msg[:80]) for m in self.rosout][:20])

    def test_health_is_on_diagnostics(self):
        """/diagnostics: the intake, the disk, the log and the ledger's commits, each with its
        level; the bad messages of the run show as a warning of the intake."""
        names = {'sion_memory: intake', 'sion_memory: disk', 'sion_memory: log', 'sion_memory: ledger'}
        self.assertTrue(self.spin_until(lambda: any({st.name for st in a.status} == names for a in self.diagnostics)),
                        [[st.name for st in a.status] for a in self.diagnostics][:3])
        self.assertTrue(self.spin_until(lambda: any(st.name == 'sion_memory: intake' and st.level == DiagnosticStatus.WARN
                                                    and 'refused' in st.message
                                                    for a in self.diagnostics for st in a.status), seconds=15))
        last = {st.name: st for st in self.diagnostics[-1].status}
        self.assertEqual(last['sion_memory: disk'].level, DiagnosticStatus.OK, last['sion_memory: disk'].message)
        values = {kv.key: kv.value for kv in last['sion_memory: log'].values}
        self.assertGreater(int(values['atoms']), 0)
        self.assertEqual(last['sion_memory: ledger'].hardware_id, 'robot')

    def test_parameters_are_ros_parameters(self):
        """ros2 param get/set/describe through the node's parameter services: a live parameter
        takes effect (and says so on /rosout); one read at start says that it waits for the next."""
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import DescribeParameters, GetParameters, SetParameters

        def set_one(name, value):
            v = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value) if isinstance(value, float) \
                else ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
            return ask.call(self.client, SetParameters, '/sion_memory/set_parameters',
                            SetParameters.Request(parameters=[Parameter(name=name, value=v)]))

        def said(text):
            return lambda: any(m.name == 'sion_memory' and text in m.msg for m in self.rosout)
        got = ask.call(self.client, GetParameters, '/sion_memory/get_parameters',
                       GetParameters.Request(names=['commit_period_s', 'fixed_frame']))
        self.assertEqual(got.values[1].string_value, 'map')
        described = ask.call(self.client, DescribeParameters, '/sion_memory/describe_parameters',
                             DescribeParameters.Request(names=['ledger']))
        self.assertIn("or an embedded ledger's directory", described.descriptors[0].description)
        self.assertTrue(set_one('commit_period_s', 2.5).results[0].successful)
        self.assertTrue(self.spin_until(said('parameter commit_period_s set to Double(2.5): in force')),
                        [m.msg for m in self.rosout if 'parameter' in m.msg])
        got = ask.call(self.client, GetParameters, '/sion_memory/get_parameters',
                       GetParameters.Request(names=['commit_period_s']))
        self.assertEqual(got.values[0].double_value, 2.5)
        # The node's memory is sealed (the default): how many frames a second keep their image
        # changes live too.
        self.assertTrue(set_one('retention.camera.every_s', 0.5).results[0].successful)
        self.assertTrue(self.spin_until(said('parameter retention.camera.every_s set to Double(0.5): in force')))
        set_one('retention.camera.every_s', 1.0)
        set_one('robot', 'another')
        self.assertTrue(self.spin_until(said('parameter robot set to String("another"): it is read when the node starts')))
        set_one('commit_period_s', -1.0)
        self.assertTrue(self.spin_until(said('commit_period_s must be from 0 to 86400 s, not -1: refused')))
        set_one('commit_period_s', 5.0)

    def test_commit_answers_with_the_head(self):
        self.assertTrue(self.committed.ok, self.committed.error)
        steps = int(RUN_SECONDS * 100)
        # Poses, odometry and its transforms, images, statics, the map: all of it committed.
        self.assertGreaterEqual(self.committed.head.size, steps + steps // 2 * 2 + steps // 20 + 3)
        self.assertTrue(self.spin_until(lambda: any(h.size >= self.committed.head.size for h in self.heads)),
                        'the committed head was not published on /sion_memory/head')

    def test_a_question_in_metres_and_ros_time(self):
        """~/recall: the box in metres (geometry_msgs/Point), the interval as ROS Time, the frame
        as tf2 writes it; the same atoms as ~/query_range in millimetres, and a proof that checks
        here against the question asked in metres. A question that cannot match is answered,
        proved, and warned about, naming what the memory holds."""
        box_mm = [0, 0, -1000, 5000, 5000, 3000]
        in_mm = ask.query_range(self.client, 'map', box_mm, self.first, self.last + 1)
        from_time, to_time = ask.stamp(self.first), ask.stamp(self.last + 1)
        request = ask.Recall.Request()
        request.frame_id = '/map'
        request.min = ask.Point(x=0.0, y=0.0, z=-1.0)
        request.max = ask.Point(x=5.0, y=5.0, z=3.0)
        request.from_time, request.to_time = from_time, to_time
        answer = ask.call(self.client, ask.Recall, '/sion_memory/recall', request)
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual(list(answer.warnings), [])
        self.assertEqual([a.position for a in answer.atoms], [a.position for a in in_mm.atoms])
        checked = self.verify(answer, frame='/map', box_m=(0, 0, -1, 5, 5, 3), from_time=from_time, to_time=to_time)
        self.assertIn(f'these {len(answer.atoms)} atoms are everything', checked['statement'])
        # A frame the memory never recorded: an empty answer, proved, and a warning.
        request.frame_id = 'base_footprint'
        unknown = ask.call(self.client, ask.Recall, '/sion_memory/recall', request)
        self.assertTrue(unknown.ok, unknown.error)
        self.assertEqual(len(unknown.atoms), 0)
        self.assertEqual(len(unknown.warnings), 1, list(unknown.warnings))
        self.assertIn('holds no frame "base_footprint"; it holds', unknown.warnings[0])
        self.assertIn('"map"', unknown.warnings[0])
        self.verify(unknown, frame='base_footprint', box_m=(0, 0, -1, 5, 5, 3), from_time=from_time, to_time=to_time)
        # Seconds given as nanoseconds: 1970, and the span the frame holds.
        request.frame_id = 'map'
        request.from_time, request.to_time = ask.stamp(self.first // 10**9), ask.stamp(self.last // 10**9)
        early = ask.call(self.client, ask.Recall, '/sion_memory/recall', request)
        self.assertTrue(early.ok, early.error)
        self.assertTrue(any('1970' in w and 'misses every atom' in w for w in early.warnings), list(early.warnings))
        # A bad value names its field.
        request.from_time, request.to_time = from_time, to_time
        request.max = ask.Point(x=float('nan'), y=5.0, z=3.0)
        bad = ask.call(self.client, ask.Recall, '/sion_memory/recall', request)
        self.assertFalse(bad.ok)
        self.assertIn('min, max', bad.error)

    def test_kinds_counts_last_seen_and_nearest_are_ros_services(self):
        """~/recall with kinds, ~/count, ~/last_seen and ~/nearest, asked in metres and ROS Time:
        each answer equals what a range answer shows, and its proof checks here against the
        question asked."""
        from_time, to_time = ask.stamp(self.first), ask.stamp(self.last + 1)
        box_m = (0, 0, -1, 5, 5, 3)

        def box_question(request, kinds=()):
            request.frame_id = 'map'
            request.min = ask.Point(x=0.0, y=0.0, z=-1.0)
            request.max = ask.Point(x=5.0, y=5.0, z=3.0)
            request.from_time, request.to_time = from_time, to_time
            request.kinds = list(kinds)
            return request

        everything = ask.call(self.client, ask.Recall, '/sion_memory/recall', box_question(ask.Recall.Request()))
        self.assertTrue(everything.ok, everything.error)
        poses = ask.call(self.client, ask.Recall, '/sion_memory/recall', box_question(ask.Recall.Request(), ['pose']))
        self.assertTrue(poses.ok, poses.error)
        self.assertEqual([a.position for a in poses.atoms], [a.position for a in everything.atoms if a.kind == 'pose'])
        self.assertLess(len(poses.atoms), len(everything.atoms))
        checked = self.verify(poses, frame='map', box_m=box_m, from_time=from_time, to_time=to_time, kinds=['pose'])
        self.assertIn('of kind pose', checked['statement'])

        count = ask.call(self.client, ask.Count, '/sion_memory/count', box_question(ask.Count.Request(), ['pose']))
        self.assertTrue(count.ok, count.error)
        self.assertEqual(count.count, len(poses.atoms))
        self.assertGreater(count.seconds, 0)
        self.assertEqual(ask.ns(count.first_time), min(max(a.from_ns, self.first) for a in poses.atoms))
        box = [0, 0, -1000, 5000, 5000, 3000]
        self.verify(count, count={'frame': 'map', 'box': box, 'from_ns': self.first, 'to_ns': self.last + 1,
                                  'kinds': ['pose']})

        last = ask.call(self.client, ask.LastSeen, '/sion_memory/last_seen', box_question(ask.LastSeen.Request(), ['pose']))
        self.assertTrue(last.ok and last.found, last.error)
        latest = max(poses.atoms, key=lambda a: (a.to_ns, a.position))
        self.assertEqual(last.atom.position, latest.position)
        self.verify(last, latest={'frame': 'map', 'box': box, 'from_ns': self.first, 'to_ns': self.last + 1,
                                  'kinds': ['pose']})

        near = ask.Nearest.Request()
        near.frame_id, near.point, near.k = '/map', ask.Point(x=5.0, y=0.0, z=0.0), 3
        near.from_time, near.to_time = from_time, to_time
        nearest = ask.call(self.client, ask.Nearest, '/sion_memory/nearest', near)
        self.assertTrue(nearest.ok, nearest.error)
        self.assertEqual(len(nearest.atoms), 3)
        self.assertEqual(list(nearest.distances_m), sorted(nearest.distances_m))
        self.verify(nearest, nearest={'frame': 'map', 'point': [5000, 0, 0], 'from_ns': self.first,
                                      'to_ns': self.last + 1, 'k': 3})
        bad = ask.call(self.client, ask.Count, '/sion_memory/count', box_question(ask.Count.Request(), ['person']))
        self.assertFalse(bad.ok)
        self.assertIn('not a kind of atom', bad.error)

    def test_a_box_on_the_path_gets_its_poses_with_a_proof(self):
        # The first quarter circle: x in [0, 5] m, y in [0, 5] m.
        box = [0, 0, -1000, 5000, 5000, 3000]
        answer = ask.query_range(self.client, 'map', box, self.first, self.last + 1)
        self.assertTrue(answer.ok, answer.error)
        poses = [a for a in answer.atoms if a.kind == 'pose']
        expected = 0
        for i in range(int(RUN_SECONDS * 100)):
            x, y, _ = robot_run.where(i / 100)
            if 0 <= round(x * 1000) <= 5000 and 0 <= round(y * 1000) <= 5000:
                expected += 1
        self.assertEqual(len(poses), expected)
        for atom in poses:
            self.assertTrue(all(lo <= v <= hi for lo, v, hi in zip(box[:3], atom.min_mm, box[3:])))
            self.assertTrue(self.first <= atom.from_ns <= self.last)
        kinds = {a.kind for a in answer.atoms}
        self.assertTrue({'pose', 'observation', 'map_tile', 'transform'} <= kinds, kinds)
        checked = self.verify(answer, frame='map', box=box, from_ns=self.first, to_ns=self.last + 1)
        self.assertEqual(checked['kind'], 'range')
        self.assertIn(f'these {len(answer.atoms)} atoms are everything', checked['statement'])
        self.assertEqual([a['position'] for a in checked['atoms']], [a.position for a in answer.atoms])
        self.verify_offline(answer.proof)
        # The same valid proof is refused for a reader who asked about a bigger box.
        bigger = [box[0] - 1] + box[1:]
        with self.assertRaises(ask.sion_verify.ProofError) as refused:
            self.verify(answer, frame='map', box=bigger, from_ns=self.first, to_ns=self.last + 1)
        self.assertEqual(refused.exception.code, 'other_question')

    def test_an_empty_box_gets_an_empty_answer_that_verifies(self):
        answer = ask.query_range(self.client, 'map', [50000, 50000, 0, 60000, 60000, 10], self.first, self.last)
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual(list(answer.atoms), [])
        box = [50000, 50000, 0, 60000, 60000, 10]
        checked = self.verify(answer, frame='map', box=box, from_ns=self.first, to_ns=self.last)
        self.assertIn('these 0 atoms are everything', checked['statement'])
        self.verify_offline(answer.proof)

    def test_a_tampered_proof_is_rejected(self):
        answer = ask.query_range(self.client, 'map', [0, 0, -1000, 5000, 5000, 3000], self.first, self.last)
        proof = bytearray(answer.proof)
        proof[len(proof) // 2] ^= 1
        with self.assertRaises(ask.sion_verify.ProofError):
            ask.sion_verify.verify(bytes(proof), bytes(self.committed.head.ledger_key).hex())
        self.assertFalse(ask.verify_by_node(self.client, proof).ok)

    def test_bad_questions_get_errors_not_silence(self):
        answer = ask.query_range(self.client, 'map', [10, 0, 0, 0, 0, 0], self.first, self.last)
        self.assertFalse(answer.ok)
        self.assertIn('min[0] = 10 mm is above max[0]', answer.error)
        answer = ask.query_range(self.client, 'map', [0, 0, 0, 1, 1, 1], self.first, self.last, as_of=123456789)
        self.assertFalse(answer.ok)
        self.assertIn('no committed head', answer.error)

    def test_malformed_messages_are_counted_and_the_node_keeps_serving(self):
        steps = int(RUN_SECONDS * 100)

        def latest():
            return {s.stream: s for s in self.stats[-1].streams} if self.stats else {}

        def settled():
            streams = latest()
            pose = streams.get('pose')
            return pose is not None and pose.messages == steps + 1 and all(
                dict(zip(streams[k].reject_reasons, streams[k].reject_counts)) == v
                for k, v in expected.items() if k in streams)
        # The frame from 'thermal' waits for a transform that never comes, then is refused.
        expected = {'pose': {'nan': 1}, 'image': {'unknown_encoding': 1, 'malformed_image': 1, 'unknown_frame': 1}}
        self.assertTrue(self.spin_until(settled), f'stats: {latest()}')
        streams = latest()
        self.assertEqual(set(expected) - set(streams), set())
        pose, odom = streams['pose'], streams['odom']
        self.assertEqual(pose.remembered, steps)
        self.assertEqual(odom.remembered, steps // 2)
        self.assertGreater(pose.durable_p99_ms, 0.0)
        answer = ask.query_subject(self.client, 'robot')
        self.assertTrue(answer.ok, answer.error)
        self.assertEqual(sum(a.kind == 'pose' for a in answer.atoms), pose.remembered + odom.remembered)
        self.verify(answer, subject='robot')
        self.assertIsNone(self.node.poll(), 'the node stopped')

    def test_answers_are_drawn_for_rviz_and_foxglove(self):
        """Each answered question is published on ~/answer as a visualization_msgs/MarkerArray in
        the question's frame, which RViz2 and Foxglove draw with no plugin: a DELETEALL, the
        question's box, the answer's atoms by kind (one box of 12 edges each, a point atom as a
        20 cm box), the proof's tree walk in three namespaces a viewer can hide, and the verdict.
        With markers.around_m set while the node runs, ~/around draws the memory around the
        robot's last pose, proved like any answer."""
        from collections import Counter

        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters
        from visualization_msgs.msg import Marker, MarkerArray

        latched = rclpy.qos.QoSProfile(depth=1, durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL)
        answers, around = [], []
        subs = [self.client.create_subscription(MarkerArray, '/sion_memory/answer', answers.append, latched),
                self.client.create_subscription(MarkerArray, '/sion_memory/around', around.append, 10)]
        box_mm = [0, 0, -1000, 5000, 5000, 3000]
        answer = ask.recall(self.client, 'map', box_mm, self.first, self.last + 1)
        self.assertTrue(answer.ok, answer.error)
        n = len(answer.atoms)

        def drawn(arrays, title, count=None):
            return [a for a in arrays if any(
                m.ns == 'verdict' and m.text.startswith(title) and (count is None or f': {count} atoms' in m.text)
                for m in a.markers)]
        self.assertTrue(self.spin_until(lambda: drawn(answers, '~/recall', n), 20), [
            m.text for a in answers for m in a.markers if m.ns == 'verdict'])
        array = drawn(answers, '~/recall', n)[-1].markers
        self.assertEqual(array[0].action, Marker.DELETEALL)
        self.assertTrue(all(m.header.frame_id == 'map' for m in array))
        by_ns = {m.ns: m for m in array[1:]}

        def extent(points):
            return ([min(getattr(p, a) for p in points) for a in 'xyz'],
                    [max(getattr(p, a) for p in points) for a in 'xyz'])
        question = by_ns['question']
        self.assertEqual(question.type, Marker.LINE_LIST)
        self.assertEqual(len(question.points), 24)
        lo, hi = extent(question.points)
        self.assertEqual([round(v * 1000) for v in lo + hi], box_mm)
        # Each kind's namespace holds one box per atom of the answer, in the answer's order.
        kinds = Counter(a.kind for a in answer.atoms)
        self.assertTrue({'pose', 'observation'} <= set(kinds), kinds)
        self.assertEqual({ns.removeprefix('answer/') for ns in by_ns if ns.startswith('answer/')}, set(kinds))
        for kind, count in kinds.items():
            points = by_ns[f'answer/{kind}'].points
            self.assertEqual(len(points), 24 * count, kind)
            atoms = [a for a in answer.atoms if a.kind == kind]
            for i, atom in enumerate(atoms):
                lo, hi = extent(points[24 * i:24 * (i + 1)])
                for axis in range(3):
                    size = atom.max_mm[axis] - atom.min_mm[axis]
                    centre = (atom.min_mm[axis] + atom.max_mm[axis]) / 2000
                    self.assertAlmostEqual((lo[axis] + hi[axis]) / 2, centre, delta=0.002)
                    self.assertAlmostEqual(hi[axis] - lo[axis], max(size, 200) / 1000, delta=0.002)
        # The proof's layer: what the check opened, and what it passed over whole.
        self.assertIn('proof/opened', by_ns)
        self.assertTrue(all(len(by_ns[ns].points) % 24 == 0 for ns in by_ns if ns.startswith('proof/')))
        verdict = by_ns['verdict']
        self.assertEqual(verdict.type, Marker.TEXT_VIEW_FACING)
        self.assertIn(f'✓ proof verifies: {n} atoms, complete', verdict.text)

        def set_around(metres):
            v = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=metres)
            return ask.call(self.client, SetParameters, '/sion_memory/set_parameters',
                            SetParameters.Request(parameters=[Parameter(name='markers.around_m', value=v)]))
        self.assertTrue(set_around(3.0).results[0].successful)
        try:
            self.assertTrue(self.spin_until(lambda: drawn(around, 'around the robot'), 20), 'nothing on ~/around')
        finally:
            set_around(0.0)
        array = drawn(around, 'around the robot')[-1].markers
        by_ns = {m.ns: m for m in array[1:]}
        lo, hi = extent(by_ns['question'].points)
        # Three metres each way around the robot's last pose, where the run ended.
        x, y, _ = robot_run.where((int(RUN_SECONDS * 100) - 1) / 100)
        self.assertAlmostEqual((lo[0] + hi[0]) / 2, x, delta=0.002)
        self.assertAlmostEqual((lo[1] + hi[1]) / 2, y, delta=0.002)
        self.assertAlmostEqual(hi[0] - lo[0], 6.0, delta=0.002)
        self.assertIn('answer/pose', by_ns)
        self.assertIn('✓ proof verifies', by_ns['verdict'].text)
        for sub in subs:
            self.client.destroy_subscription(sub)

    def test_remembered_atoms_are_answered_after_a_commit(self):
        request = Remember.Request()
        request.atoms_json = ['{"kind":"claim","frame":"map","min":[1,2,3],"max":[4,5,6],'
                              '"from":1,"to":2,"confidence":900,"subject":"pallet-17"}']
        remembered = ask.call(self.client, Remember, '/sion_memory/remember', request)
        self.assertTrue(remembered.ok, remembered.error)
        committed = ask.commit(self.client)
        self.assertGreater(committed.head.size, remembered.positions[0])
        answer = ask.query_subject(self.client, 'pallet-17')
        self.assertEqual([a.id for a in answer.atoms], list(remembered.ids))
        self.verify(answer, subject='pallet-17', at_least=committed.head.size)
        # A head from before still answers, as of then.
        old = ask.query_subject(self.client, 'pallet-17', as_of=self.committed.head.size)
        self.assertTrue(old.ok, old.error)
        self.assertEqual(list(old.atoms), [])
        bad = Remember.Request()
        bad.atoms_json = ['{"kind":"claim","frame":"map","min":[1,2,3],"max":[0,5,6],"from":1,"to":2,"confidence":900}']
        refused = ask.call(self.client, Remember, '/sion_memory/remember', bad)
        self.assertFalse(refused.ok)
        self.assertIn('atom 0', refused.error)


class SimTime(unittest.TestCase):
    """use_sim_time: the node stamps what it publishes with /clock, as a simulation or a bag
    played with --clock sets it, not with the wall clock."""

    def test_the_node_follows_clock(self):
        from rosgraph_msgs.msg import Clock
        from builtin_interfaces.msg import Time
        work = tempfile.mkdtemp(prefix='sion-simtime-test-')
        with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
            config = f.read().replace('use_sim_time: false', 'use_sim_time: true ', 1)
        self.assertIn('use_sim_time: true', config)
        with open(os.path.join(work, 'robot.yaml'), 'w') as f:
            f.write(config)
        with open(os.path.join(work, 'node.log'), 'w') as log:
            node = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'), os.path.join(ROOT, 'launch', 'robot.launch.py'),
                 f'data_dir:={work}/memory', f'config:={work}/robot.yaml'],
                stdout=log, stderr=subprocess.STDOUT)
        rclpy.init()
        client = rclpy.create_node('sim_clock')
        try:
            stats = []
            client.create_subscription(Stats, '/sion_memory/stats', stats.append, 10)
            clock = client.create_publisher(Clock, '/clock', 10)
            deadline = time.time() + 30
            # Simulated time: 42 s after its zero, a tenth of a second a tick.
            t = 42.0
            while time.time() < deadline and not any(42 <= s.stamp.sec < 1000 for s in stats):
                clock.publish(Clock(clock=Time(sec=int(t), nanosec=int((t % 1) * 1e9))))
                t += 0.1
                rclpy.spin_once(client, timeout_sec=0.1)
            self.assertTrue(any(42 <= s.stamp.sec < 1000 for s in stats), [s.stamp.sec for s in stats][:10])
        finally:
            client.destroy_node()
            rclpy.shutdown()
            node.send_signal(signal.SIGINT)
            node.wait(timeout=60)


class BagBothWays(unittest.TestCase):
    """One generated run, played onto the node's topics and replayed from the bag with
    `sion replay`: the same atoms, byte for byte."""

    def test_the_node_and_replay_make_the_same_atoms_from_one_bag(self):
        work = tempfile.mkdtemp(prefix='sion-bag-test-')
        bag = os.path.join(work, 'run.mcap')
        subprocess.run(['sion', 'bag', 'synth', '--out', bag, '--seconds', '12'], check=True, capture_output=True)
        # `sion replay` makes a memory in the clear; so does the node here (it seals by default).
        with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
            config = f.read().replace('sealed: true ', 'sealed: false', 1)
        self.assertIn('sealed: false', config)
        with open(os.path.join(work, 'robot.yaml'), 'w') as f:
            f.write(config)
        with open(os.path.join(work, 'node.log'), 'w') as log:
            node = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'),
                 os.path.join(ROOT, 'launch', 'robot.launch.py'), f'data_dir:={work}/live',
                 f'config:={work}/robot.yaml'],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                played = subprocess.run(['bag_play', bag, '--rate', '2'], capture_output=True, text=True, timeout=120)
                self.assertEqual(played.returncode, 0, played.stderr)
            finally:
                node.send_signal(signal.SIGINT)
                node.wait(timeout=60)
        # Stopped under load, cleanly: the last commit published, no publisher used after the
        # node is gone (it logged `could not publish the head: RCL_RET_PUBLISHER_INVALID`).
        with open(os.path.join(work, 'node.log')) as log:
            stopping = log.read().split('stopping:', 1)
        self.assertEqual(len(stopping), 2, 'the node did not say it was stopping')
        self.assertIn('stopped with', stopping[1])
        for bad in ('RCL_RET', 'could not publish', 'WARN', 'ERROR'):
            self.assertNotIn(bad, stopping[1])
        replayed = subprocess.run(['sion', 'replay', bag, '--data', f'{work}/replayed'], capture_output=True, text=True)
        self.assertEqual(replayed.returncode, 0, replayed.stdout + replayed.stderr)

        def ingested(data):
            out = subprocess.run(['sion', 'memory', 'dump', '--data', data], capture_output=True, text=True, check=True)
            atoms = [json.loads(line) for line in out.stdout.splitlines()]
            # The node's memory also holds what its brain derived; the ingest's atoms name the
            # message type and topic they came from.
            return sorted(a['id'] for a in atoms if '@/' in a.get('extractor', {}).get('model', ''))
        live, offline = ingested(f'{work}/live'), ingested(f'{work}/replayed')
        # Poses, odometry, TF, the statics, maps, frames, and the camera's calibration once.
        self.assertEqual(len(offline), 600 * 3 + 2 + 2 + 60 + 1)
        # Within a topic DDS keeps the order; across topics the node logs them as they arrive,
        # so the logs are compared as sets of atoms (each id hashes the atom's every byte).
        self.assertEqual(live, offline)


class Launch(unittest.TestCase):
    """The launch file against the package: what it starts exists and is configured only with
    parameters the node declares."""

    def test_the_launch_file_names_the_installed_node_and_declared_parameters(self):
        description = launcher.load_description(os.path.join(ROOT, 'launch', 'robot.launch.py'))
        commands = launcher.node_commands(description, {})
        self.assertEqual(len(commands), 1)
        command = commands[0]
        self.assertTrue(os.access(command[0], os.X_OK), command[0])
        self.assertEqual(os.path.basename(command[0]), 'sion_memory_node')
        declared = set(subprocess.run([command[0], '--list-parameters'], capture_output=True, text=True,
                                      check=True).stdout.split())
        self.assertIn('topics.pose', declared)
        # Every description whole in --help (each ended mid-sentence where its comment wrapped).
        help_text = ' '.join(subprocess.run([command[0], '--help'], capture_output=True, text=True,
                                            check=True).stdout.split())
        for whole in ("or an embedded ledger's directory (default", "An existing memory keeps what its memory.json says",
                      "the node's own user (read, remember, forget, share, admin, or several joined by commas)"):
            self.assertIn(whole, help_text)

        import yaml
        files = [command[i + 1] for i, a in enumerate(command) if a == '--params-file']
        self.assertEqual(len(files), 1)
        self.assertTrue(os.path.samefile(files[0], os.path.join(ROOT, 'config', 'robot.yaml')), files)
        with open(files[0]) as f:
            config = yaml.safe_load(f)
        node_name = command[command.index('-r') + 1].split(':=')[1]
        self.assertEqual(list(config), [node_name])

        def flatten(tree, prefix=''):
            for key, value in tree.items():
                if isinstance(value, dict):
                    yield from flatten(value, f'{prefix}{key}.')
                else:
                    yield f'{prefix}{key}'
        named = set(flatten(config[node_name]['ros__parameters']))
        self.assertEqual(named - declared, set(), 'the config names parameters the node does not declare')
        # The Fast DDS profile it hands the node exists and is XML (unless the caller set one).
        [(_, env, respawn)] = launcher.nodes(description, {})
        self.assertIsNotNone(respawn, 'the node is respawned when it exits on a halted log')
        if 'FASTDDS_DEFAULT_PROFILES_FILE' not in os.environ:
            import xml.etree.ElementTree as ElementTree
            profile = env['FASTDDS_DEFAULT_PROFILES_FILE']
            self.assertTrue(os.path.samefile(profile, os.path.join(ROOT, 'config', 'fastdds.xml')), profile)
            self.assertTrue(ElementTree.parse(profile).getroot().tag.endswith('dds'))
        overrides = {command[i + 1].split(':=')[0] for i, a in enumerate(command) if a == '-p'}
        self.assertEqual(overrides - declared, set())
        self.assertEqual(named, declared, 'every declared parameter appears in config/robot.yaml')


if __name__ == '__main__':
    unittest.main()
