"""The examples run as a user runs them (the README's quickstart is examples/quickstart.py)."""

from helpers import run_example


def test_quickstart():
    r = run_example("quickstart.py")
    assert r.returncode == 0, r.stdout + r.stderr
    err = float(r.stdout.strip().rsplit(" ", 1)[1])
    assert 0.05 < err < 0.2, r.stdout  # 4-bit quantization's error on random data, no more
