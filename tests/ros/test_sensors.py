"""The sensors robots have, on a real ROS 2 graph: two cameras (one raw, one compressed, each
with its camera_info), a laser scanner, a point cloud, an IMU, a GNSS receiver, 3D and 2D
detections and a topic of another type kept whole, published by rclpy to the sion_memory node.
Each becomes the atoms docs/ROS.md says, counted per topic on /sion_memory/stats, and "what was
seen in this box" answers "a person", with a proof checked here.

Run by scripts/test.sh inside a network namespace with only loopback up.
"""

import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import rclpy
from sensor_msgs.msg import (BatteryState, CameraInfo, CompressedImage, Image, Imu, LaserScan,
                             NavSatFix, PointCloud2, PointField)
from sion_memory_msgs.msg import Stats
from tf2_msgs.msg import TFMessage
from vision_msgs.msg import (Detection2D, Detection2DArray, Detection3D, Detection3DArray,
                             ObjectHypothesisWithPose)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import ask  # noqa: E402
import robot_run  # noqa: E402

OPTICAL = (-0.5, 0.5, -0.5, 0.5)  # z forward, x right, y down, from x forward, z up
BACKWARD = (-0.5, -0.5, 0.5, 0.5)  # the same, turned half a turn: looking back

# The topics as config/robot.yaml lists them, and what this test names instead.
TOPICS = {
    '      cameras: ["/camera/image_raw", "/camera/image_raw/compressed"]':
        '      cameras: ["/front/image_raw", "/rear/image_raw/compressed"]',
    '      detections_3d: ["/detections_3d"]': '      detections_3d: ["/people"]',
    '      detections_2d: ["/detections_2d"]': '      detections_2d: ["/front/detections"]',
    # ... and a parameter of 0.2, which the node names as one it does not read.
    '      other: []': '      other: ["/battery=sensor_msgs/msg/BatteryState"]\n      image: "/camera/image_raw"',
}

# Each topic published, and the stream the node counts it under.
EXPECTED = {
    '/front/image_raw': 'image', '/rear/image_raw/compressed': 'compressed_image', '/scan': 'scan',
    '/points': 'cloud', '/imu/data': 'imu', '/fix': 'gnss', '/people': 'detections_3d',
    '/front/detections': 'detections_2d', '/battery': 'other',
}


def hypothesis(class_id, score):
    h = ObjectHypothesisWithPose()
    h.hypothesis.class_id, h.hypothesis.score = class_id, score
    return h


class Sensors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix='sion-sensors-test-')
        with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
            config = f.read()
        for ours, theirs in TOPICS.items():
            assert ours in config, ours
            config = config.replace(ours, theirs)
        with open(os.path.join(cls.work, 'robot.yaml'), 'w') as f:
            f.write(config)
        cls.log = open(os.path.join(cls.work, 'node.log'), 'w')
        cls.node = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'), os.path.join(ROOT, 'launch', 'robot.launch.py'),
             f'data_dir:={cls.work}/memory', f'config:={cls.work}/robot.yaml'],
            stdout=cls.log, stderr=subprocess.STDOUT)
        rclpy.init()
        cls.client = rclpy.create_node('sensors_test')
        cls.stats = []
        cls.client.create_subscription(Stats, '/sion_memory/stats', cls.stats.append, 10)
        cls.first = time.time_ns()
        cls.play()
        cls.last = time.time_ns()
        deadline = time.time() + 30
        while time.time() < deadline and not cls.all_counted():
            rclpy.spin_once(cls.client, timeout_sec=0.2)
        cls.committed = ask.commit(cls.client)

    @classmethod
    def tearDownClass(cls):
        cls.client.destroy_node()
        rclpy.shutdown()
        if cls.node.poll() is None:
            cls.node.send_signal(signal.SIGINT)
            cls.node.wait(timeout=60)
        cls.log.close()

    @classmethod
    def latest(cls):
        return {s.topic: s for s in cls.stats[-1].streams} if cls.stats else {}

    @classmethod
    def all_counted(cls):
        latest = cls.latest()
        return all(t in latest and latest[t].atoms > 0 for t in EXPECTED)

    @classmethod
    def play(cls):
        """Two seconds of every sensor at 5 Hz, a robot standing at the map's origin."""
        node = cls.client
        pub = {}

        def publish(kind, topic, message, latched=False):
            if topic not in pub:
                qos = rclpy.qos.QoSProfile(depth=10)
                if latched:
                    qos.durability = rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL
                pub[topic] = node.create_publisher(kind, topic, qos)
            pub[topic].publish(message)

        t = robot_run.transform
        statics = TFMessage(transforms=[
            t('map', 'base_link', 0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
            t('base_link', 'front', 0, (0.0, 0.0, 1.0), OPTICAL),
            t('base_link', 'rear', 0, (0.0, 0.0, 1.0), BACKWARD),
            t('base_link', 'laser', 0, (0.0, 0.0, 0.2), (0.0, 0.0, 0.0, 1.0)),
            t('base_link', 'imu', 0, (0.0, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)),
        ])
        deadline = time.time() + 2.0
        while time.time() < deadline:
            now = robot_run.stamp(time.time_ns())
            publish(TFMessage, '/tf_static', statics, latched=True)
            for camera in ('front', 'rear'):
                info = CameraInfo(width=640, height=480, k=[500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0])
                info.header.stamp, info.header.frame_id = now, camera
                publish(CameraInfo, f'/{camera}/camera_info', info)
            image = Image(width=2, height=1, encoding='mono8', step=2, data=bytes([1, 2]))
            image.header.stamp, image.header.frame_id = now, 'front'
            publish(Image, '/front/image_raw', image)
            jpeg = CompressedImage(format='jpeg', data=bytes([0xff, 0xd8, 0xff, 0xe0, 0, 0x10]))
            jpeg.header.stamp, jpeg.header.frame_id = now, 'rear'
            publish(CompressedImage, '/rear/image_raw/compressed', jpeg)
            scan = LaserScan(angle_min=-1.5, angle_max=1.5, angle_increment=1.5, range_min=0.1, range_max=8.0,
                             ranges=[1.0, float('inf'), 2.0])
            scan.header.stamp, scan.header.frame_id = now, 'laser'
            publish(LaserScan, '/scan', scan)
            fields = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1) for i, n in enumerate('xyz')]
            points = struct.pack('<6f', 1.0, 0.0, 0.0, 2.0, 1.0, -0.5)
            cloud = PointCloud2(height=1, width=2, fields=fields, point_step=12, row_step=24, data=points)
            cloud.header.stamp, cloud.header.frame_id = now, 'laser'
            publish(PointCloud2, '/points', cloud)
            imu = Imu()
            imu.header.stamp, imu.header.frame_id = now, 'imu'
            imu.orientation.w, imu.linear_acceleration.z = 1.0, 9.81
            publish(Imu, '/imu/data', imu)
            fix = NavSatFix(latitude=48.1, longitude=11.5, altitude=520.0)
            fix.status.status = fix.status.STATUS_FIX
            fix.header.stamp, fix.header.frame_id = now, 'gps'
            publish(NavSatFix, '/fix', fix)
            person = Detection3D(id='17', results=[hypothesis('person', 0.9)])
            person.bbox.center.position.x, person.bbox.center.position.z = 3.0, 0.9
            person.bbox.size.x, person.bbox.size.y, person.bbox.size.z = 0.5, 0.5, 1.8
            people = Detection3DArray(detections=[person])
            people.header.stamp, people.header.frame_id = now, 'base_link'
            publish(Detection3DArray, '/people', people)
            pallet = Detection2D(results=[hypothesis('pallet', 0.7)])
            pallet.bbox.center.position.x, pallet.bbox.center.position.y = 320.0, 240.0
            pallet.bbox.size_x, pallet.bbox.size_y = 40.0, 40.0
            seen = Detection2DArray(detections=[pallet])
            seen.header.stamp, seen.header.frame_id = now, 'front'
            publish(Detection2DArray, '/front/detections', seen)
            publish(BatteryState, '/battery', BatteryState(voltage=24.1, percentage=0.8))
            rclpy.spin_once(node, timeout_sec=0.2)

    def test_every_sensor_topic_is_counted_under_its_stream(self):
        latest = self.latest()
        for topic, stream in EXPECTED.items():
            self.assertIn(topic, latest, f'{topic} is not on /sion_memory/stats')
            s = latest[topic]
            self.assertEqual(s.stream, stream, topic)
            self.assertGreater(s.atoms, 0, topic)
            self.assertEqual(list(s.reject_reasons), [], f'{topic}: {list(s.reject_reasons)}')
        for camera in ('/front/camera_info', '/rear/camera_info'):
            self.assertEqual(latest[camera].stream, 'camera_info')

    def test_what_was_seen_in_a_box_is_a_person_with_a_proof(self):
        """The person stood 3 m ahead of the robot: a box around them answers with an
        observation whose subject is the class and the tracker's id, and the scan that covered
        them; the proof checks here against the question asked."""
        self.assertTrue(self.committed.ok, self.committed.error)
        box = [2500, -500, -100, 3500, 500, 2000]
        answer = ask.recall(self.client, 'map', box, self.first, self.last + 1)
        self.assertTrue(answer.ok, answer.error)
        subjects = {(a.kind, a.subject) for a in answer.atoms}
        self.assertIn(('observation', 'person/17'), subjects)
        self.assertIn(('coverage', 'laser'), subjects)
        # The front camera's frames and its pallet look toward them; the rear camera away.
        self.assertIn(('observation', 'pallet'), subjects)
        frames = [a for a in answer.atoms if a.kind == 'observation' and a.subject == '']
        self.assertTrue(frames)
        self.assertTrue(all(a.min_mm[0] >= 0 for a in frames), [a.min_mm for a in frames])
        key = bytes(self.committed.head.ledger_key).hex()
        checked = ask.verify(answer, key, frame='map', box=box, from_ns=self.first, to_ns=self.last + 1)
        self.assertIn(f'these {len(answer.atoms)} atoms are everything', checked['statement'])

    def test_a_parameter_the_node_does_not_read_is_named(self):
        with open(os.path.join(self.work, 'node.log')) as f:
            log = f.read()
        self.assertIn('parameter topics.image is not one this node reads', log)
        self.assertIn('topics.cameras', log)

    def test_a_gnss_fix_is_in_the_earth_frame(self):
        answer = ask.query_subject(self.client, 'gps')
        self.assertTrue(answer.ok, answer.error)
        self.assertTrue(answer.atoms)
        self.assertEqual({a.frame_id for a in answer.atoms}, {'earth'})
        # 48.1° N, 11.5° E, 520 m: about 4,187 km from the Earth's axis of rotation in x.
        x = answer.atoms[0].min_mm[0] / 1e6
        self.assertTrue(4180 < x < 4195, x)


if __name__ == '__main__':
    unittest.main()
