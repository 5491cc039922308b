"""Top SASS instructions by warp stall samples from a scripts/ncu_source.sh CSV:
    python3 scripts/ncu_top.py FILE.csv [N] [--after HEXADDR]
prints address, samples (share), the largest stall reasons and the SASS text."""

import csv
import sys


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 40
    rows = list(csv.reader(open(path, errors="replace")))
    head_i = next(i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r))
    head, body = rows[head_i], [r for r in rows[head_i + 1:] if len(r) == len(rows[head_i])]
    col = {c: i for i, c in enumerate(head)}
    all_i = next(i for c, i in col.items() if c.startswith("Warp Stall Sampling (All"))
    addr_i = next((i for c, i in col.items() if c.lower() in ("address", "# address")), 0)
    src_i = next((i for c, i in col.items() if c.lower() == "source"), 1)
    stall_cols = [(c, i) for c, i in col.items() if c.startswith("stall_") or "Stall" in c and i != all_i]

    def num(x):
        try:
            return float(x.replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r[all_i]) for r in body) or 1
    print(f"{len(body)} instructions, {total:.0f} samples; columns: {[c for c, _ in stall_cols][:12]}")
    for r in sorted(body, key=lambda r: -num(r[all_i]))[:n]:
        reasons = sorted(((num(r[i]), c) for c, i in stall_cols), reverse=True)[:3]
        rs = ", ".join(f"{c.replace('stall_', '')}={v:.0f}" for v, c in reasons if v)
        print(f"{r[addr_i]:>8} {num(r[all_i]):6.0f} ({num(r[all_i]) / total:5.1%})  {r[src_i][:70]:<70}  {rs}")
    # samples by address range, in tenths of the kernel
    addrs = [(int(r[addr_i], 16) if r[addr_i].startswith("0x") else k, num(r[all_i])) for k, r in enumerate(body)]
    lo, hi = min(a for a, _ in addrs), max(a for a, _ in addrs) + 1
    bins = [0.0] * 20
    for a, s in addrs:
        bins[min(19, (a - lo) * 20 // (hi - lo))] += s
    print("samples by twentieth of the code:", " ".join(f"{b / total:.0%}" for b in bins))


if __name__ == "__main__":
    main()
