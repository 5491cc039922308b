"""Condense the output of dev/bench_ab.sh runs to one table that fits a
device call's output tail: a row per shape, a column per variant, each cell
the rounds' times joined by '/'.

    python3 dev/ab_summary.py gemv.log gemm.log comp.log

Reads bench_gemv rows (call time, us), bench_gemm rows (kernel time, us),
benchmarks.competition rows (t_call:loop, us; "FAIL" where a check failed) and
bench_models rows (graph time, us)."""
import re, sys
from collections import OrderedDict, defaultdict

pats = [
    (re.compile(r"^(\w+) r(\d+)\| +(\d+) +(\d+) +(\d+) +(linear|blocked) +([\d.]+)"),
     lambda m: (f"gemv {m[3]}x{m[4]}x{m[5]} {m[6][:3]}", m[7])),
    (re.compile(r"^(\w+) r(\d+)\| (gemm|dual) +(\d+) +(\d+) +(\d+) +([\d.]+)"),
     lambda m: (f"{m[3]} {m[4]}x{m[5]}x{m[6]}", m[7])),
    (re.compile(r"^(\w+) r(\d+)\| (\w+) +(.+?) +(ok  |FAIL) +([\d.]+) us .* loop +([\d.]+)"),
     lambda m: (f"C {m[3][:5]} {re.sub(r'[^0-9x]+', ' ', m[4]).strip()}{'' if m[5].startswith('ok') else ' FAIL'}",
                f"{m[6]}:{m[7]}")),
    (re.compile(r"^(\w+) r(\d+)\| +(\S+) +(\w+) +(\d+) +(w4a4t?|w4a16[pt]?) +([\d.]+) +[\d.]+ +[\d.]+x"),
     lambda m: (f"{m[3]} {m[4]} M={m[5]} {m[6]}", m[7])),
]
rows, variants = OrderedDict(), []
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        for pat, fn in pats:
            m = pat.match(line)
            if m:
                key, val = fn(m)
                v = m[1]
                if v not in variants:
                    variants.append(v)
                rows.setdefault(key, defaultdict(list))[v].append(val)
                break
w = max([len(k) for k in rows] + [4])
print(" " * w, *[f"{v:>16}" for v in variants])
for k, cells in rows.items():
    print(f"{k:<{w}}", *[f"{'/'.join(cells.get(v, ['-'])):>16}" for v in variants])
