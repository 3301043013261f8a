"""One etcd member on free loopback ports, for the Python tests (ROS and MCP).

A port found free can be taken before etcd binds it (DDS, another test, the peer port drawn
twice), and a loaded machine can start etcd slowly: so a member that exits is started again on
new ports, a slow one is given its time, and a failure quotes etcd's own last lines.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# Loopback, never through a proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url):
    # etcd's own answer, not any listener's: a port someone else took would also connect.
    try:
        with _DIRECT.open(f'{url}/health', timeout=1) as r:
            answer = json.load(r)
            return isinstance(answer, dict) and answer.get('health') == 'true'
    except Exception:  # whatever else holds the port may answer anything, or not HTTP at all
        return False


def _tail(path, lines=15):
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])
    except OSError as e:
        return f'(no log: {e})'


def start(workdir, attempts=3, seconds=60.0):
    """Start a member with its data and log under `workdir`; returns (process, client URL).

    The caller stops the process (kill and wait)."""
    failures = []
    for attempt in range(attempts):
        client = free_port()
        peer = free_port()
        while peer == client:
            peer = free_port()
        data = os.path.join(workdir, f'etcd-{attempt}')
        log_path = os.path.join(workdir, f'etcd-{attempt}.log')
        url = f'http://127.0.0.1:{client}'
        with open(log_path, 'w') as log:
            process = subprocess.Popen(
                ['etcd', '--name', 'm1', '--data-dir', data,
                 '--listen-client-urls', url, '--advertise-client-urls', url,
                 '--listen-peer-urls', f'http://127.0.0.1:{peer}',
                 '--initial-advertise-peer-urls', f'http://127.0.0.1:{peer}',
                 '--initial-cluster', f'm1=http://127.0.0.1:{peer}'],
                stdout=log, stderr=subprocess.STDOUT)
        handed = False
        try:
            deadline = time.time() + seconds
            while time.time() < deadline and process.poll() is None:
                if _healthy(url):
                    # Another etcd on the port would answer too: ours must still be running
                    # once it would have failed to bind.
                    time.sleep(0.3)
                    if process.poll() is None:
                        handed = True
                        return process, url
                time.sleep(0.1)
            exited = process.poll()
        finally:
            # Never left running unless handed to the caller (an exception included).
            if not handed:
                process.kill()
                process.wait()
        how = f'exited with {exited}' if exited is not None else f'was not healthy within {seconds:.0f} s'
        failures.append(f'attempt {attempt + 1} (client port {client}, peer port {peer}): {how}\n'
                        f'{_tail(log_path)}')
    raise RuntimeError('etcd did not start:\n' + '\n'.join(failures))
