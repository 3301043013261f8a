"""The node living with its memory (rcl + Fast DDS, run by scripts/test.sh in a loopback-only
network namespace):

- a storm of queries, old heads among them, while poses stream in at 1 kHz: no pose is lost
  and the brain keeps committing on its period (queries are answered from sealed versions of
  the index, without holding anything the intake or a commit needs);
- a log that stops after an I/O failure (its disk full): the node exits with status 70 and its
  launcher starts it again, and once there is room it remembers again.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import rclpy
from geometry_msgs.msg import PoseStamped
from sion_memory_msgs.msg import Head, Stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'scripts'))

import ask  # noqa: E402
import robot_run  # noqa: E402

POSES = 6000  # six seconds at 1 kHz
STORM_CLIENTS = 4
COMMIT_PERIOD_S = 0.5


def config_with(path, **overrides):
    """config/robot.yaml with some parameters changed (a file for the launcher's config:=)."""
    with open(os.path.join(ROOT, 'config', 'robot.yaml')) as f:
        text = f.read()
    for key, value in overrides.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(f'{key}:'):
                indent = line[:len(line) - len(line.lstrip())]
                lines[i] = f'{indent}{key}: {value}'
        text = '\n'.join(lines) + '\n'
    with open(path, 'w') as f:
        f.write(text)
    return path


def launch(data, config, log):
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'), os.path.join(ROOT, 'launch', 'robot.launch.py'),
         f'data_dir:={data}', f'config:={config}'],
        stdout=log, stderr=subprocess.STDOUT)


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


STORM = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
import rclpy, ask
old = sys.argv[2] == 'old'
rclpy.init()
node = rclpy.create_node('storm')
answered, refused, deadline, why = 0, 0, time.time() + float(sys.argv[3]), ''
while time.time() < deadline:
    as_of = 0
    if old:
        try:
            heads = ask.commit(node)
        except SystemExit:
            continue
        as_of = heads.head.size if heads.ok else 0
    now = time.time_ns()
    try:
        a = ask.query_range(node, 'map', [0, -1000, -1000, 1000, 1000, 1000],
                            now - 600_000_000_000, now + 600_000_000_000, as_of)
    except SystemExit as late:
        refused += 1
        why = str(late)
        continue
    if a.ok:
        answered += 1
    else:
        refused += 1
        why = a.error
print(answered, refused, why if refused else '', flush=True)
node.destroy_node()
rclpy.shutdown()
'''


class QueryStorm(unittest.TestCase):
    def test_a_query_storm_loses_no_pose_and_keeps_the_commit_period(self):
        data = tempfile.mkdtemp(prefix='sion-storm-')
        config = config_with(os.path.join(data, 'robot.yaml'), commit_period_s=COMMIT_PERIOD_S)
        with open(os.path.join(data, 'node.log'), 'w') as log:
            node_process = launch(os.path.join(data, 'memory'), config, log)
            rclpy.init()
            node = rclpy.create_node('storm_test')
            try:
                heads, stats = [], []
                latched = rclpy.qos.QoSProfile(depth=100, durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL)
                node.create_subscription(Head, '/sion_memory/head', lambda h: heads.append((time.time(), h.size)),
                                         latched)
                node.create_subscription(Stats, '/sion_memory/stats', stats.append, 10)
                pose = node.create_publisher(PoseStamped, '/pose', 1000)
                self.assertTrue(self.wait(node, lambda: pose.get_subscription_count() > 0, 30), 'no node')
                # An old head to ask about: a first commit.
                for _ in range(100):
                    pose.publish(self.pose(0, _))
                ask.commit(node)
                storms = [subprocess.Popen([sys.executable, '-c', STORM, os.path.join(ROOT, 'scripts'),
                                            'old' if i % 2 else 'latest', str(POSES / 1000 + 4)],
                                           stdout=subprocess.PIPE, text=True)
                          for i in range(STORM_CLIENTS)]
                time.sleep(2.0)  # the storm has begun
                started = time.time()
                t0 = time.time_ns()
                for i in range(POSES):
                    due = started + i / 1000
                    while time.time() < due:
                        rclpy.spin_once(node, timeout_sec=0)
                    pose.publish(self.pose(t0 + i * 1_000_000, i))
                streamed = time.time() - started
                answers = [p.communicate(timeout=120)[0].split(maxsplit=2) for p in storms]
                answered = sum(int(a[0]) for a in answers if a)
                # Everything sent is remembered, nothing dropped.

                def settled():
                    pose_stats = [s for s in (stats[-1].streams if stats else []) if s.stream == 'pose']
                    return pose_stats and pose_stats[0].remembered >= POSES + 100
                self.assertTrue(self.wait(node, settled, 30), f'stats: {stats[-1] if stats else None}')
                pose_stats = [s for s in stats[-1].streams if s.stream == 'pose'][0]
                self.assertEqual(pose_stats.remembered, POSES + 100)
                self.assertEqual(pose_stats.dropped, 0)
                self.assertGreater(answered, STORM_CLIENTS * 3, f'the storm: {answers}')
                # The brain kept its period while the storm lasted: heads came at most two
                # periods (and a slack for a loaded 2-core machine) apart.
                during = [t for t, _ in heads if started <= t <= started + streamed]
                gaps = [b - a for a, b in zip(during, during[1:])]
                self.assertGreaterEqual(len(during), int(streamed / COMMIT_PERIOD_S) // 2, f'heads at {during}')
                self.assertLess(max(gaps, default=0), 4 * COMMIT_PERIOD_S + 1.0, f'gaps {gaps}')
            finally:
                node.destroy_node()
                rclpy.shutdown()
                stop(node_process)

    @staticmethod
    def pose(ns, i):
        p = PoseStamped()
        p.header.stamp, p.header.frame_id = robot_run.stamp(ns), 'map'
        p.pose.position.x, p.pose.orientation.w = float(i % 1000) / 100, 1.0
        return p

    @staticmethod
    def wait(node, condition, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline and not condition():
            rclpy.spin_once(node, timeout_sec=0.05)
        return condition()


class HaltedLog(unittest.TestCase):
    def test_a_log_halted_by_a_full_disk_makes_the_node_exit_and_respawn(self):
        data = tempfile.mkdtemp(prefix='sion-halt-')
        disk = os.path.join(data, 'disk')
        os.makedirs(disk)
        mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', disk],
                                 capture_output=True).returncode == 0
        if not mounted:
            self.skipTest('cannot mount a small tmpfs here (needs root in a mount namespace)')
        try:
            config = config_with(os.path.join(data, 'robot.yaml'), commit_period_s=0.5)
            log_path = os.path.join(data, 'node.log')
            with open(log_path, 'w') as log:
                node_process = launch(os.path.join(disk, 'memory'), config, log)
                rclpy.init()
                node = rclpy.create_node('halt_test')
                try:
                    pose = node.create_publisher(PoseStamped, '/pose', 1000)
                    self.assertTrue(QueryStorm.wait(node, lambda: pose.get_subscription_count() > 0, 30))
                    time.sleep(1.0)
                    # Fill the disk, leaving the log no room.
                    filler = os.path.join(disk, 'filler')
                    with open(filler, 'wb') as f:
                        try:
                            while True:
                                f.write(b'\0' * (1 << 20))
                                f.flush()
                        except OSError:
                            pass
                    t0 = time.time_ns()
                    for i in range(3000):
                        pose.publish(QueryStorm.pose(t0 + i * 1_000_000, i))
                        time.sleep(0.0005)
                    def text():
                        with open(log_path) as f:
                            return f.read()
                    self.assertTrue(QueryStorm.wait(node, lambda: 'exited with status 70' in text(), 60), text())
                    self.assertIn('exiting with status 70', text())
                    # Room again: the node started again recovers its log and remembers.
                    os.remove(filler)
                    self.assertTrue(QueryStorm.wait(node, lambda: pose.get_subscription_count() > 0, 60))
                    deadline = time.time() + 60
                    committed = None
                    while time.time() < deadline:
                        pose.publish(QueryStorm.pose(time.time_ns(), 0))
                        try:
                            committed = ask.commit(node)
                        except SystemExit:
                            continue
                        if committed.ok and committed.head.size > 0:
                            break
                        time.sleep(0.5)
                    self.assertTrue(committed is not None and committed.ok, text()[-4000:])
                    self.assertGreater(committed.head.size, 0)
                finally:
                    node.destroy_node()
                    rclpy.shutdown()
                    stop(node_process)
        finally:
            subprocess.run(['umount', '-l', disk], capture_output=True)
            shutil.rmtree(data, ignore_errors=True)


if __name__ == '__main__':
    unittest.main()
