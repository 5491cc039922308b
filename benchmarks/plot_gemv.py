"""Render bench_gemv's JSON as a PNG: python -m benchmarks.plot_gemv RESULTS.json OUT.png"""

import json
import sys

from .bench_gemv import plot

if __name__ == "__main__":
    data = json.load(open(sys.argv[1]))
    plot(data["rows"], data["device"], sys.argv[2])
