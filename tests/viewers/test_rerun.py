"""A `sion viz` recording opened in the Rerun web viewer, in Chromium on a virtual display
(scripts/viz_screenshot.sh: Xvfb, software WebGL, the viewer bound to 127.0.0.1), and the
screenshot read back: the layout the recording carries is what the viewer shows (the 3D view's
two tabs, the verdict, the frames that answered, the legend, the timeline on valid time), with
no error badge.

    SION_BIN=target/debug/sion python3 -m unittest tests.viewers.test_rerun
    SION_SCREENSHOT_OUT=docs/viz-demo.png ...   # also keeps the picture (how docs/ has it)
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SION = os.environ.get('SION_BIN', os.path.join(ROOT, 'target', 'debug', 'sion'))

# What each panel says of itself, as Tesseract reads it off the picture.
PANELS = ['Memory and answer', 'and the proof', 'Verdict', 'The proof verifies', 'Frames that answered',
          'Legend', 'What is drawn', 'valid time']


def run(*args, timeout=600):
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f'{" ".join(args)}: {out.stdout}{out.stderr}')
    return out.stdout


class RerunWebViewer(unittest.TestCase):
    def test_the_recording_opens_with_its_layout_in_the_web_viewer(self):
        work = tempfile.mkdtemp(prefix='sion-rerun-test-')
        data = os.path.join(work, 'memory')
        run(SION, 'replay', os.path.join(ROOT, 'bags', 'demo.mcap'), '--data', data)
        proof = os.path.join(work, 'answer.sionproof')
        run(SION, 'memory', 'recall', '--data', data, '--frame', 'map', '--box', '0m,0m,-1m,10m,8m,3m',
            '--from', '2026-01-01T00:00:00Z', '--to', '2026-01-01T00:00:30Z', '--out', proof)
        rrd = os.path.join(work, 'answer.rrd')
        said = run(SION, 'viz', '--data', data, '--proof', proof, '--out', rrd)
        self.assertIn('verified', said)
        shot = os.path.join(work, 'shot.png')
        run('bash', os.path.join(ROOT, 'scripts', 'viz_screenshot.sh'), rrd, shot, '40')
        if os.environ.get('SION_SCREENSHOT_OUT'):
            shutil.copy(shot, os.environ['SION_SCREENSHOT_OUT'])
        # The viewer's text is small: read it at twice the size, in grey.
        big = os.path.join(work, 'big.png')
        run('convert', shot, '-resize', '200%', '-colorspace', 'Gray', big)
        # Small text read off pixels: an underscore may come back as a space, or not at all.
        text = re.sub(r'vali\w?[ _]?time', 'valid time', run('tesseract', big, 'stdout'))
        # ... and the gaps between small words may be lost ('Whatisdrawn', seen once in CI):
        # titles are looked for with their spaces squeezed out on both sides.
        squeezed = re.sub(r'\s+', '', text)
        missing = [p for p in PANELS if p.replace(' ', '') not in squeezed]
        self.assertEqual(missing, [], text)
        # The viewer guessing a layout drew "2D visualizers require a pinhole ancestor".
        self.assertNotIn('pinhole ancestor', text)
