"""A kernel that holds multiprocessors for a while: all of the device's shared
memory per block, one CTA per SM, spinning on the global timer. Tests use it
to take SMs away from a launch (as MPS limits or a concurrent kernel would).

It is PTX loaded through the driver API (libcuda, with ctypes) into the context
torch uses: no compiler and no package beyond torch."""

import ctypes

import torch

_PTX = rb"""
.version 7.0
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 nvfp4_hog_smem[];
.visible .entry nvfp4_test_hog(.param .u64 ns)
{
  .reg .pred %p;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [ns];
  mov.u64 %rd2, %globaltimer;
SPIN:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p, %rd4, %rd1;
  @%p bra SPIN;
  ret;
}
"""

_MAX_SHARED_PER_BLOCK_OPTIN = 97  # CUdevice_attribute
_FUNC_MAX_DYNAMIC_SHARED = 8  # CUfunction_attribute


class SmHog:
    def __init__(self, device=0):
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the runtime's context is current on this thread
        self._cu = cu = ctypes.CDLL("libcuda.so.1")
        cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self._mod, self._fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(cu.cuModuleLoadData(ctypes.byref(self._mod), ctypes.c_char_p(_PTX)), "cuModuleLoadData")
        self._check(cu.cuModuleGetFunction(ctypes.byref(self._fn), self._mod, b"nvfp4_test_hog"), "cuModuleGetFunction")
        smem = ctypes.c_int()
        self._check(cu.cuDeviceGetAttribute(ctypes.byref(smem), _MAX_SHARED_PER_BLOCK_OPTIN, device), "attribute")
        self.smem = smem.value
        self._check(cu.cuFuncSetAttribute(self._fn, _FUNC_MAX_DYNAMIC_SHARED, self.smem), "cuFuncSetAttribute")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def launch(self, ctas, seconds, stream):
        """ctas CTAs of one warp on `stream`, each with all the shared memory a
        block may have (so one per SM and nothing else with a sizeable tile
        beside it), each spinning for `seconds`."""
        ns = ctypes.c_uint64(int(seconds * 1e9))
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(ns), ctypes.c_void_p))
        self._check(self._cu.cuLaunchKernel(self._fn, ctas, 1, 1, 32, 1, 1, self.smem, stream.cuda_stream,
                                            ctypes.cast(params, ctypes.c_void_p), None), "cuLaunchKernel")
