"""Bit layouts of a repacked NVFP4 weight word whose four 16-bit pairs decode in few instructions.

A 32-bit word holds 8 e2m1 codes. The W4A16 decoders turn it into 4 registers of two 16-bit values each (a pair),
the code's magnitude and sign bits placed at fixed positions (bf16: magnitude at 6..8 and sign at 15 of each half;
fp16: 9..11 and 15; numerics.cuh), then multiply by the scale. In the checkpoint's layout that takes a shift and
3 instructions a pair (13 a word). A layout written once at load can put each pair's 8 bits where fewer
instructions fetch them. This searches per pair among: the bits already in place (a mask: 1 instruction), a shift
or rotate then a mask (2), and for the last pair a gather (mask, one multiply without carries, mask: 3), and
prints the cheapest layouts, each checked by emulation over every combination of the gathered bits.

    python3 dev/pack_search.py [bf16|fp16]
"""

import itertools
import sys

TARGETS = {"bf16": (6, 7, 8, 15, 22, 23, 24, 31), "fp16": (9, 10, 11, 15, 25, 26, 27, 31)}
ALL = frozenset(range(32))


def recipes(target):
    """(name, instructions, source bits) of each way to bring a pair's 8 bits to `target` with one op and a mask."""
    out = [("mask", 1, frozenset(target))]
    for s in range(1, 32):
        left = [p - s for p in target]
        if min(left) >= 0:
            out.append((f"shl {s} + mask", 2, frozenset(left)))
        right = [p + s for p in target]
        if max(right) <= 31:
            out.append((f"shr {s} + mask", 2, frozenset(right)))
        out.append((f"rotl {s} + mask", 2, frozenset((p - s) % 32 for p in target)))
    return out


def gather(sources, target):
    """A multiplier K with ((w & sources) * K) & target placing the sources' bits on the target's, for some
    assignment of source bits to target bits, exact for every combination of the source bits; None if none."""
    src = sorted(sources)
    mask = sum(1 << p for p in target)
    for order in itertools.permutations(target):
        if any(t < s for s, t in zip(src, order)):
            continue
        k = 0
        for s, t in zip(src, order):
            k |= 1 << (t - s)  # one term a distinct shift
        if all(
            (sum(1 << src[i] for i in range(8) if bits >> i & 1) * k) & mask & 0xFFFFFFFF
            == sum(1 << order[i] for i in range(8) if bits >> i & 1)
            for bits in range(256)
        ):
            return k
    return None


def search(target, limit=4):
    found = []
    for combo in itertools.combinations(recipes(target), 3):
        used = frozenset()
        for _, _, bits in combo:
            if used & bits:
                break
            used |= bits
        else:
            rest = ALL - used
            k = gather(rest, target)
            if k is not None:
                found.append((sum(c for _, c, _ in combo) + 3, [name for name, _, _ in combo], sorted(rest), k))
                if len(found) >= limit:
                    break
    return sorted(found)


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    layouts = search(TARGETS[kind])
    if not layouts:
        print(f"{kind}: no layout with three one-op pairs and a gather")
    for cost, names, rest, k in layouts:
        print(f"{kind}: {cost} instructions a word: {', '.join(names)}, gather bits {rest} times {k:#x}")
