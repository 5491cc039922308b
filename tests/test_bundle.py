"""python -m nvfp4_kernels.gpumode.bundle: one self-contained submission file. Here
(no GPU needed) the file is written and inspected; dev/gpu_eval.sh compiles
each bundle on a GPU and runs the eval on it."""

import ast

import pytest

from nvfp4_kernels.gpumode import bundle, tasks


@pytest.mark.parametrize("problem", tasks.PROBLEMS)
def test_bundle_is_self_contained(tmp_path, problem):
    out = tmp_path / f"sub_{problem}.py"
    assert bundle.main(["--problem", problem, "-o", str(out)]) == 0
    text = out.read_text()
    tree = ast.parse(text)
    imports = {n.names[0].name for n in ast.walk(tree) if isinstance(n, ast.Import)}
    imports |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("nvfp4_kernels") for m in imports), imports
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"custom_kernel", "_load"} <= funcs
    sources = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "_SOURCES")
    names = {k.value for k in sources.keys}
    assert {"nvfp4.h", "numerics.h", "torch_binding.cpp", "cuda/plan.cu", "cuda/matmul_sm90.cu", "cuda/gemv_mma.cuh"} <= names
    embedded = {k.value: v.value for k, v in zip(sources.keys, sources.values)}
    assert embedded == bundle.sources(), "sources must be embedded verbatim"
    assert "torch.ops.nvfp4." not in text.split("# ---- nvfp4_kernels/gpumode/competition.py ----")[1]
