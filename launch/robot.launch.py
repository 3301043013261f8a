"""Bring up sion_memory, the robot's provable memory.

    ros2 launch sion_memory robot.launch.py [data_dir:=DIR] [config:=FILE] [namespace:=NS] [dds_profile:=FILE]

The node takes its parameters from config/robot.yaml (installed beside this file); data_dir
overrides the memory directory given there. Fast DDS reads its transports from dds_profile:
FASTDDS_DEFAULT_PROFILES_FILE if set, else config/fastdds.xml, which gives camera frames room
in shared memory (Fast DDS' default segment of 512 KiB is smaller than one 640x480 RGB frame).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import EnvironmentVariable, LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    share = get_package_share_directory('sion_memory')
    return LaunchDescription([
        DeclareLaunchArgument(
            'config',
            default_value=os.path.join(share, 'config', 'robot.yaml'),
            description='Parameter file of the sion_memory node',
        ),
        DeclareLaunchArgument(
            'data_dir',
            default_value='sion-data',
            description='Memory directory (created on first start)',
        ),
        DeclareLaunchArgument(
            'namespace',
            default_value='',
            description='ROS namespace of the node: /NS/sion_memory/... (a fleet on one graph); '
                        'a parameter file then names the node /NS/sion_memory or /**',
        ),
        DeclareLaunchArgument(
            'dds_profile',
            default_value=EnvironmentVariable(
                'FASTDDS_DEFAULT_PROFILES_FILE', default_value=os.path.join(share, 'config', 'fastdds.xml')),
            description='Fast DDS XML profile of the node (ignored by other RMW implementations)',
        ),
        Node(
            package='sion_memory',
            executable='sion_memory_node',
            name='sion_memory',
            namespace=LaunchConfiguration('namespace'),
            output='screen',
            parameters=[LaunchConfiguration('config'), {'data_dir': LaunchConfiguration('data_dir')}],
            additional_env={'FASTDDS_DEFAULT_PROFILES_FILE': LaunchConfiguration('dds_profile')},
            # The node exits (status 70) when its log stops after an I/O failure; started
            # again, it recovers the log.
            respawn=True,
            respawn_delay=2.0,
        ),
    ])
