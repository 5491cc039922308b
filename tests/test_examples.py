"""The examples run as a user runs them (the README's quickstart is examples/quickstart.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *args):
    """The example in a fresh interpreter that imports the package as this one does (built in place
    in a clone, or installed)."""
    import nvfp4_kernels

    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(nvfp4_kernels.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [pkg_parent, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_quickstart():
    r = run_example("quickstart.py")
    assert r.returncode == 0, r.stdout + r.stderr
    err = float(r.stdout.strip().rsplit(" ", 1)[1])
    assert 0.05 < err < 0.2, r.stdout  # 4-bit quantization's error on random data, no more
