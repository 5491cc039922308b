"""The examples run as a user runs them (the README's quickstart is examples/quickstart.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    err = float(r.stdout.strip().rsplit(" ", 1)[1])
    assert 0.05 < err < 0.2, r.stdout  # 4-bit quantization's error on random data, no more
