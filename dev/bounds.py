"""Builds of the W4A16 tiles (csrc/cuda/w4a16.cu, the fast ring) with part of their loop taken out, for
dev/bench_ab.sh: what bounds a shape is the part whose absence leaves its time (their results are wrong).

    python3 dev/bounds.py nomath nocopy noscale skeleton
    AB_VARIANTS='base=;nomath=;nocopy=;noscale=;skeleton=' bash dev/bench_ab.sh 1 \\
        python3 -m benchmarks.bench_moe --model deepseek-v3 --t 8,64 --mode w4a16

Each NAME writes this tree's csrc/ to dev/ab_NAME/csrc with its edits:
  nomath    no decode or mma (the copies and the ring's waits and barriers stay)
  nocopy    no copies after the ring's first STAGES - 1 steps (the math reads stale slots)
  noscale   no scale copies of whole steps
  skeleton  nomath and nocopy: the CTAs' start and end, the loop's waits and barriers, and the small ops around
An edit whose source line has moved fails here, not in the build."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP_MMA = "        mma_step<AT, MW, NT, decltype(ntu)::value>(base + rd, base + sf_at(s), off, nt, acc);\n"
LOOP_COPY = "        if (s + S::STAGES - 1 < steps) copy(s + S::STAGES - 1, base + wr);\n"
SCALE_COPY = "        if (cp.sf_copy) {\n          const int ph = (ph0 + s) & 3;"
EDITS = {
    "nomath": [(LOOP_MMA, "")],
    "nocopy": [(LOOP_COPY, "")],
    "noscale": [(SCALE_COPY, "        if (false) {\n          const int ph = (ph0 + s) & 3;")],
}
EDITS["skeleton"] = EDITS["nomath"] + EDITS["nocopy"]


def main(names):
    if not names or any(n not in EDITS for n in names):
        sys.exit(f"usage: python3 dev/bounds.py NAME... (NAME: {', '.join(EDITS)})")
    source = (ROOT / "csrc/cuda/w4a16.cu").read_text()
    for name in names:
        text = source
        for old, new in EDITS[name]:
            if text.count(old) != 1:
                sys.exit(f"{name}: the line to edit is not in csrc/cuda/w4a16.cu once: {old.strip()!r}")
            text = text.replace(old, new)
        dest = ROOT / f"dev/ab_{name}/csrc"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(ROOT / "csrc", dest)
        (dest / "cuda/w4a16.cu").write_text(text)
        print(f"dev/ab_{name}/csrc: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
