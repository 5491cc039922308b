"""Build of nvfp4_kernels._C: the C/CUDA kernels behind torch custom ops.

CUDA sources are compiled when nvcc and a CUDA build of torch are both present
(no GPU is needed to build); otherwise the extension is CPU-only and says so.
Targets: sm_80 code + compute_80 PTX (runs on every GPU from sm_80 up), sm_90a
(Hopper fast paths) and sm_100a when this nvcc knows it; each file's targets
compile in parallel (nvcc --threads), the files as MAX_JOBS allows.

Environment: NVFP4_CPU_ONLY=1 builds without CUDA (about a minute);
TORCH_CUDA_ARCH_LIST="9.0a" (or "8.0;9.0a", "+PTX" for PTX) builds for the
GPUs named only, ~4x faster; MAX_JOBS caps parallel files; DEBUG=1 for -O0 -g;
NVFP4_NVCC_FLAGS adds nvcc flags (e.g. -Xptxas=-v for register reports).
"""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
DEBUG = os.environ.get("DEBUG") == "1"


def find_cuda_home():
    """The toolkit folder (bin/nvcc and include/). torch guesses it from the nvcc on
    PATH, which fails when that nvcc is a wrapper script, so look for the headers."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    candidates = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if nvcc else []
    candidates += sorted(glob.glob("/usr/local/cuda*"))
    for home in candidates:
        if os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")) and os.path.exists(
            os.path.join(home, "bin", "nvcc")
        ):
            return home
    return None


if find_cuda_home() and not os.environ.get("CUDA_HOME"):
    os.environ["CUDA_HOME"] = find_cuda_home()

import torch  # noqa: E402  (after CUDA_HOME is settled: torch reads it at import)
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402


def nvcc_path():
    if torch.version.cuda is None or os.environ.get("NVFP4_CPU_ONLY") == "1" or not CUDA_HOME:
        return None
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    return nvcc if os.path.exists(nvcc) else None


def gencode_flags(nvcc):
    """-gencode flags: TORCH_CUDA_ARCH_LIST's targets where it is set, else every GPU from sm_80 up."""
    wanted = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(",", ";").split(";")
    flags = []
    for arch in filter(None, (a.strip() for a in wanted)):
        ptx = arch.endswith("+PTX")
        num = arch.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    if flags:
        return flags
    archs = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    flags = [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_80,code=compute_80",
    ]
    if "compute_100" in archs:
        flags.insert(2, "-gencode=arch=compute_100a,code=sm_100a")
    return flags


def cublaslt_include():
    """A folder holding cublasLt.h: the toolkit's, or that of the CUDA wheels torch depends on (nvidia/*/include).
    The library itself is the one torch loads (csrc/cuda/cublas.cu opens it at run time); without the header the
    kernels are built without the cuBLASLt path."""
    dirs = [os.path.join(CUDA_HOME, "include")] if CUDA_HOME else []
    try:
        import nvidia

        for root in nvidia.__path__:
            dirs += sorted(glob.glob(os.path.join(root, "*", "include")))
    except ImportError:
        pass
    return next((d for d in dirs if os.path.exists(os.path.join(d, "cublasLt.h"))), None)


def targets(flags):
    return ", ".join(f.rsplit("code=", 1)[1].replace("compute_", "PTX ") for f in flags)


def rel(paths):
    return sorted(os.path.relpath(p, ROOT) for p in paths)


def extension():
    nvcc = nvcc_path()
    opt = ["-O0", "-g"] if DEBUG else ["-O3"]
    sources = rel(glob.glob(os.path.join(ROOT, "csrc", "*.cpp")))
    include = [os.path.join(ROOT, "csrc")]
    if nvcc is None:
        print("nvfp4_kernels: building CPU-only (no nvcc or a CPU build of torch): CUDA ops will raise")
        return CppExtension("nvfp4_kernels._C", sources, include_dirs=include, extra_compile_args={"cxx": opt})
    gencode = gencode_flags(nvcc)
    nvcc_flags = opt + ["-lineinfo", "-DNVFP4_WITH_CUDA", "--expt-relaxed-constexpr", f"--threads={len(gencode)}"]
    lt = cublaslt_include()
    if lt:
        nvcc_flags += ["-DNVFP4_WITH_CUBLASLT", f"-I{lt}"]
    else:
        print("nvfp4_kernels: no cublasLt.h found: building without the cuBLASLt path (prefill of W4A16 calls)")
    nvcc_flags += gencode + os.environ.get("NVFP4_NVCC_FLAGS", "").split()
    print(f"nvfp4_kernels: building with CUDA ({nvcc}) for {targets(gencode)}: ~1.5 min on 16 cores, "
          "~5 min on 2 (TORCH_CUDA_ARCH_LIST=9.0a builds one target)")
    return CUDAExtension(
        "nvfp4_kernels._C",
        sources + rel(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cu"))),
        include_dirs=include,
        extra_compile_args={"cxx": opt + ["-DNVFP4_WITH_CUDA"], "nvcc": nvcc_flags},
    )


# The CPU kernels are C: built by the C compiler into a static library that the
# extension links (torch's build would compile .c files as C++).
CPU_KERNELS = (
    "nvfp4_cpu",
    {
        "sources": rel(glob.glob(os.path.join(ROOT, "csrc", "cpu", "*.c"))),
        "include_dirs": [os.path.join(ROOT, "csrc")],
        "cflags": ["-std=c11", "-Wall", "-Wextra", "-Wno-psabi"] + (["-O0", "-g"] if DEBUG else ["-O3"]),
    },
)


class BuildPy(build_py):
    """The package, and csrc/ inside it (nvfp4_kernels/csrc): an installed package writes
    competition bundles from those sources (nvfp4_kernels.gpumode.bundle)."""

    def run(self):
        super().run()
        if not self.dry_run:
            shutil.copytree(os.path.join(ROOT, "csrc"), os.path.join(self.build_lib, "nvfp4_kernels", "csrc"),
                            dirs_exist_ok=True)


class BuildExt(BuildExtension):
    """torch's build_ext, after the C library it links (plain `build_ext` would not build it)."""

    def run(self):
        self.run_command("build_clib")
        super().run()


setup(
    libraries=[CPU_KERNELS],
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
