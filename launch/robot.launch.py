"""Bring up sion_memory, the robot's provable memory.

    ros2 launch sion_memory robot.launch.py [data_dir:=DIR] [config:=FILE]

The node takes its parameters from config/robot.yaml (installed beside this file); data_dir
overrides the memory directory given there.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
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
        Node(
            package='sion_memory',
            executable='sion_memory_node',
            name='sion_memory',
            output='screen',
            parameters=[LaunchConfiguration('config'), {'data_dir': LaunchConfiguration('data_dir')}],
        ),
    ])
