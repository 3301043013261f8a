"""scripts/ask.py without the sion_verify package: one message that says how to install it, for
the Python that runs it, before anything is asked of a node (no traceback, no ROS graph)."""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HIDE_AND_RUN = """
import runpy, sys
sys.modules['sion_verify'] = None  # as if it were not installed
sys.argv = ['ask.py'] + sys.argv[1:]
runpy.run_path(%r, run_name='__main__')
""" % os.path.join(ROOT, 'scripts', 'ask.py')


class AskWithoutTheVerifier(unittest.TestCase):
    def test_says_how_to_install_it_and_asks_nothing(self):
        for question in (['range', '--box', '0,0,0,1000,1000,1000', '--from', '0', '--to', '1'],
                         ['subject', 'pallet-1']):
            out = subprocess.run([sys.executable, '-c', HIDE_AND_RUN] + question,
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 1, out.stderr)
            self.assertIn('sion_verify package is not installed', out.stderr)
            self.assertIn(f'{sys.executable} -m pip install ./python', out.stderr)
            self.assertNotIn('Traceback', out.stderr)


if __name__ == '__main__':
    unittest.main()
