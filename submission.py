"""GPU MODE NVFP4 submission for all four problems, through the installed
package: custom_kernel lives in nvfp4_kernels/gpumode/competition.py. For popcorn-cli,
which takes one self-contained file, write a bundle:
    python -m nvfp4_kernels.gpumode.bundle --problem gemm -o submission_gemm.py
"""

from nvfp4_kernels.gpumode.competition import custom_kernel  # noqa: F401
