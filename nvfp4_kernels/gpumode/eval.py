"""The GPU MODE evaluation, run locally:

    python -m nvfp4_kernels.gpumode.eval {test,benchmark,leaderboard,profile}
        --problem {gemv,gemm,dual_gemm,group_gemm,all} [--submission FILE]
        [--spec FILE] [--json FILE] [--device cuda|cpu]

The procedure of docs/competition.md: shapes from the task.yml
files (package data, or --spec), inputs in the harness's layouts and narrow
value distributions (nvfp4_kernels.gpumode.harness, values="harness"), the tolerance
|out - ref| <= 1e-3 + 1e-3 |ref| with NaN matching NaN, and for timing:
  gemm / dual_gemm / group_gemm: 50 inputs per shape (seeds +42 apart), all 50
    checked once, then samples of (L2 flush; event; 50 calls back to back;
    event) / 50;
  gemv: one input; samples of (L2 flush; event; one call; event);
  stop rule: after >= 3 samples and 100 ms, once the error of the mean is
    < 0.1% of it, or the samples add up to the time limit, or after 2 minutes
    (nvfp4_kernels.gpumode.harness.should_stop); the score is the geometric mean.
benchmark: warm-up on the first shape, then each shape (200 samples at most,
10 s). leaderboard: a warm-up of every shape, then each with the outputs
re-checked after every sample (1000 samples at most, 30 s).
profile: the torch profiler's kernel table of one call per benchmark shape.

Every test and benchmark runs in a child process (spawned; a new one after a
crash), so a submission that crashes or hangs is reported, not fatal.
Beyond the harness: test mode also checks each shape on full-range inputs
(all 16 fp4 codes, scales over many binades, zeros and subnormals), and
benchmark / leaderboard report the fraction of speed of light per shape
(ceilings measured once per run, nvfp4_kernels.timing).

--submission takes any file that defines custom_kernel(data); the default is
this package's own (nvfp4_kernels/gpumode/competition.py). On a machine without a GPU
the test mode runs on CPU tensors (slow but exact); timing needs a GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import sys
import time

from . import tasks
from ..timing import geomean

NUM_INPUTS = 50
DEFAULT_SUBMISSION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "competition.py")


# ---- in the child process ------------------------------------------------------

_modules: dict = {}


def _custom_kernel(path):
    if path not in _modules:
        spec = importlib.util.spec_from_file_location(f"_nvfp4_submission_{len(_modules)}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec.loader.exec_module(mod)
        _modules[path] = mod
    return _modules[path].custom_kernel


def _clone(data):
    import torch

    if isinstance(data, (tuple, list)):
        return type(data)(_clone(x) for x in data)
    return data.clone() if isinstance(data, torch.Tensor) else data


def _inputs(problem, shape, seed, device, values):
    from .harness import competition_inputs

    return competition_inputs(problem, shape, seed=seed, device=device, values=values)


def check(problem, data, output) -> tuple[bool, str]:
    """The output of custom_kernel(clone of data) against the exact reference."""
    import torch

    from ..testing import within_tolerance
    from .harness import competition_reference

    refs = competition_reference(problem, data)
    outs = output
    if problem != "group_gemm":
        refs, outs = [refs], [output]
    if not isinstance(outs, (list, tuple)) or len(outs) != len(refs):
        return False, f"expected {len(refs)} output tensor(s), got {type(output).__name__}"
    for g, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(r.shape):
            return False, f"output {g}: shape {getattr(o, 'shape', None)} != {tuple(r.shape)}"
        ok = within_tolerance(o, r)
        if not bool(ok.all()):
            bad = tuple((~ok).nonzero()[0].tolist())
            return False, (f"output {g}: {int((~ok).sum())} of {ok.numel()} elements off; first at {list(bad)}: "
                           f"got {o[bad].item()}, want {r[bad].item()}")
    return True, ""


def _sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_test(path, problem, shape, device, full_range):
    """One test shape: harness inputs (and full-range ones); (ok, message)."""
    fn = _custom_kernel(path)
    for values in ("harness", "full") if full_range else ("harness",):
        data = _inputs(problem, shape, shape.get("seed", 0), device, values)
        _sync(device)
        out = fn(_clone(data))
        _sync(device)
        ok, msg = check(problem, data, out)
        if not ok:
            return False, f"{values} inputs: {msg}"
    return True, ""


class _Flush:
    """The harness's L2 flush: a large fill, which leaves dirty lines behind."""

    def __init__(self):
        import torch

        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buf = torch.empty(max(4 * l2, 256 << 20) // 4, dtype=torch.int32, device="cuda")
        self.i = 0

    def __call__(self):
        self.i += 1
        self.buf.fill_(self.i)


def run_benchmark(path, problem, shape, recheck, max_repeats, max_time_ns):
    """One benchmark shape in the harness's way: a dict of Stats fields (ns), or
    {"error": message}."""
    import torch

    from .harness import should_stop, stats

    fn = _custom_kernel(path)
    n_inputs = 1 if problem == "gemv" else NUM_INPUTS
    seed = shape.get("seed", 0)
    datas = []
    for _ in range(n_inputs):
        seed += 42
        datas.append(_inputs(problem, shape, seed, "cuda", "harness"))
    checks = [_clone(d) for d in datas]
    outs = [fn(_clone(d)) for d in datas]
    torch.cuda.synchronize()
    for d, o in zip(checks, outs):
        ok, msg = check(problem, d, o)
        if not ok:
            return {"error": msg}
    flush = _Flush()
    samples, t0 = [], time.perf_counter_ns()
    for _ in range(max_repeats):
        torch.cuda.synchronize()
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outs = [fn(d) for d in datas]
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e6 / len(datas))
        if recheck:
            for d, o in zip(checks, outs):
                ok, msg = check(problem, d, o)
                if not ok:
                    return {"error": msg}
        if should_stop(samples, time.perf_counter_ns() - t0, max_time_ns):
            break
    return vars(stats(samples))


def run_profile(path, problem, shape):
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn = _custom_kernel(path)
    data = _inputs(problem, shape, shape.get("seed", 0), "cuda", "harness")
    fn(_clone(data))
    torch.cuda.synchronize()
    cloned = _clone(data)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(cloned)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=20)


def run_ceilings():
    from ..timing import measure_ceilings

    c = measure_ceilings()
    return {"device": c.device, "bandwidth": c.bandwidth, "fp16_rate": c.fp16_rate}


# ---- in the parent ----------------------------------------------------------------


def shape_cost(problem, shape):
    """(compulsory bytes, flops) of a shape: fp4 data + e4m3 scales read, fp16 written."""
    if problem == "group_gemm":
        parts = [dict(m=m, n=n, k=k, l=1) for m, n, k in zip(shape["m"], shape["n"], shape["k"])]
        costs = [shape_cost("gemm", p) for p in parts]
        return sum(c[0] for c in costs), sum(c[1] for c in costs)
    m, k, L = shape["m"], shape["k"], shape["l"]
    n = 1 if problem == "gemv" else shape["n"]
    nb = 2 if problem == "dual_gemm" else 1
    return L * ((m + nb * n) * k * 9 // 16 + 2 * m * n), 2 * nb * L * m * n * k


def describe(shape):
    return " ".join(f"{k}={v}" for k, v in shape.items() if k != "seed")


class Runner:
    """A one-process pool that survives its child: a crash or a timeout is
    reported as such and the next task gets a fresh child."""

    def __init__(self):
        self.pool = None

    def __call__(self, fn, *args, timeout=None):
        if self.pool is None:
            self.pool = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        fut = self.pool.submit(fn, *args)
        try:
            return fut.result(timeout=timeout)
        except cf.process.BrokenProcessPool:
            self.pool = None
            raise ChildError("the child process died (crash in the submission?)")
        except ChildError:
            raise
        except cf.TimeoutError:
            for p in list(getattr(self.pool, "_processes", {}).values()):
                p.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
            raise ChildError(f"timed out after {timeout} s")
        except Exception as e:  # raised in the child: the submission's error
            raise ChildError(f"{type(e).__name__}: {e}".strip()[:500]) from None

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()


class ChildError(Exception):
    pass


class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.tty = stream.isatty()

    def step(self, label):
        width = 24
        filled = width * self.done // max(1, self.total)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self):
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


def evaluate(mode, problems, submission=DEFAULT_SUBMISSION, spec=None, device=None, full_range=True,
             timeout=900, out=sys.stdout):
    """Run `mode` over `problems`; returns a JSON-ready dict of results."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if mode != "test" and device != "cuda":
        raise SystemExit(f"{mode} needs a CUDA GPU (test mode runs on the CPU)")
    submission = os.path.abspath(submission)
    runner = Runner()
    result = {"mode": mode, "submission": submission, "device": device, "problems": {}}
    sections = "tests" if mode == "test" else "benchmarks"
    jobs = [(p, s) for p in problems for s in tasks.shapes(p, spec if len(problems) == 1 else None)[sections]]
    progress = Progress(len(jobs) + (1 if mode in ("benchmark", "leaderboard") else 0))
    try:
        ceil = None
        if mode in ("benchmark", "leaderboard"):
            progress.step("measuring the ceilings")
            ceil = runner(run_ceilings, timeout=timeout)
            result["ceilings"] = ceil
            progress.done += 1
        warmed = set()
        for problem, shape in jobs:
            progress.step(f"{problem} {mode} {describe(shape)}")
            row = {"shape": shape}
            try:
                if mode == "test":
                    ok, msg = runner(run_test, submission, problem, shape, device, full_range, timeout=timeout)
                    row.update(ok=ok, error=msg or None)
                elif mode == "profile":
                    row.update(ok=True, table=runner(run_profile, submission, problem, shape, timeout=timeout))
                else:
                    if mode == "benchmark" and problem not in warmed:
                        runner(run_benchmark, submission, problem, shape, False, 200, 1e8, timeout=timeout)
                    elif mode == "leaderboard" and problem not in warmed:
                        for s in tasks.shapes(problem, spec if len(problems) == 1 else None)[sections]:
                            runner(run_benchmark, submission, problem, s, False, 1000, 5e8, timeout=timeout)
                    warmed.add(problem)
                    lb = mode == "leaderboard"
                    st = runner(run_benchmark, submission, problem, shape, lb, 1000 if lb else 200,
                                30e9 if lb else 10e9, timeout=timeout)
                    if "error" in st:
                        row.update(ok=False, error=st["error"])
                    else:
                        nbytes, flops = shape_cost(problem, shape)
                        sol_ns = max(nbytes / ceil["bandwidth"], flops / ceil["fp16_rate"]) * 1e9
                        row.update(ok=True, stats=st, sol_ns=sol_ns, frac_sol=sol_ns / st["mean"])
            except ChildError as e:
                row.update(ok=False, error=str(e))
            result["problems"].setdefault(problem, []).append(row)
            progress.done += 1
        progress.step("done")
        progress.finish()
    finally:
        runner.close()
    report(result, out)
    return result


def report(result, out=sys.stdout):
    mode = result["mode"]
    print(f"\n{mode} of {result['submission']} on {result['device']}", file=out)
    if "ceilings" in result:
        c = result["ceilings"]
        print(f"{c['device']}: copy {c['bandwidth'] / 1e12:.2f} TB/s, fp16 {c['fp16_rate'] / 1e12:.0f} TFLOP/s "
              f"(speed of light per shape = max(bytes / copy, flops / fp16))", file=out)
    for problem, rows in result["problems"].items():
        print(f"== {problem}", file=out)
        for row in rows:
            status = "pass" if row["ok"] else "FAIL"
            line = f"  {status:<4} {describe(row['shape']):<60}"
            if "stats" in row:
                s = row["stats"]
                line += (f" mean {s['mean'] / 1e3:9.2f} us +- {s['err'] / 1e3:.2f} (best {s['best'] / 1e3:.2f}, "
                         f"{s['runs']} runs)  SOL {row['sol_ns'] / 1e3:7.2f} us  frac {row['frac_sol']:.2f}")
            if row.get("error"):
                line += f"  {row['error']}"
            print(line, file=out)
            if "table" in row:
                print(row["table"], file=out)
        means = [r["stats"]["mean"] for r in rows if "stats" in r]
        if means and len(means) == len(rows):
            fr = geomean([r["frac_sol"] for r in rows])
            print(f"  score (geometric mean): {geomean(means) / 1e3:.3f} us; geomean fraction of SOL {fr:.3f}",
                  file=out)
    failed = sum(not r["ok"] for rows in result["problems"].values() for r in rows)
    total = sum(len(rows) for rows in result["problems"].values())
    print(f"{total - failed} of {total} passed", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m nvfp4_kernels.gpumode.eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("test", "benchmark", "leaderboard", "profile"))
    ap.add_argument("--problem", default="all", choices=tasks.PROBLEMS + ("all",))
    ap.add_argument("--submission", default=DEFAULT_SUBMISSION, help="a file defining custom_kernel(data)")
    ap.add_argument("--spec", help="a task.yml to take the shapes from (one problem only)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    ap.add_argument("--no-full-range", action="store_true", help="test mode: the harness's inputs only")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per test or benchmark shape")
    args = ap.parse_args(argv)
    problems = tasks.PROBLEMS if args.problem == "all" else (args.problem,)
    if args.spec and len(problems) > 1:
        ap.error("--spec needs one --problem")
    result = evaluate(args.mode, problems, args.submission, args.spec, args.device, not args.no_full_range,
                      args.timeout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(r["ok"] for rows in result["problems"].values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
