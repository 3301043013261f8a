"""An evidence directory (`sion memory evidence`, docs/EVIDENCE.md) checked by the Python
`sion_verify` alone: the proof against the ledger key and the question asked, and every payload
of blobs/ against the atom it is for; refused once a payload is changed.

    SION_BIN=target/debug/sion python3 -m unittest tests.viewers.test_evidence
"""

import os
import re
import subprocess
import tempfile
import unittest

import sion_verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SION = os.environ.get('SION_BIN', os.path.join(ROOT, 'target', 'debug', 'sion'))
QUESTION = dict(frame='map', box='0m,0m,-1m,10m,8m,3m', from_time='2026-01-01T00:00:00Z',
                to_time='2026-01-01T00:00:30Z')


def sion(*args):
    out = subprocess.run([SION, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f'sion {" ".join(args)}: {out.stdout}{out.stderr}')
    return out.stdout


class Evidence(unittest.TestCase):
    def test_the_python_verifier_checks_an_evidence_directory(self):
        work = tempfile.mkdtemp(prefix='sion-evidence-test-')
        data, out = os.path.join(work, 'memory'), os.path.join(work, 'evidence')
        sion('replay', os.path.join(ROOT, 'bags', 'demo.mcap'), '--data', data)
        said = sion('memory', 'evidence', '--data', data, '--box', QUESTION['box'], '--from', QUESTION['from_time'],
                    '--to', QUESTION['to_time'], '--out', out)
        key = re.search(r'--ledger-key ([0-9a-f]{64})', said).group(1)
        checked = sion_verify.check_evidence(out, key, **QUESTION)
        blobs = sorted(os.listdir(os.path.join(out, 'blobs')))
        self.assertEqual(checked['blobs_checked'], len(blobs))
        self.assertIn('atoms are everything', checked['statement'])
        # Another question's answer is refused, as verify refuses it.
        with self.assertRaises(sion_verify.ProofError) as refused:
            sion_verify.check_evidence(out, key, **{**QUESTION, 'box': '0m,0m,-1m,11m,8m,3m'})
        self.assertEqual(refused.exception.code, 'other_question')
        # So is a payload changed by one byte.
        path = os.path.join(out, 'blobs', blobs[0])
        with open(path, 'r+b') as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 1]))
        with self.assertRaises(sion_verify.ProofError) as refused:
            sion_verify.check_evidence(out, key, **QUESTION)
        self.assertEqual(refused.exception.code, 'evidence_hash')
