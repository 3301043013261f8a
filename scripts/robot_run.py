#!/usr/bin/env python3
"""Play a short generated robot run onto the sion_memory node's topics (rclpy).

    python3 scripts/robot_run.py [--seconds 6] [--bad]

A robot drives a circle of 5 m radius about the origin of a 20 m x 20 m room: poses on /pose
(100 Hz, frame map), odometry on /odom (50 Hz), odom -> base_link on /tf (50 Hz), map -> odom and
base_link -> camera on /tf_static, the room's occupancy grid on /map, and a 320x240 camera on
/camera/image_raw with /camera/camera_info (5 Hz) looking ahead. With --bad it also sends what
a faulty robot might: a NaN pose, an image with an unknown encoding, a truncated image, and a
camera frame from a frame no transform reaches. Stamps are wall-clock time. Prints the interval
it covered as nanoseconds, for querying.
"""

import argparse
import math
import time

import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TransformStamped
from nav_msgs.msg import OccupancyGrid, Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image
from tf2_msgs.msg import TFMessage

RADIUS_M = 5.0
SPEED_M_S = 1.0
CAMERA = 'camera'


def stamp(ns):
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def quaternion_yaw(yaw):
    return (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


def transform(parent, child, ns, xyz, q):
    t = TransformStamped()
    t.header.stamp, t.header.frame_id, t.child_frame_id = stamp(ns), parent, child
    t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = xyz
    (t.transform.rotation.x, t.transform.rotation.y,
     t.transform.rotation.z, t.transform.rotation.w) = q
    return t


def where(t_s):
    """The robot's position and heading t_s seconds into the run."""
    angle = SPEED_M_S * t_s / RADIUS_M
    return (RADIUS_M * math.cos(angle), RADIUS_M * math.sin(angle), angle + math.pi / 2)


class Player:
    def __init__(self, node):
        latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node = node
        self.pose = node.create_publisher(PoseStamped, '/pose', 1000)
        self.odom = node.create_publisher(Odometry, '/odom', 1000)
        self.tf = node.create_publisher(TFMessage, '/tf', 1000)
        self.tf_static = node.create_publisher(TFMessage, '/tf_static', latched)
        self.map = node.create_publisher(OccupancyGrid, '/map', latched)
        self.image = node.create_publisher(Image, '/camera/image_raw', qos_profile_sensor_data)
        self.info = node.create_publisher(CameraInfo, '/camera/camera_info', qos_profile_sensor_data)

    def statics(self, ns):
        optical = (-0.5, 0.5, -0.5, 0.5)  # z forward, x right, y down
        self.tf_static.publish(TFMessage(transforms=[
            transform('map', 'odom', ns, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
            transform('base_link', CAMERA, ns, (0.2, 0.0, 1.0), optical),
        ]))
        grid = OccupancyGrid()
        grid.header.stamp, grid.header.frame_id = stamp(ns), 'map'
        grid.info.resolution, grid.info.width, grid.info.height = 0.1, 200, 200
        grid.info.origin.position.x, grid.info.origin.position.y = -10.0, -10.0
        grid.info.origin.orientation.w = 1.0
        cells = []
        for row in range(200):
            for col in range(200):
                wall = row in (0, 199) or col in (0, 199)
                cells.append(100 if wall else 0)
        grid.data = cells
        self.map.publish(grid)

    def camera_info(self, ns, frame=CAMERA):
        info = CameraInfo()
        info.header.stamp, info.header.frame_id = stamp(ns), frame
        info.width, info.height = 320, 240
        info.k = [200.0, 0.0, 160.0, 0.0, 200.0, 120.0, 0.0, 0.0, 1.0]
        info.p = [200.0, 0.0, 160.0, 0.0, 0.0, 200.0, 120.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        self.info.publish(info)

    def frame(self, ns, frame=CAMERA, encoding='rgb8', rows=240):
        image = Image()
        image.header.stamp, image.header.frame_id = stamp(ns), frame
        image.width, image.height, image.encoding, image.step = 320, 240, encoding, 320 * 3
        shade = (ns // 1_000_000) % 256
        image.data = bytes([shade]) * (320 * 3 * rows)
        self.image.publish(image)

    def moment(self, ns, t_s, with_odom):
        x, y, yaw = where(t_s)
        q = quaternion_yaw(yaw)
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp(ns), 'map'
        pose.pose.position.x, pose.pose.position.y = x, y
        (pose.pose.orientation.x, pose.pose.orientation.y,
         pose.pose.orientation.z, pose.pose.orientation.w) = q
        self.pose.publish(pose)
        if with_odom:
            odom = Odometry()
            odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp(ns), 'odom', 'base_link'
            odom.pose.pose = pose.pose
            self.odom.publish(odom)
            self.tf.publish(TFMessage(transforms=[transform('odom', 'base_link', ns, (x, y, 0.0), q)]))

    def publishers(self):
        return [self.pose, self.odom, self.tf, self.tf_static, self.map, self.image, self.info]

    def wait_for_subscribers(self, timeout_s=10.0):
        """Discovery takes a moment; what is published before it matches is lost."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if all(p.get_subscription_count() > 0 for p in self.publishers()):
                time.sleep(0.2)  # matched on our side; give the other side the same moment
                return True
            time.sleep(0.05)
        return False

    def bad(self, ns):
        """What a faulty robot might send. Spaced out: the camera topic is best effort, and a
        burst could overflow the subscriber's queue, which would be our fault, not the robot's."""
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp(ns), 'map'
        pose.pose.position.x = float('nan')
        self.pose.publish(pose)
        for send in (lambda: self.frame(ns, encoding='rgb9'),        # unknown encoding
                     lambda: self.frame(ns, rows=100),               # data shorter than step x height
                     lambda: self.camera_info(ns, frame='thermal'),
                     lambda: self.frame(ns, frame='thermal')):       # no transform reaches this frame
            time.sleep(0.03)
            send()


def play(node, seconds, bad=False, spin=None):
    """Publish the run; returns (first, last) stamps in nanoseconds."""
    player = Player(node)
    if not player.wait_for_subscribers():
        raise SystemExit('robot_run: nobody subscribes to the topics (is the sion_memory node running?)')
    start = time.time_ns()
    player.statics(start)
    steps = int(seconds * 100)
    for i in range(steps):
        ns = start + i * 10_000_000
        t_s = i / 100
        if i % 20 == 0:
            player.camera_info(ns)
        # The transform for a frame's stamp goes out before the frame, as on a robot.
        player.moment(ns, t_s, with_odom=i % 2 == 0)
        if i % 20 == 0:
            player.frame(ns)
        if bad and i == steps // 2:
            player.bad(ns)
        if spin:
            spin()
        delay = start + (i + 1) * 10_000_000 - time.time_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
    return start, start + (steps - 1) * 10_000_000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--seconds', type=float, default=6.0, help='length of the run (default 6)')
    parser.add_argument('--bad', action='store_true', help='also send malformed messages')
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node('robot_run')
    first, last = play(node, args.seconds, args.bad)
    time.sleep(0.5)
    print(f'{first} {last + 1}')
    node.destroy_node()
    rclpy.shutdown()


if __name__ == '__main__':
    main()
