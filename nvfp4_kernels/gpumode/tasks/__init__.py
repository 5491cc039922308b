"""The GPU MODE problem definitions (task.yml, copied from the competition's
reference-kernels repository, problems/nvidia/) and their shapes.

The shape lists in these files are one flow-style mapping per line, so they are
read as JSON without a YAML dependency.
"""

from __future__ import annotations

import json
import os

PROBLEMS = ("gemv", "gemm", "dual_gemm", "group_gemm")
_HERE = os.path.dirname(os.path.abspath(__file__))


def path(problem: str) -> str:
    if problem not in PROBLEMS:
        raise ValueError(f"unknown problem {problem!r}; one of {PROBLEMS}")
    return os.path.join(_HERE, f"nvfp4_{problem}.task.yml")


def shapes(problem: str, spec: str | None = None) -> dict:
    """{"tests": [shape, ...], "benchmarks": [...]} of a task file (default: ours)."""
    out = {"tests": [], "benchmarks": []}
    section = None
    with open(spec or path(problem)) as f:
        for line in f:
            stripped = line.strip()
            if not line.startswith((" ", "\t", "-")) and stripped.endswith(":"):
                section = stripped[:-1]
            elif section in out and stripped.startswith("- {"):
                out[section].append(json.loads(stripped[2:]))
    return out
