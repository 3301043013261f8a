#!/usr/bin/env python3
"""Run a ROS 2 launch file where `ros2 launch` is missing.

    python3 scripts/launch.py launch/robot.launch.py [name:=value ...] [--print]

The Python package registry's ROS 2 has no `launch` or `launch_ros`. This reads the same launch
description through a stand-in for the parts of those packages that launch/robot.launch.py uses
(LaunchDescription, DeclareLaunchArgument, LaunchConfiguration, EnvironmentVariable, launch_ros'
Node), then starts each node as `ros2 launch` would: the executable from the package's lib/
directory in the ament index, with `--ros-args -r __node:=NAME --params-file FILE -p KEY:=VALUE`
and the node's additional environment. Where the real
packages are installed, they run the file instead. `--print` shows the commands and exits.
Ctrl-C or SIGTERM is passed on to the nodes as SIGINT, as ros2 launch does, and awaited.
"""

import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import types


def _stand_in_modules():
    """Minimal `launch` and `launch_ros` modules: descriptions only, no event system."""

    class LaunchDescription:
        def __init__(self, entities=None):
            self.entities = list(entities or [])

        def add_action(self, action):
            self.entities.append(action)

    class DeclareLaunchArgument:
        def __init__(self, name, default_value=None, description=''):
            self.name, self.default_value, self.description = name, default_value, description

    class LaunchConfiguration:
        def __init__(self, variable_name, default=None):
            self.variable_name, self.default = variable_name, default

    class EnvironmentVariable:
        def __init__(self, name, default_value=''):
            self.name, self.default_value = name, default_value

    class Node:
        def __init__(self, *, package, executable, name=None, namespace=None, output=None,
                     parameters=(), arguments=(), remappings=(), additional_env=None,
                     respawn=False, respawn_delay=0.0, **_ignored):
            self.package, self.executable, self.name, self.namespace = package, executable, name, namespace
            self.parameters, self.arguments, self.remappings = list(parameters), list(arguments), list(remappings)
            self.additional_env = dict(additional_env or {})
            self.respawn, self.respawn_delay = bool(respawn), float(respawn_delay)

    launch = types.ModuleType('launch')
    launch.LaunchDescription = LaunchDescription
    launch.actions = types.ModuleType('launch.actions')
    launch.actions.DeclareLaunchArgument = DeclareLaunchArgument
    launch.substitutions = types.ModuleType('launch.substitutions')
    launch.substitutions.LaunchConfiguration = LaunchConfiguration
    launch.substitutions.EnvironmentVariable = EnvironmentVariable
    launch_ros = types.ModuleType('launch_ros')
    launch_ros.actions = types.ModuleType('launch_ros.actions')
    launch_ros.actions.Node = Node
    return {
        'launch': launch, 'launch.actions': launch.actions, 'launch.substitutions': launch.substitutions,
        'launch_ros': launch_ros, 'launch_ros.actions': launch_ros.actions,
    }


def load_description(path):
    """The launch description a file generates, read through the stand-in modules."""
    saved = {name: sys.modules.get(name) for name in _stand_in_modules()}
    sys.modules.update(_stand_in_modules())
    try:
        spec = importlib.util.spec_from_file_location('launch_file', path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.generate_launch_description()
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def _resolve(value, config):
    if hasattr(value, 'variable_name'):
        if value.variable_name in config:
            return config[value.variable_name]
        if value.default is not None:
            return value.default
        raise SystemExit(f'launch: no value for launch argument {value.variable_name!r}')
    if type(value).__name__ == 'EnvironmentVariable':
        return os.environ.get(value.name) or _resolve(value.default_value, config)
    if isinstance(value, (list, tuple)):
        return ''.join(str(_resolve(v, config)) for v in value)
    return value


def find_executable(package, executable):
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        candidate = os.path.join(prefix, 'lib', package, executable)
        if prefix and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(f'launch: executable {executable!r} of package {package!r} is not installed '
                     '(looked in lib/<package>/ of every AMENT_PREFIX_PATH entry)')


def node_commands(description, overrides):
    """Each node's command line, with launch arguments resolved from `overrides` or defaults."""
    return [command for command, _, _ in nodes(description, overrides)]


def nodes(description, overrides):
    """Each node's (command line, additional environment, respawn delay or None), with launch
    arguments resolved."""
    config = {}
    for entity in description.entities:
        if hasattr(entity, 'default_value') and hasattr(entity, 'name'):
            config[entity.name] = overrides.get(entity.name, _resolve(entity.default_value, config))
    unknown = set(overrides) - set(config)
    if unknown:
        raise SystemExit(f'launch: unknown launch argument(s): {", ".join(sorted(unknown))} '
                         f'(declared: {", ".join(sorted(config))})')
    commands = []
    for entity in description.entities:
        if not hasattr(entity, 'executable'):
            continue
        command = [find_executable(entity.package, entity.executable), *map(str, entity.arguments), '--ros-args']
        if entity.name:
            command += ['-r', f'__node:={entity.name}']
        namespace = _resolve(entity.namespace, config) if entity.namespace is not None else ''
        if namespace:
            command += ['-r', f'__ns:=/{str(namespace).lstrip("/")}']
        for source, target in entity.remappings:
            command += ['-r', f'{_resolve(source, config)}:={_resolve(target, config)}']
        for parameters in entity.parameters:
            if isinstance(parameters, dict):
                for key, value in parameters.items():
                    command += ['-p', f'{key}:={_resolve(value, config)}']
            else:
                command += ['--params-file', str(_resolve(parameters, config))]
        env = {k: str(_resolve(v, config)) for k, v in entity.additional_env.items()}
        respawn = getattr(entity, 'respawn_delay', 0.0) if getattr(entity, 'respawn', False) else None
        commands.append((command, env, respawn))
    return commands


def main(argv):
    args = [a for a in argv if a != '--print']
    if not args or args[0] in ('-h', '--help'):
        print(__doc__)
        return 0
    path, overrides = args[0], {}
    for arg in args[1:]:
        name, sep, value = arg.partition(':=')
        if not sep:
            raise SystemExit(f'launch: arguments are name:=value, not {arg!r}')
        overrides[name] = value
    real = importlib.util.find_spec('launch') and importlib.util.find_spec('launch_ros') and shutil.which('ros2')
    if real and '--print' not in argv:
        os.execvp('ros2', ['ros2', 'launch', path, *args[1:]])
    launches = nodes(load_description(path), overrides)
    if '--print' in argv:
        for command, env, _ in launches:
            print(shlex.join([f'{k}={v}' for k, v in env.items()] + command))
        return 0
    start = lambda c, env: subprocess.Popen(c, env={**os.environ, **env})  # noqa: E731
    processes = [start(c, env) for c, env, _ in launches]
    stopping = []

    def stop(*_):
        stopping.append(True)
        for p in processes:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    # As ros2 launch does: a node with respawn=True that exits (not because it was stopped) is
    # started again after its respawn delay.
    codes = [None] * len(processes)
    while any(c is None for c in codes):
        for i, (command, env, respawn) in enumerate(launches):
            if codes[i] is not None:
                continue
            code = processes[i].poll()
            if code is None:
                continue
            if respawn is not None and not stopping:
                print(f'launch: {os.path.basename(command[0])} exited with status {code}; starting it again '
                      f'in {respawn:.1f} s', file=sys.stderr, flush=True)
                time.sleep(respawn)
                if not stopping:
                    processes[i] = start(command, env)
                    continue
            codes[i] = code
        time.sleep(0.1)
    return max(codes, default=0)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
