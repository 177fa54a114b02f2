#!/usr/bin/env python3
"""Times one training step of ResAttNet3D in gridnn (gridnn-train) and in PyTorch, in one run.

Same network (ResAttNet3D-18, attention after layer3 and layer4, one input channel, two
classes; test/parity/torch_modules.py mirrors models/nets/resattnet3d.h), same input shape
DxHxW and batch, same optimizer (SGD, lr 0.01, momentum 0.9), f32. Case by case, and for each
case at each thread count of --threads, it runs

    gridnn-train --model resattnet3d --depth 18 --width W --input DxHxW --batch B
                 --steps WARMUP+STEPS+1 --optimizer sgd --momentum 0.9 --lr 0.01
                 --train-samples B*(WARMUP+STEPS+1) --val-samples 8 --eval-every <never>
                 --no-progress --metrics FILE --device DEV

with OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to the thread count, and takes the
differences of consecutive "seconds" of its "train" metrics lines (wall time since the run
started), drops the first WARMUP steps and any step with a validation in between, and reports
the median. This is the trainer's whole step: synthetic data generation (on the loader's
background prefetch thread, overlapped), forward, loss, backward, optimizer. With
--gridnn-data fixed it trains instead on one batch kept in memory (--train-samples B
--no-augment --cache-data), the same work as the torch side, which steps on one fixed batch:
on a 2-core machine the generation thread (about 2-3 ms per 64^3 volume, bench_data) competes
with the training threads. Then the PyTorch
module, in a child process of its own (this script again, in a hidden --torch-worker mode that
prints JSON), with torch.set_num_threads at the same count: forward on a random batch of the
same shape, F.cross_entropy, zero_grad, backward, SGD step; WARMUP steps, then the median of
STEPS (each timed alone; with torch.cuda.synchronize() before and after on the GPU). Nothing
runs at the same time. The timing table has three columns per thread count T:

    case | gridnn s/step Tt | torch s/step Tt | torch/gridnn Tt | ...   (ratio > 1: gridnn faster)

followed, per thread count, by the geometric mean of the ratios and the smallest ratio (with
its case). Then the throughput table: the step's convolution and linear FLOPs, counted from
the network by the torch worker (forward hooks on every Conv3d and Linear; 3 x forward per
step, 2 x for the stem, whose input needs no gradient), over each side's step time, and on the
same line this machine's one-thread sgemm rate (2048^3, the best of 5, in a child process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1: the faster of torch.mm, which runs the BLAS torch
links, and oneDNN's dnnl_sgemm through ctypes; OpenBLAS picks its kernel by CPU model and falls
back to SSE3 on models it does not know) and gridnn's share of it. The sgemm runs right before
every gridnn run, and a share is the median over the rounds of each round's rate over the
sgemm just before it, so that a slow spell of a shared host moves both sides of a share; the
sgemm column is the median of the case's sgemm runs. Each sgemm run is the best of its 5
products, so the table also gives the like-for-like best: gridnn's fastest step's rate over
the fastest sgemm run of the case (what each reaches when the host leaves it alone):

    case | GFLOP/step | sgemm 1t GFLOP/s | gridnn GFLOP/s Tt | torch GFLOP/s Tt | gridnn/sgemm Tt |
        gridnn/sgemm best Tt | ...

Then the memory table, the peak resident set (RSS) of each run's process, in MiB:

    case | gridnn MiB Tt | torch MiB Tt | torch/gridnn Tt | ...

Both peaks are ru_maxrss of that process, as os.wait4 returns it to a small launcher process
that forks and waits for it (a process started straight from this one, which has torch
loaded, would report this process's resident set when it is larger than its own). The torch
peak is the whole Python process: the interpreter and torch's libraries (resident after
import, before the model; printed under the table) and the model's training step. On the GPU
these are host memory only; the torch worker also records torch.cuda.max_memory_allocated
(in --json).

    /usr/bin/python3 bench/compare_train_torch.py [--gridnn PATH] [--quick] [--threads 2,1] [--rounds R]
        [--extra | --cases default|extra|all | --case W:DxHxW:B ...] [--json FILE] [--device cuda]
        [--filter TEXT[,TEXT...]] [--torch-compile [--compile-timeout S]] [--list-cases]

Cases (ResAttNet3D-18, width / input / batch): by default w8 32^3 b8 (the README's default
job), w16 64^3 b8 and w32 64^3 b4; --device cuda adds w16 128^3 b4, w16 128^3 b2 and w32
128^3 b4. --extra
(or --cases all) adds non-cubic volumes with small batches: w16 96x112x96 b1 and w24 64x80x64
b2; --cases extra runs only those. Steps: 3 warm-up + 8 timed on the CPU (20 on the GPU); the
--extra cases 2 warm-up + 5 timed on the CPU; --warmup and --steps set them for every case.
--case W:DxHxW:B (repeatable) measures cases of your own instead, with the --extra cases' steps.
--rounds R runs each case and thread count R times, gridnn and torch alternately, and takes
each side's median of its runs' medians: on a shared host a slow spell then hits both.
--quick runs the first selected case only, with fewer steps (2 + 4; 1 + 3 for the --extra
cases) and, unless --threads is given, the first thread count only. --filter keeps the cases
whose name contains a string, or any of several separated by commas ("w16 64^3 b8,w16 128^3
b2"). --list-cases prints the selected cases' names and exits; it needs no torch.

--torch-compile also times the torch step with the model under torch.compile, once per case
and thread count after the rounds, in a worker of its own whose first step compiles (it is
never timed; the worker prints how long it took): the step-time table gains the columns
"torch.compile s/step Tt" and "compile/gridnn Tt". A torch without torch.compile, a compile
that fails, or a worker past --compile-timeout seconds (default --timeout) leaves "-" in
those columns and a line saying why under the table; the eager comparison stands and the
exit status is unchanged.

--threads: a comma list of thread counts (default "2,1" on the CPU, os.cpu_count() on the
GPU); each case is measured at each count. Both sides' idle OpenMP threads spin 10000 rounds,
then sleep (GOMP_SPINCOUNT=10000 in gridnn-train's environment, and the torch worker's before
torch loads libgomp, as scripts/run.sh does) unless the environment sets OMP_WAIT_POLICY or
GOMP_SPINCOUNT: sleeping at once costs two threads most of their speedup, spinning without a
bound loses badly on a shared machine. The policy used is printed in the header, with the load average at the start and
the end; per-run min-max and peaks go to stderr. --json FILE writes every number: the
per-step times of both sides, the medians, ratios, peaks, the settings and load averages.

--device cuda passes --device cuda (and --precision) to gridnn-train and moves the torch model
and data to the GPU; it exits with status 2 and a message when torch sees no GPU, and with
status 1 (showing gridnn-train's stderr) when gridnn-train fails, e.g. when it was built
without CUDA. --precision: fp32 turns TF32 off in torch (cuDNN and matmul), tf32 turns it
on, bf16 runs the torch step under torch.autocast(dtype=torch.bfloat16).
"""

import argparse
import ctypes
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# Both frameworks' OpenMP threads spin briefly, then sleep, unless the environment says
# otherwise (see the docstring). libgomp reads this when it loads, so before torch (the torch
# worker inherits it from this process's environment).
USER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
USER_SPIN_COUNT = os.environ.get("GOMP_SPINCOUNT")
if USER_WAIT_POLICY is None:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

try:  # --list-cases needs no torch
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:
    torch = F = None

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "parity"))
if torch is not None:
    from torch_modules import ResAttNet3D  # noqa: E402

DEPTH = 18
# (width, (D, H, W), batch)
CPU_CASES = [(8, (32, 32, 32), 8), (16, (64, 64, 64), 8), (32, (64, 64, 64), 4)]
GPU_EXTRA_CASES = [(16, (128, 128, 128), 4), (16, (128, 128, 128), 2), (32, (128, 128, 128), 4)]
# Non-cubic volumes with small batches (--extra); fewer steps on the CPU.
EXTRA_CASES = [(16, (96, 112, 96), 1), (24, (64, 80, 64), 2)]
SEARCH_DIRS = ["build/default/tools", "build/cpu/tools", "build/lead/tools"]

# Runs argv[2:] as a child and writes the child's ru_maxrss (KiB, from os.wait4) to argv[1];
# exits with the child's status. Started with python -S, so it stays a few MiB: the child
# forked from it starts from that, not from the resident set of the process that started it.
LAUNCHER = r"""
import os, sys
out, cmd = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def case_name(width, dhw, batch):
    d, h, w = dhw
    shape = f"{d}^3" if d == h == w else f"{d}x{h}x{w}"
    return f"resattnet3d-{DEPTH} w{width} {shape} b{batch}"


def find_gridnn(device):
    dirs = (["build-gpu/tools"] if device == "cuda" else []) + SEARCH_DIRS
    for d in dirs:
        path = os.path.join(ROOT, d, "gridnn-train")
        if os.access(path, os.X_OK):
            return path
    sys.exit("compare_train_torch: no gridnn-train found in " + ", ".join(dirs) +
             " (build the gridnn-train target, or pass --gridnn PATH)")


def run_measured(cmd, env, timeout, tmpdir, tag):
    """Runs cmd through LAUNCHER: (exit status or None on timeout, stdout, stderr, peak RSS KiB)."""
    paths = [os.path.join(tmpdir, f"{tag}.{x}") for x in ("maxrss", "out", "err")]
    with open(paths[1], "w") as out, open(paths[2], "w") as err:
        proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, paths[0]] + cmd,
                                stdout=out, stderr=err, env=env, start_new_session=True)
        def stop():  # the launcher and its child (a session of their own)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop()
            rc = None
        except BaseException:  # ^C
            stop()
            raise
    texts = []
    for p in paths:
        try:
            with open(p) as f:
                texts.append(f.read())
        except FileNotFoundError:
            texts.append("")
    return rc, texts[1], texts[2], int(texts[0]) if texts[0].strip() else None


def fail(what, cmd, rc, stdout, stderr, timeout):
    why = f"timed out after {timeout} s" if rc is None else f"failed (exit status {rc})"
    print(f"compare_train_torch: {what} {why}:\n  " + " ".join(cmd) + "\n--- stderr ---\n" +
          stderr.rstrip() + "\n--- stdout (last lines) ---\n" + "\n".join(stdout.splitlines()[-10:]),
          file=sys.stderr)
    sys.exit(1)


def time_gridnn(binary, width, dhw, batch, warmup, steps, threads, args, tmpdir):
    """Per-step wall seconds (after warm-up, no validation in between) and peak RSS (KiB)."""
    total = warmup + steps + 1  # step 1's time includes setup: it is never a difference
    tag = f"gridnn_w{width}_{'x'.join(map(str, dhw))}_b{batch}_t{threads}"
    metrics = os.path.join(tmpdir, tag + ".jsonl")
    cmd = [binary, "--model", "resattnet3d", "--depth", str(DEPTH), "--width", str(width),
           "--input", "x".join(map(str, dhw)), "--batch", str(batch), "--steps", str(total),
           "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01",
           "--val-samples", "8",
           "--eval-every", str(total + 1), "--no-progress", "--metrics", metrics,
           "--device", args.device]
    if args.gridnn_data == "fixed":  # one batch, loaded once: the work the torch side does
        cmd += ["--train-samples", str(batch), "--no-augment", "--cache-data"]
    else:
        cmd += ["--train-samples", str(batch * total)]
    if args.precision != "fp32":
        cmd += ["--precision", args.precision]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    rc, out, err, peak = run_measured(cmd, env, args.timeout, tmpdir, tag)
    if rc != 0:
        fail("gridnn-train", cmd, rc, out, err, args.timeout)
    times, prev, val_since = [], None, False
    with open(metrics) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event") == "validation":
                val_since = True
            elif ev.get("event") == "train":
                if prev is not None and ev["step"] > warmup + 1 and not val_since:
                    times.append(ev["seconds"] - prev)
                prev, val_since = ev["seconds"], False
    if not times:
        sys.exit(f"compare_train_torch: no timed steps in {metrics}")
    return {"median_s": statistics.median(times), "step_s": times, "peak_rss_kib": peak}


def time_torch(width, dhw, batch, warmup, steps, threads, args, tmpdir, compiled=False):
    """The same training step in PyTorch, in a child process (this script, --torch-worker).
    compiled: the model under torch.compile (--torch-compile); a failure or a timeout then
    returns {"error": why} instead of ending the comparison."""
    spec = {"width": width, "input": list(dhw), "batch": batch, "warmup": warmup, "steps": steps,
            "threads": threads, "device": args.device, "precision": args.precision, "compile": compiled}
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    tag = f"torch{'_compile' if compiled else ''}_w{width}_{'x'.join(map(str, dhw))}_b{batch}_t{threads}"
    timeout = (args.compile_timeout or args.timeout) if compiled else args.timeout
    rc, out, err, peak = run_measured(cmd, env, timeout, tmpdir, tag)
    if rc != 0 and compiled:
        lines = [l.strip() for l in err.splitlines() if l.strip()]
        why = f"timed out after {timeout:g} s" if rc is None else (
            f"exit status {rc}: {lines[-1][:200] if lines else 'no message'}")
        print(f"compare_train_torch: the torch.compile worker failed ({why}); the eager comparison stands",
              file=sys.stderr)
        return {"error": why}
    if rc != 0:
        fail("the torch worker", cmd, rc, out, err, args.timeout)
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_kib"] = peak
    return result


def resident_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def torch_worker(spec):
    """--torch-worker: times the step as spec says and prints one JSON line."""
    after_import = resident_kib("VmRSS")
    dev, width, batch = spec["device"], spec["width"], spec["batch"]
    torch.set_num_threads(spec["threads"])
    if dev == "cuda":
        tf32 = spec["precision"] == "tf32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.manual_seed(0)
    model = ResAttNet3D(DEPTH, width, 1, 2).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    compiled = spec.get("compile", False)
    if compiled and not hasattr(torch, "compile"):
        sys.exit(f"torch {torch.__version__} has no torch.compile")
    net = torch.compile(model) if compiled else model  # compiles at the first step (a warm-up step)
    x = torch.randn(batch, 1, *spec["input"], device=dev)
    y = torch.randint(0, 2, (batch,), device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if spec["precision"] == "bf16" \
        else None

    def step():
        if autocast:
            with autocast():
                loss = F.cross_entropy(net(x), y)
        else:
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    times, first = [], None
    for i in range(max(spec["warmup"], 1 if compiled else 0) + spec["steps"]):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i >= spec["warmup"] and (i > 0 or not compiled):
            times.append(time.perf_counter() - t0)
        first = first if first is not None else time.perf_counter() - t0
    flops = None if compiled else step_flops(model, x)
    print(json.dumps({
        "median_s": statistics.median(times), "step_s": times, "step_flops": flops, "first_step_s": first,
        "threads": torch.get_num_threads(), "rss_after_import_kib": after_import,
        "vmhwm_kib": resident_kib("VmHWM"),
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated() if dev == "cuda" else None}))


def step_flops(model, x):
    """The convolution and linear FLOPs of one training step, counted from the network.

    A forward pass with hooks counts 2 x (multiply-adds) of every Conv3d and Linear; the step
    is each layer's forward, its weight gradient and its input gradient, 3 x forward, except
    for the stem (its input is the data, which needs no gradient): 2 x. Attention's matrix
    products, batch norm, pooling and the element-wise work are not counted."""
    total = [0.0]

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv3d):
            taps = module.kernel_size[0] * module.kernel_size[1] * module.kernel_size[2]
            forward = 2.0 * output.numel() * (module.in_channels // module.groups) * taps
        else:
            forward = 2.0 * output.numel() * module.in_features
        total[0] += forward * (2 if inputs[0] is x else 3)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv3d, torch.nn.Linear))]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return total[0]


def best_rate(gemm, n, reps):
    """GFLOP/s of the fastest of reps calls of gemm(), an n x n x n product (after one warm-up)."""
    gemm()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        gemm()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best * 1e-9


def sgemm_gflops(n=2048, reps=5):
    """--sgemm-worker: this machine's fp32 GEMM rates at the thread count of the environment,
    n x n x n, the best of reps, in GFLOP/s: torch.mm (the BLAS torch links; Debian's is
    OpenBLAS, which picks its kernel by CPU model and runs its SSE3 one on models it does not
    know) and oneDNN's dnnl_sgemm (libdnnl.so.2, which picks by instruction set; None when
    it does not load). The machine's rate is the larger."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    rates = {"torch_mm": best_rate(lambda: torch.mm(a, b), n, reps), "onednn": None}
    try:
        dnnl = ctypes.CDLL("libdnnl.so.2")
    except OSError:
        return rates
    c = torch.empty(n, n)
    f = ctypes.c_float
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())
    dnnl.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, f,
                                ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, f,
                                ctypes.c_void_p, ctypes.c_int64]
    call = lambda: dnnl.dnnl_sgemm(b"N", b"N", n, n, n, 1.0, ptr(a), n, ptr(b), n, 0.0, ptr(c), n)
    if call() == 0:
        rates["onednn"] = best_rate(call, n, reps)
    return rates


def time_sgemm(args, tmpdir):
    """One-thread sgemm in a child process whose OpenMP and BLAS pools have one thread (a
    torch.set_num_threads(1) inside a process started with more leaves OpenBLAS's pool as it
    is)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--sgemm-worker"]
    rc, out, err, _ = run_measured(cmd, env, args.timeout, tmpdir, "sgemm")
    if rc != 0:
        fail("the sgemm worker", cmd, rc, out, err, args.timeout)
    return json.loads(out.strip().splitlines()[-1])


def combine_rounds(rounds):
    """One side's timings over --rounds runs: the median of the runs' medians (one run slowed
    by the host moves it less than pooling the steps would), every step, the largest peak."""
    out = dict(rounds[0])
    out["round_median_s"] = [r["median_s"] for r in rounds]
    out["median_s"] = statistics.median(out["round_median_s"])
    out["step_s"] = [t for r in rounds for t in r["step_s"]]
    out["peak_rss_kib"] = max(r["peak_rss_kib"] for r in rounds)
    return out


def fastest(rates):
    """The faster library's rate of one sgemm run (time_sgemm's dict)."""
    return max(r for r in rates.values() if r)


def sgemm_text(result):
    """'152.3 (30.1 / 152.3)': the machine's one-thread sgemm rate, torch.mm's and oneDNN's."""
    rates = result.get("sgemm_1t_by_library") or {}
    each = " / ".join(f"{rates[k]:.1f}" if rates.get(k) else "-" for k in ("torch_mm", "onednn"))
    return f"{result['sgemm_1t_gflops']:.1f} ({each})"


def parse_case(text):
    """W:DxHxW:B -> (W, (D, H, W), B)."""
    try:
        width, dhw, batch = text.split(":")
        dims = tuple(int(v) for v in dhw.split("x"))
        width, batch = int(width), int(batch)
        if len(dims) != 3 or min(dims) < 8 or width < 1 or batch < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"--case wants WIDTH:DxHxW:BATCH with every side >= 8, e.g. "
                                         f"12:72x88x64:3; got {text!r}")
    return width, dims, batch


def select_cases(args):
    """[((width, dhw, batch), extra)] that the options select; exits when none does."""
    base = CPU_CASES + (GPU_EXTRA_CASES if args.device == "cuda" else [])
    selection = "all" if args.extra and args.cases == "default" else args.cases
    cases = [(c, False) for c in base] if selection in ("default", "all") else []
    cases += [(c, True) for c in EXTRA_CASES] if selection in ("extra", "all") else []
    if args.case:
        cases = [(c, True) for c in args.case]
    if args.quick:
        cases = cases[:1]
    wanted = [f.strip() for f in args.filter.split(",") if f.strip()] or [""]
    cases = [c for c in cases if any(f in case_name(*c[0]) for f in wanted)]
    if not cases:
        sys.exit(f"compare_train_torch: no case matches --filter {args.filter!r}")
    return cases


def parse_threads(text):
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        sys.exit(f"compare_train_torch: --threads wants a comma list of positive counts, got {text!r}")
    return list(dict.fromkeys(counts))  # in the given order, without repeats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridnn", default=None,
                    help="gridnn-train binary (default: the first of build-gpu/tools (cuda "
                         "only), " + ", ".join(SEARCH_DIRS) + ")")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="GPU math (gridnn-train --precision; torch TF32 flags / bf16 autocast)")
    ap.add_argument("--quick", action="store_true",
                    help="first case only, fewer steps, the first thread count unless --threads is given")
    ap.add_argument("--cases", choices=["default", "extra", "all"], default="default",
                    help="default: the cubic cases; extra: the non-cubic small-batch cases; all: both")
    ap.add_argument("--extra", action="store_true", help="add the non-cubic small-batch cases (--cases all)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up steps for every case (default 3, --extra cases 2 on the CPU; "
                         "2 and 1 with --quick)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps for every case (default 8 on the CPU, --extra cases 5; 20 on "
                         "the GPU; 4 and 3 with --quick)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs per case and thread count, gridnn and torch alternately; each side's "
                         "step time is the median of its runs' medians (default 1)")
    ap.add_argument("--filter", default="",
                    help="only cases whose name contains this; several strings separated by commas: "
                         "the cases whose name contains any of them")
    ap.add_argument("--list-cases", action="store_true",
                    help="print the cases the other options select, one a line, and exit (needs no torch)")
    ap.add_argument("--torch-compile", action="store_true",
                    help="also time the torch step with the model under torch.compile (a column of its "
                         "own, after the warm-up that compiles it); where it fails or times out, the "
                         "column says so and the eager comparison stands")
    ap.add_argument("--compile-timeout", type=float, default=None,
                    help="seconds per torch.compile worker, the compilation included (default: --timeout)")
    ap.add_argument("--case", action="append", default=[], metavar="W:DxHxW:B", type=parse_case,
                    help="a case of your own (width, input, batch), e.g. 12:72x88x64:3; repeatable; "
                         "replaces the built-in cases")
    ap.add_argument("--threads", default=None,
                    help="comma list of CPU thread counts, each case measured at each: "
                         "torch.set_num_threads, and OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for "
                         "gridnn-train (default: 2,1 on the CPU, os.cpu_count() on the GPU)")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds per gridnn-train run and per torch worker")
    ap.add_argument("--json", default=None, metavar="FILE", help="write all raw numbers to FILE")
    ap.add_argument("--gridnn-data", choices=["generated", "fixed"], default="generated",
                    help="generated: a fresh synthetic batch per step, drawn on the loader's thread; "
                         "fixed: one batch kept in memory (--cache-data), as the torch side uses one")
    ap.add_argument("--torch-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sgemm-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.torch_worker is not None:
        torch_worker(json.loads(args.torch_worker))
        return
    if args.sgemm_worker:
        print(json.dumps(sgemm_gflops()))
        return

    if args.list_cases:
        for (width, dhw, batch), _ in select_cases(args):
            print(case_name(width, dhw, batch))
        return
    if torch is None:
        sys.exit("compare_train_torch: torch is not importable by " + sys.executable)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"compare_train_torch: --device cuda, but torch {torch.__version__} sees no GPU "
              f"(torch.version.cuda = {torch.version.cuda}); run it with a CUDA build of torch "
              "on a GPU machine", file=sys.stderr)
        sys.exit(2)
    if args.device == "cpu" and args.precision != "fp32":
        sys.exit("compare_train_torch: --precision applies to --device cuda only")
    if args.rounds < 1:
        sys.exit(f"compare_train_torch: --rounds {args.rounds}: give 1 or more runs per case")
    binary = args.gridnn or find_gridnn(args.device)
    if not os.access(binary, os.X_OK):
        sys.exit(f"compare_train_torch: {binary} is not an executable")

    if args.threads is not None:
        thread_counts = parse_threads(args.threads)
    else:
        thread_counts = [2, 1] if args.device == "cpu" else [os.cpu_count()]
        if args.quick:
            thread_counts = thread_counts[:1]

    cases = select_cases(args)

    def plan(extra):
        """(warm-up, timed steps) of a case."""
        if args.device == "cuda":
            warmup, steps = (2, 4) if args.quick else (3, 20)
        elif extra:
            warmup, steps = (1, 3) if args.quick else (2, 5)
        else:
            warmup, steps = (2, 4) if args.quick else (3, 8)
        return (args.warmup if args.warmup is not None else warmup), (args.steps or steps)

    policy_from = "from the environment" if USER_WAIT_POLICY or USER_SPIN_COUNT else "set by this script"
    policy = (f"OMP_WAIT_POLICY={USER_WAIT_POLICY}" if USER_WAIT_POLICY
              else f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}")
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())
    load_start = os.getloadavg()
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""
    shown = os.path.relpath(binary, ROOT)
    shown = binary if shown.startswith("..") else shown
    plans = {extra: plan(extra) for _, extra in cases}
    steps_text = ", ".join(
        f"{w} warm-up + {s} timed steps" + (" (non-cubic cases)" if extra and len(set(plans.values())) > 1 else "")
        for extra, (w, s) in sorted(plans.items()) if not extra or plans.get(False) != (w, s))
    print(f"# {shown} vs torch {torch.__version__}, device {args.device}{gpu}, {args.precision}, "
          f"threads {','.join(map(str, thread_counts))}, {policy} "
          f"for both ({policy_from}); SGD momentum 0.9; gridnn data {args.gridnn_data}; {steps_text}, medians"
          f"{f' of {args.rounds} alternating runs' if args.rounds > 1 else ''}; "
          f"load average at start {load()}", flush=True)

    results, start = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compare_train_torch.") as tmpdir:
        for (width, dhw, batch), extra in cases:
            name = case_name(width, dhw, batch)
            warmup, steps = plan(extra)
            runs, all_rates = [], []
            for t in thread_counts:
                g, p, rates = [], [], []
                for _ in range(args.rounds):  # alternately, so a slow spell of the host hits both
                    if args.device == "cpu":
                        rates.append(time_sgemm(args, tmpdir))
                    g.append(time_gridnn(binary, width, dhw, batch, warmup, steps, t, args, tmpdir))
                    p.append(time_torch(width, dhw, batch, warmup, steps, t, args, tmpdir))
                g, p = combine_rounds(g), combine_rounds(p)
                runs.append({"threads": t, "gridnn": g, "torch": p, "ratio": p["median_s"] / g["median_s"],
                             "sgemm_1t_gflops_by_round": [fastest(r) for r in rates]})
                all_rates += rates
                gt, tt = g["step_s"], p["step_s"]
                print(f"  {name}, {t} thread{'s' if t > 1 else ''}: gridnn {g['median_s']:.4f} s/step ({min(gt):.4f}-"
                      f"{max(gt):.4f}, {len(gt)} steps, peak {mib(g['peak_rss_kib'])} MiB), torch "
                      f"{p['median_s']:.4f} s/step ({min(tt):.4f}-{max(tt):.4f}, {len(tt)} steps, "
                      f"peak {mib(p['peak_rss_kib'])} MiB)", file=sys.stderr, flush=True)
                if args.torch_compile:  # one run after the rounds; never ends the comparison
                    c = time_torch(width, dhw, batch, warmup, steps, t, args, tmpdir, compiled=True)
                    runs[-1]["torch_compile"] = c
                    if "median_s" in c:
                        runs[-1]["compile_ratio"] = c["median_s"] / g["median_s"]
                        print(f"  {name}, {t} thread{'s' if t > 1 else ''}: torch.compile {c['median_s']:.4f} "
                              f"s/step, first step (compiling) {c['first_step_s']:.1f} s", file=sys.stderr, flush=True)
            # The case's sgemm: the median run (the lower middle one of an even count).
            median_run = sorted(all_rates, key=fastest)[(len(all_rates) - 1) // 2] if all_rates else None
            sgemm = fastest(median_run) if median_run else None
            sgemm_best = max(map(fastest, all_rates)) if all_rates else None
            results.append({"name": name, "width": width, "input": list(dhw), "batch": batch,
                            "warmup": warmup, "steps": steps, "runs": runs, "sgemm_1t_gflops": sgemm,
                            "sgemm_1t_best_gflops": sgemm_best, "sgemm_1t_by_library": median_run})

    def fmt(s):
        return f"{s:.4f}" if s < 1 else f"{s:.3f}"

    def table(title_cols, cells, first=()):
        """Markdown table: a case column and the per-case columns of first ((head, cell of a
        case) pairs), then the columns of title_cols per thread count."""
        heads = ["case"] + [h for h, _ in first] + [c.format(t=t) for t in thread_counts for c in title_cols]
        rows = [[r["name"]] + [cell(r) for _, cell in first] + [c for run in r["runs"] for c in cells(run, r)]
                for r in results]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
        print("| " + " | ".join(h.ljust(w) if i == 0 else h.rjust(w)
                                for i, (h, w) in enumerate(zip(heads, widths))) + " |")
        print("|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":"
                             for i, w in enumerate(widths)) + "|")
        for row in rows:
            print("| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                    for i, (c, w) in enumerate(zip(row, widths))) + " |")

    print("step time (Tt: T threads; torch/gridnn > 1: gridnn faster" +
          ("; torch.compile: the torch model compiled, its ratio compile/gridnn)" if args.torch_compile else ")"))
    if args.torch_compile:
        def compiled_cells(run):
            c = run.get("torch_compile", {})
            return [fmt(c["median_s"]), f"{run['compile_ratio']:.2f}"] if "median_s" in c else ["-", "-"]

        table(["gridnn s/step {t}t", "torch s/step {t}t", "torch/gridnn {t}t", "torch.compile s/step {t}t",
               "compile/gridnn {t}t"],
              lambda run, r: [fmt(run["gridnn"]["median_s"]), fmt(run["torch"]["median_s"]), f"{run['ratio']:.2f}"]
              + compiled_cells(run))
        for r in results:
            for run in r["runs"]:
                c = run.get("torch_compile", {})
                threads = f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}"
                if "error" in c:
                    print(f"torch.compile, {r['name']}, {threads}: {c['error']}")
                elif c:
                    print(f"torch.compile, {r['name']}, {threads}: first step (compiling) {c['first_step_s']:.1f} s")
    else:
        table(["gridnn s/step {t}t", "torch s/step {t}t", "torch/gridnn {t}t"],
              lambda run, r: [fmt(run["gridnn"]["median_s"]), fmt(run["torch"]["median_s"]), f"{run['ratio']:.2f}"])
    summary = {}
    for i, t in enumerate(thread_counts):
        ratios = [(r["runs"][i]["ratio"], r["name"]) for r in results]
        geo = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
        low = min(ratios)
        summary[t] = {"geomean_ratio": geo, "min_ratio": low[0], "min_ratio_case": low[1]}
        print(f"{t} thread{'s' if t > 1 else ''}: geometric mean of torch/gridnn over {len(ratios)} "
              f"case{'s' if len(ratios) > 1 else ''} {geo:.2f}, minimum {low[0]:.2f} ({low[1]})")

    if all(run["torch"].get("step_flops") for r in results for run in r["runs"]):
        print()
        print("throughput: the step's convolution and linear FLOPs (counted from the network, "
              "3 x forward; 2 x for the stem) per second of step; sgemm 1t: this machine's "
              "one-thread fp32 GEMM rate (2048^3 in a one-thread process, the faster of torch.mm and "
              "oneDNN's dnnl_sgemm; torch.mm / dnnl_sgemm in brackets), the median of the case's runs, "
              "one right before each gridnn run; gridnn/sgemm: the median over the rounds of each round's "
              "rate over the sgemm run just before it; best: gridnn's fastest step over the fastest sgemm run")
        for r in results:
            r["gflop_per_step"] = r["runs"][0]["torch"]["step_flops"] * 1e-9
            for run in r["runs"]:
                run["gridnn"]["gflops"] = r["gflop_per_step"] / run["gridnn"]["median_s"]
                run["torch"]["gflops"] = r["gflop_per_step"] / run["torch"]["median_s"]
                paired = zip(run["gridnn"]["round_median_s"], run["sgemm_1t_gflops_by_round"])
                shares = [r["gflop_per_step"] / step / rate for step, rate in paired]
                run["gridnn_sgemm_share"] = statistics.median(shares) if shares else None
                best = r.get("sgemm_1t_best_gflops")
                fastest_step = min(run["gridnn"]["step_s"])
                run["gridnn_sgemm_best_share"] = r["gflop_per_step"] / fastest_step / best if best else None
        sgemm = lambda r: r.get("sgemm_1t_gflops")
        percent = lambda x: f"{100 * x:.0f}%" if x else "-"
        table(["gridnn GFLOP/s {t}t", "torch GFLOP/s {t}t", "gridnn/sgemm {t}t", "gridnn/sgemm best {t}t"],
              lambda run, r: [f"{run['gridnn']['gflops']:.1f}", f"{run['torch']['gflops']:.1f}",
                              percent(run["gridnn_sgemm_share"]), percent(run["gridnn_sgemm_best_share"])],
              first=[("GFLOP/step", lambda r: f"{r['gflop_per_step']:.3g}"),
                     ("sgemm 1t GFLOP/s", lambda r: sgemm_text(r) if sgemm(r) else "-")])

    print()
    print("peak resident memory, MiB (the whole process; torch/gridnn > 1: gridnn smaller)")
    table(["gridnn MiB {t}t", "torch MiB {t}t", "torch/gridnn {t}t"],
          lambda run, r: [mib(run["gridnn"]["peak_rss_kib"]), mib(run["torch"]["peak_rss_kib"]),
                       ratio_text(run["torch"]["peak_rss_kib"], run["gridnn"]["peak_rss_kib"])])
    imported = [run["torch"]["rss_after_import_kib"] for r in results for run in r["runs"]
                if run["torch"].get("rss_after_import_kib")]
    if imported:
        span = sorted({mib(min(imported)), mib(max(imported))}, key=float)
        print(f"the torch peaks include the interpreter and torch's libraries: "
              f"{'-'.join(span)} MiB resident after import, before the model")
    total = time.perf_counter() - start
    print(f"total {total:.0f} s; load average at end {load()}")

    if args.json:
        record = {
            "gridnn_train": binary, "torch": torch.__version__, "device": args.device,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "precision": args.precision, "threads": thread_counts,
            "omp_wait_policy": policy, "omp_wait_policy_from": policy_from,
            "load_average_start": list(load_start), "load_average_end": list(os.getloadavg()),
            "total_s": total, "cases": results,
            "summary": [dict(threads=t, **s) for t, s in summary.items()],
        }
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")


def mib(kib):
    return "?" if kib is None else f"{kib / 1024:.0f}"


def ratio_text(a, b):
    return "?" if not a or not b else f"{a / b:.2f}"


if __name__ == "__main__":
    main()
