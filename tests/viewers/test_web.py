"""The web page that verifies (web/, built by scripts/web.sh: sion_verify as WebAssembly) in
headless Chromium, on loopback in a network namespace: every case of tests/conformance gets the
verdict the manifest states (as the Rust and Python verifiers give it), and an evidence
directory (`sion memory evidence`) opened by the page is checked, then refused once a payload
is changed.

    bash scripts/web.sh && SION_BIN=target/debug/sion python3 -m unittest tests.viewers.test_web
"""

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import unittest
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SION = os.environ.get('SION_BIN', os.path.join(ROOT, 'target', 'debug', 'sion'))
PAGE = os.path.join(ROOT, 'web', 'dist', 'index.html')


class Server:
    """A file server on 127.0.0.1 over the repository (the page, the conformance suite) and a
    work directory (at /work/), taking the page's reports at POST /report."""

    def __init__(self, work):
        self.reports = []
        self.arrived = threading.Condition()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path):
                path = urllib.parse.urlparse(path).path
                if path.startswith('/work/'):
                    return os.path.join(work, path[len('/work/'):])
                return os.path.join(ROOT, path.lstrip('/'))

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                with server.arrived:
                    server.reports.append(json.loads(body))
                    server.arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f'http://127.0.0.1:{self.port}{path}'

    def wait(self, count, seconds=120):
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.reports) >= count, timeout=seconds)
        return self.reports[count - 1] if len(self.reports) >= count else None


class WebPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(PAGE):
            raise unittest.SkipTest('web/dist is not built: bash scripts/web.sh')
        cls.work = tempfile.mkdtemp(prefix='sion-web-test-')
        cls.server = Server(cls.work)

    @classmethod
    def tearDownClass(cls):
        cls.server.httpd.shutdown()

    def open_page(self, query, report_count):
        profile = tempfile.mkdtemp(prefix='sion-web-chromium-')
        browser = subprocess.Popen(
            ['chromium', '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', f'--user-data-dir={profile}',
             self.server.url('/web/dist/index.html?' + query)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return self.server.wait(report_count)
        finally:
            browser.kill()
            browser.wait()
            shutil.rmtree(profile, ignore_errors=True)

    def test_every_conformance_case_gets_its_verdict_in_the_browser(self):
        with open(os.path.join(ROOT, 'tests', 'conformance', 'manifest.json')) as f:
            manifest = json.load(f)
        query = urllib.parse.urlencode({'conformance': '/tests/conformance/manifest.json', 'report': '/report'})
        report = self.open_page(query, len(self.server.reports) + 1)
        self.assertIsNotNone(report, 'the page reported nothing within 120 s')
        self.assertNotIn('error', report)
        cases = report['cases']
        self.assertEqual([c['file'] for c in cases], [c['file'] for c in manifest['cases']])
        disagree = [c for c in cases if not c['agrees']]
        self.assertEqual(disagree, [])
        self.assertGreaterEqual(sum(c['here'] == 'valid' for c in cases), 10)

    def test_an_evidence_directory_is_checked_in_the_browser(self):
        data, out = os.path.join(self.work, 'memory'), os.path.join(self.work, 'evidence')
        for args in (['replay', os.path.join(ROOT, 'bags', 'demo.mcap'), '--data', data],
                     ['memory', 'evidence', '--data', data, '--box', '0m,0m,-1m,10m,8m,3m',
                      '--from', '2026-01-01T00:00:00Z', '--to', '2026-01-01T00:00:30Z', '--out', out]):
            done = subprocess.run([SION, *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        key = re.search(r'--ledger-key ([0-9a-f]{64})', done.stdout).group(1)
        query = urllib.parse.urlencode({'evidence': '/work/evidence/', 'key': key, 'report': '/report'})
        answer = self.open_page(query, len(self.server.reports) + 1)
        self.assertIsNotNone(answer, 'the page reported nothing')
        self.assertIn('ok', answer, answer.get('error'))
        blobs = os.listdir(os.path.join(out, 'blobs'))
        self.assertEqual(answer['blobs'], len(blobs))
        self.assertIn('(UTC)', answer['scene']['asked'])
        self.assertTrue(answer['scene']['walk'] and answer['scene']['answer'])
        # A payload changed: refused, by the same code as the command line's.
        path = os.path.join(out, 'blobs', sorted(blobs)[0])
        with open(path, 'ab') as f:
            f.write(b'!')
        answer = self.open_page(query, len(self.server.reports) + 1)
        self.assertEqual(answer['error']['code'], 'evidence_hash', answer)


class ServeUi(unittest.TestCase):
    """`sion serve-ui`: the page and an evidence directory on loopback, nothing else."""

    def test_the_page_checks_served_evidence_and_nothing_outside_is_served(self):
        if not os.path.exists(PAGE):
            raise unittest.SkipTest('web/dist is not built: bash scripts/web.sh')
        import socket
        import urllib.error
        import urllib.request
        work = tempfile.mkdtemp(prefix='sion-serve-ui-test-')
        data, out = os.path.join(work, 'memory'), os.path.join(work, 'evidence')
        for args in (['replay', os.path.join(ROOT, 'bags', 'demo.mcap'), '--data', data],
                     ['memory', 'evidence', '--data', data, '--box', '0m,0m,-1m,10m,8m,3m', '--out', out]):
            done = subprocess.run([SION, *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        key = re.search(r'--ledger-key ([0-9a-f]{64})', done.stdout).group(1)
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        refused = subprocess.run([SION, 'serve-ui', '--listen', f'0.0.0.0:{port}'], capture_output=True, text=True)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn('loopback only', refused.stderr)
        server = subprocess.Popen([SION, 'serve-ui', '--listen', f'127.0.0.1:{port}', '--evidence', out],
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertIn('serving the page', server.stdout.readline())
            base = f'http://127.0.0.1:{port}'

            def status(path, method='GET'):
                try:
                    return urllib.request.urlopen(urllib.request.Request(base + path, method=method), timeout=10).status
                except urllib.error.HTTPError as e:
                    return e.code
            self.assertEqual(status('/'), 200)
            self.assertEqual(status('/evidence/answer.json'), 200)
            for path in ['/../Cargo.toml', '/evidence/../memory/memory.json', '/%2e%2e/Cargo.toml', '/nothing',
                         '/evidence/README.md', '/evidence/frames/']:
                self.assertEqual(status(path), 404, path)
            # A page on another name that resolves here (DNS rebinding) gets nothing.
            rebound = urllib.request.Request(base + '/evidence/answer.json', headers={'Host': f'evil.example:{port}'})
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(rebound, timeout=10)
            self.assertEqual(refused.exception.code, 421)
            self.assertEqual(status('/', 'POST'), 405)
            profile = tempfile.mkdtemp(prefix='sion-web-chromium-')
            dom = subprocess.run(
                ['chromium', '--headless=new', '--no-sandbox', '--disable-gpu', f'--user-data-dir={profile}',
                 '--virtual-time-budget=30000', '--dump-dom', f'{base}/?evidence=/evidence/&key={key}'],
                capture_output=True, text=True, timeout=120).stdout
            shutil.rmtree(profile, ignore_errors=True)
            # The key came with the link: the page says it is the sender's, not the reader's.
            self.assertIn('Verifies, but against the key the link gave', dom)
            self.assertNotIn('✓ The proof verifies', dom)
            self.assertIn('(UTC)', dom)
        finally:
            server.kill()
            server.wait()
            server.stdout.close()
