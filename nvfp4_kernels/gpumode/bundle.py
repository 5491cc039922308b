"""One self-contained submission file for popcorn-cli:

    python -m nvfp4_kernels.gpumode.bundle --problem {gemv,gemm,dual_gemm,group_gemm} -o FILE

The file embeds the C/C++/CUDA sources of the CUDA path (csrc/: the C API,
numerics, kernels, planner and torch binding; not the CPU kernels) and this
package's custom_kernel adapter (nvfp4_kernels/gpumode/competition.py). At first
import it compiles them for the GPU it runs on with
torch.utils.cpp_extension.load (ninja), cached by content under
$NVFP4_BUNDLE_CACHE (default ~/.cache/nvfp4_kernels_bundle), and loads the
library; the ops register as torch.ops.nvfp4_b<hash>, so a bundle and the
installed package can share a process. The installed package is not imported.
(load, not load_inline: the kernels are several translation units, each with
its own file-local names, which load_inline would paste into one file.)
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import subprocess
import sys

from . import tasks

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PACKAGE)
# An installed package carries the sources inside it (setup.py, BuildPy); a source checkout has them beside it.
CSRC = next((d for d in (os.path.join(PACKAGE, "csrc"), os.path.join(ROOT, "csrc")) if os.path.isdir(d)),
            os.path.join(ROOT, "csrc"))
ADAPTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "competition.py")
IMPORT_LINE = "import nvfp4_kernels  # noqa: F401"
OPS_LINE = "_ops = torch.ops.nvfp4\n"

LOADER = '''
import hashlib
import os

import torch
import torch.utils.cpp_extension as _ext

_NS = "{ns}"


def _load():
    """Compile the sources above for this GPU (once; cached by content) and load them."""
    major, minor = torch.cuda.get_device_capability()
    arch = f"{{major}}.{{minor}}" + ("a" if major in (9, 10) else "")  # wgmma / tcgen05 need the a-targets
    key = hashlib.sha256((_NS + arch + torch.__version__).encode()).hexdigest()[:12]
    name = f"{{_NS}}_{{key}}"
    cache = os.environ.get("NVFP4_BUNDLE_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "nvfp4_kernels_bundle"))
    src, build = os.path.join(cache, name, "src"), os.path.join(cache, name, "build")
    for rel, text in _SOURCES.items():
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
    os.makedirs(build, exist_ok=True)
    if not any(f.endswith(".so") for f in os.listdir(build)):
        print(f"nvfp4 bundle: compiling its CUDA kernels for sm_{{arch}} (first import only, a few minutes; "
              f"cached in {{cache}})", file=__import__("sys").stderr, flush=True)
    # The toolkit's headers for the C++ file (torch guesses CUDA_HOME from the nvcc on PATH).
    cuda_inc = [d for d in (os.path.join(_ext.CUDA_HOME or "", "include"), "/usr/local/cuda/include")
                if os.path.exists(os.path.join(d, "cuda_runtime_api.h"))][:1]
    defs = ["-DNVFP4_WITH_CUDA", "-DNVFP4_NO_CPU", f"-DNVFP4_OP_NAMESPACE={{_NS}}"]
    saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    try:
        _ext.load(
            name=name,
            sources=[os.path.join(src, r) for r in _SOURCES if r.endswith((".cu", ".cpp"))],
            extra_include_paths=[src] + cuda_inc,
            extra_cflags=["-O3"] + defs,
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"] + defs,
            build_directory=build,
            is_python_module=False,
            verbose=False,
        )
    finally:
        if saved is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved
    return getattr(torch.ops, _NS)


_ops = _load()
'''


def sources() -> dict[str, str]:
    """csrc files of the CUDA build, relative path -> text."""
    if not os.path.isdir(CSRC):
        raise SystemExit(f"no C/CUDA sources at {CSRC}: reinstall the package, or run from a source checkout")
    paths = sorted(glob.glob(os.path.join(CSRC, "*.h")) + glob.glob(os.path.join(CSRC, "cuda", "*")))
    paths.append(os.path.join(CSRC, "torch_binding.cpp"))
    out = {}
    for p in paths:
        text = open(p).read()
        if '"""' in text or text.endswith("\\"):
            raise SystemExit(f"{p}: cannot be embedded in a raw string literal")
        out[os.path.relpath(p, CSRC)] = text
    return out


def adapter() -> str:
    """competition.py without its package import: functions and custom_kernel."""
    text = open(ADAPTER).read()
    doc_end = text.index('"""', 3) + 3
    body = text[doc_end:]
    if IMPORT_LINE not in body or OPS_LINE not in body:
        raise SystemExit(f"{ADAPTER}: the import / _ops lines the bundle replaces have changed")
    body = body[body.index(OPS_LINE) + len(OPS_LINE):]
    return body.strip() + "\n"


def version() -> str:
    """The commit of a source checkout, else the installed package's version."""
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as package_version

        try:
            return f"nvfp4-kernels {package_version('nvfp4-kernels')}"
        except PackageNotFoundError:
            return "nvfp4-kernels (version unknown)"
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "csrc", "nvfp4_kernels/gpumode/competition.py"],
                               capture_output=True, text=True).stdout.strip()
        return f"commit {rev}" + (" with local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "a source checkout"


def render(problem: str) -> str:
    if problem not in tasks.PROBLEMS:
        raise SystemExit(f"unknown problem {problem!r}; one of {tasks.PROBLEMS}")
    srcs = sources()
    digest = hashlib.sha256("".join(f"{k}\0{v}\0" for k, v in sorted(srcs.items())).encode()).hexdigest()[:10]
    ns = f"nvfp4_b{digest}"
    parts = [
        f'"""nvfp4-kernels: GPU MODE submission for {problem}, in one file.\n\n'
        f"Written by `python -m nvfp4_kernels.gpumode.bundle --problem {problem}` from {version()}.\n"
        "The CUDA/C++ sources below are compiled for this GPU at first import and cached\n"
        "(nvfp4_kernels/gpumode/bundle.py says how); custom_kernel(data) takes the harness's tuple.\n"
        '"""\n\n',
        "_SOURCES = {\n",
    ]
    for rel, text in srcs.items():
        parts.append(f'    "{rel}": r"""{text}""",\n')
    parts.append("}\n")
    parts.append(LOADER.format(ns=ns))
    parts.append("\n\n# ---- nvfp4_kernels/gpumode/competition.py ----\n\n")
    parts.append(adapter())
    return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m nvfp4_kernels.gpumode.bundle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", required=True, choices=tasks.PROBLEMS)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    text = render(args.problem)
    with open(args.output, "w") as f:
        f.write(text)
    print(f"wrote {args.output} ({len(text) // 1024} KB): custom_kernel for {args.problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
