#!/usr/bin/env python3
"""The GPU check's helper (docs/design.md §9): what scripts/gpu_check.sh's stages left, read
and judged; Python's standard library only, so it runs on any machine with python3.

  gpu_check.py closure PREFIX [--dry-run]   carried libraries: every one they need is found
  gpu_check.py size ROOT                    what travels to the GPU machine, against its limit
  gpu_check.py select BUILD LOGS            the tests of both ctest selections, checked
  gpu_check.py probe PREFIX BUILD            two MPI ranks with the carried MPICH
  gpu_check.py libs BUILD PREFIX LOGS [--dry-run]
                                            where configure found each dependency, what
                                            gridnn-train loads; in the dry run, that no
                                            header or library of /usr's packages was used
  gpu_check.py memory TRAIN LOGS            one training step on cuda: the allocator's peak
                                            at most the predicted one; then the allocator's
                                            cap crossed on purpose (the dry run: on the
                                            device stand-in, GRIDNN_DEVICE_STANDIN=1)
  gpu_check.py summary LOGS [--dry-run] [--budget S] [--quick]
                                            the summary (at most 3 KB), its exit status

gpu_check.sh records each stage it ran as a line of LOGS/stages.tsv (name, kind, exit status,
seconds, limit, note); `summary` turns them into rows of stage | status | seconds | counts,
judged by kind:

  plain    exit status 0 is ok; the detail is the last line of LOGS/<name>.log
  configure, build   the same, with what configure found and the first build errors
  ctest    LOGS/<name>.xml (ctest --output-junit): passed, failed, skipped; a failure, or a
           gpu test executable whose every test skipped, fails the stage (on a GPU)
  ops      LOGS/<name>.log (test-ops -m backend): its "backend mode:" line; exit status 77
           with "no CUDA device" is skipped
  bench    LOGS/<name>.json (Google Benchmark): cases run and failed, one key number
  memcheck LOGS/<name>.log (compute-sanitizer --tool memcheck, its first line naming the
           sanitizer): errors reported (ERROR SUMMARY: N > 0, or an error's own lines) fail;
           a sanitizer that cannot run here (no program output, a tool error, the program
           seeing no GPU under it) is "skipped: sanitizer unavailable" with the reason; its
           limit reached with no error reported so far is "partial", which passes. The dry
           run ran the command alone on the device stand-in: "skipped" when it ran clean
  profile  LOGS/<name>.log (gridnn-train --profile): the step time, the largest kinds of
           work and the slowest layer (the tables stay in the log)
  compare  LOGS/<name>.log (bench/compare_train_torch.py): each row of its step-time table,
           torch.compile's column where it has one
  cases    LOGS/<name>.log (compare_train_torch.py --list-cases, the dry run): the cases
  skip     not run (the note says why)

Stages of the hard kinds (plain, configure, build, ctest, ops, memcheck, cases) decide the
exit status; benchmarks, the profile and the PyTorch comparison never do (the dry run: the
profile does).
"""
import json
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

SUMMARY_BYTES = 3072
# Shared libraries every Linux machine with a C++ compiler has: never carried. libgomp is
# the compiler's OpenMP runtime, which the build needs anyway.
BASE_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
             "libresolv.so.2", "libutil.so.1", "ld-linux-x86-64.so.2", "libgcc_s.so.1",
             "libstdc++.so.6", "libgomp.so.1"}
ARCH = "usr/lib/x86_64-linux-gnu"
CANNOT_TEST = ("not testable on one GPU: NCCL's NVLink, P2P and shared-memory paths (two ranks on one "
               "GPU run NCCL as two loopback hosts over sockets, GRIDNN_TEST_NCCL_LOOPBACK), and the CTA "
               "limit's residency argument across GPUs (design §4)")


# ---- ELF: the libraries a binary needs ------------------------------------------------

def needed(path):
    """DT_NEEDED entries of a 64-bit little-endian ELF file ([] for anything else)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    entries, strtab = [], None
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 1:
            entries.append(val)
        elif tag == 5:
            strtab = val
    base = next((o + strtab - v for v, o, s in loads if v <= strtab < v + s), None)
    if base is None:
        return []
    return [data[base + e:data.index(b"\0", base + e)].decode() for e in entries]


def system_sonames():
    """The sonames this machine's loader finds without help."""
    names = set()
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        names.update(line.split()[0] for line in out.splitlines()[1:] if line.strip())
    except OSError:
        pass
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if os.path.isdir(d):
            names.update(os.listdir(d))
    return names


def closure(prefix, dry_run):
    """Follows what the carried programs and libraries need, from the roots gridnn uses: each
    is carried and linked in PREFIX/rtlib (the dry run: all carried ones, as on a bare
    machine), a base library, or (on the GPU machine) the machine's own. Prints one line;
    exit status 1 when something is missing."""
    lib = os.path.join(prefix, ARCH)
    rtlib = os.path.join(prefix, "rtlib")
    folders = [lib, os.path.join(prefix, "lib/x86_64-linux-gnu"), os.path.join(lib, "openblas-openmp")]
    roots = [os.path.join(prefix, "usr/bin", b) for b in ("mpiexec.hydra", "hydra_pmi_proxy")] + [
        os.path.join(lib, f) for f in ("libmpich.so.12", "openblas-openmp/libopenblas.so.0",
                                       "libbenchmark.so.1debian", "libnifti2.so.2", "libznz.so.3")]
    system = set() if dry_run else system_sonames()
    carried, own, missing, seen = [], [], [], set()
    queue = list(roots)
    for r in roots:
        if not os.path.exists(r):
            missing.append(os.path.relpath(r, prefix))
    queue = [r for r in roots if os.path.exists(r)]
    while queue:
        f = queue.pop(0)
        for so in needed(f):
            if so in BASE_LIBS or so in seen:
                continue
            seen.add(so)
            path = next((os.path.join(d, so) for d in folders if os.path.exists(os.path.join(d, so))), None)
            if path and (dry_run or os.path.exists(os.path.join(rtlib, so))):
                carried.append(so)
                queue.append(path)
            elif not dry_run and so in system:
                own.append(so)
            else:
                missing.append(f"{so} (needed by {os.path.basename(f)})")
    print(f"carried and needed: {' '.join(carried)}", file=sys.stderr)
    print(f"the machine's own: {' '.join(own) or 'none'}", file=sys.stderr)
    if missing:
        print(f"missing libraries: {', '.join(missing)}")
        return 1
    mine = f", {len(own)} the machine's own" if own else ""
    print(f"the libraries they need: {len(carried)} carried{mine}, none missing")
    return 0


# ---- what travels to the GPU machine ----------------------------------------------------

COPY_LIMIT_MIB = 64


def size(root):
    """The working tree that travels (tracked files and untracked ones git does not ignore)
    plus .gpu-deps, against the copy limit of the GPU machines gridnn's checks run on."""
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True)
    if out.returncode:
        print("not a git checkout: the size of what travels is unknown")
        return 0
    tree = sum(os.path.getsize(os.path.join(root, f)) for f in out.stdout.decode().split("\0")
               if f and os.path.isfile(os.path.join(root, f)))
    deps_dir = os.path.join(root, ".gpu-deps")
    deps = sum(os.path.getsize(os.path.join(deps_dir, f)) for f in os.listdir(deps_dir)) if os.path.isdir(deps_dir) else 0
    total = (tree + deps) / 2**20
    line = (f"tree {tree / 2**20:.1f} MiB + .gpu-deps {deps / 2**20:.1f} MiB = {total:.1f} MiB "
            f"of the {COPY_LIMIT_MIB} MiB a copy to the GPU machine may hold")
    print(line if total <= COPY_LIMIT_MIB else "too large: " + line)
    return 0 if total <= COPY_LIMIT_MIB else 1


# ---- ctest selections -----------------------------------------------------------------

def ctest_tests(build, *args):
    out = subprocess.run(["ctest", "--test-dir", build, "-N", "--show-only=json-v1", *args],
                         capture_output=True, text=True)
    try:
        return json.loads(out.stdout).get("tests", [])
    except ValueError:
        sys.exit(f"ctest -N failed: {out.stderr.strip()[:200]}")


def labels_of(test):
    return {v for p in test.get("properties", []) if p["name"] == "LABELS" for v in p["value"]}


GPU_SELECTION = ["-L", "^gpu$", "-LE", "^mpi$", "-E", "^ops_backend$"]  # the op backend runs as its own stage
MPI_SELECTION = ["-L", "^gpu$", "-L", "^mpi$"]


def gpu_test_targets(logs):
    """The gpu test executables configure announced (the line of the top CMakeLists.txt)."""
    try:
        text = open(os.path.join(logs, "configure.log"), errors="replace").read()
    except OSError:
        return []
    m = re.findall(r"-- gpu-check-targets: \d+ gpu test executables: (.*)", text)
    return m[-1].split() if m else []


def select(build, logs):
    """Checks both selections: each test has the labels asked for, and no gpu test
    executable is missing from the build (its tests would be a label-less <target>_NOT_BUILT
    entry that no label selects). Writes LOGS/tests.json (test -> executable) for `summary`."""
    problems, owner = [], {}
    every = ctest_tests(build)
    counts = {}
    for want, args in (("gpu tests", GPU_SELECTION), ("mpi gpu tests", MPI_SELECTION)):
        chosen = ctest_tests(build, *args)
        counts[want] = len(chosen)
        for t in chosen:
            l = labels_of(t)
            if "gpu" not in l or ("mpi" in l) != (want == "mpi gpu tests"):
                problems.append(f"{t['name']} has labels {sorted(l)}")
    for t in every:
        cmd = t.get("command") or []
        exe = next((os.path.basename(c) for c in cmd if "/test" in c and os.path.basename(c).startswith("test")), "")
        owner[t["name"]] = exe
    names = {t["name"] for t in every}
    unbuilt = [x for x in gpu_test_targets(logs) if x + "_NOT_BUILT" in names]
    if unbuilt:
        problems.append("not built: " + " ".join(unbuilt))
    with open(os.path.join(logs, "tests.json"), "w") as f:
        json.dump(owner, f)
    line = (f"-L gpu -LE mpi: {counts['gpu tests']} tests, -L gpu -L mpi: {counts['mpi gpu tests']}; "
            f"{len(gpu_test_targets(logs))} gpu test executables")
    if problems:
        print(f"{line}; {'; '.join(problems)[:300]}")
        return 1
    print(f"{line}, all built; no other label selected")
    return 0


# ---- two MPI ranks with the carried MPICH ----------------------------------------------

def probe(prefix, build):
    """Compiles scripts/mpi_probe.cpp against the carried mpi.h and libmpich and runs it on two
    ranks under the carried mpiexec: both must sum right, be started by the carried
    hydra_pmi_proxy and load the carried libmpich."""
    usr, lib = os.path.join(prefix, "usr"), os.path.join(prefix, ARCH)
    exe = os.path.join(build, "mpi_probe")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_probe.cpp")
    cc = subprocess.run([os.environ.get("CXX") or "c++", "-O1", "-DMPICH_SKIP_MPICXX",
                         "-I" + os.path.join(usr, "include/x86_64-linux-gnu/mpich"), src, "-o", exe,
                         os.path.join(lib, "libmpich.so.12"), "-Wl,-rpath," + lib, "-ldl"],
                        capture_output=True, text=True)
    if cc.returncode:
        print(cc.stderr[-2000:], file=sys.stderr)
        print("the probe did not compile against the carried mpi.h")
        return 1
    run = subprocess.run([os.path.join(usr, "bin/mpiexec.hydra"), "-n", "2", exe], capture_output=True, text=True)
    print(run.stdout + run.stderr, file=sys.stderr)
    want = re.compile(rf"^rank [01] of 2: sum 2, proxy {re.escape(os.path.join(usr, 'bin/hydra_pmi_proxy'))}, "
                      rf"libmpich {re.escape(prefix)}/", re.M)
    ranks = len(want.findall(run.stdout))
    if run.returncode or ranks != 2:
        print(f"mpiexec -n 2: status {run.returncode}, {ranks} of 2 ranks as expected")
        return 1
    print("mpiexec -n 2: 2 ranks, allreduce right, started by the carried hydra_pmi_proxy, carried libmpich")
    return 0


# ---- what was built --------------------------------------------------------------------

USR_PACKAGES = (r"nlohmann|CLI|gtest|gmock|benchmark|nifti|zlib\.h|zconf\.h|cblas\.h|openblas|mpi\.h|mpich|"
                r"x86_64-linux-gnu/(mpich|openblas)|oneapi|dnnl")
USR_LIBS = (r"(^| )((/usr)?/lib/x86_64-linux-gnu/(openblas[^/]*/)?lib(openblas|blas|gtest|gmock|benchmark|nifti|znz|"
            r"z|mpich|mpi|dnnl|hwloc|ucp)[^ ]*|-l(openblas|gtest|benchmark|nifti2|znz|z|mpich|dnnl))( |$)")


def libs(build, prefix, logs, dry_run):
    """gridnn-train loads the carried OpenMP build of OpenBLAS and finds every library; in the
    dry run with ninja, no header or library of /usr's packages was compiled or linked in
    (ninja's dependency log and link commands; the compiler's own libgomp is expected)."""
    problems = []
    # Each dependency as CMakeCache.txt has it, and where it must be.
    cache = {}
    for line in read(os.path.join(build, "CMakeCache.txt")).splitlines():
        m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line)
        if m:
            cache.setdefault(m.group(1), m.group(2))
    cache.setdefault("ZLIB_LIBRARY_RELEASE", cache.get("ZLIB_LIBRARY", ""))
    for var in ("CBLAS_INCLUDE_DIR", "BLAS_LIBRARIES", "nlohmann_json_DIR", "CLI11_DIR", "GTest_DIR",
                "benchmark_DIR", "Nifti2_INCLUDE_DIR", "Nifti2_LIBRARY", "Nifti2_ZNZ_LIBRARY", "ZLIB_INCLUDE_DIR",
                "ZLIB_LIBRARY_RELEASE", "MPI_mpich_LIBRARY", "MPI_CXX_HEADER_DIR", "MPIEXEC_EXECUTABLE"):
        if not cache.get(var, "").startswith(prefix + "/"):
            problems.append(f"{var}={cache.get(var) or 'unset'} (not carried)")
    for var in ("DNNL_INCLUDE_DIR", "DNNL_LIBRARY", "MPI_CXX_COMPILER"):
        if cache.get(var) and "NOTFOUND" not in cache[var]:
            problems.append(f"{var}={cache[var]}")
    ldd = subprocess.run(["ldd", os.path.join(build, "tools/gridnn-train")], capture_output=True, text=True)
    open(os.path.join(logs, "ldd.log"), "w").write(ldd.stdout + ldd.stderr)
    blas = next((l.split()[2] for l in ldd.stdout.splitlines() if "libopenblas" in l and "=>" in l), "none")
    if not blas.startswith(os.path.join(prefix, ARCH, "openblas-openmp")):
        problems.append(f"gridnn-train's libopenblas: {blas}")
    notfound = [l.split()[0] for l in ldd.stdout.splitlines() if "not found" in l]
    if notfound:
        problems.append("not found: " + " ".join(notfound))
    detail = "OpenBLAS's OpenMP build (carried), nothing missing"
    if dry_run and os.path.exists(os.path.join(build, "build.ninja")):
        deps = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True).stdout
        used = sorted({l.strip() for l in deps.splitlines()
                       if re.match(rf"\s+/usr/(local/)?include/({USR_PACKAGES})", l)})
        if used:
            problems.append("headers from /usr: " + " ".join(used[:5]))
        cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", "gpu-check-targets"],
                              capture_output=True, text=True).stdout.replace(prefix, "DEPS")
        linked = sorted({m.group(2) for m in re.finditer(USR_LIBS, cmds, re.M)})
        if linked:
            problems.append("libraries from /usr: " + " ".join(linked[:5]))
        detail = (f"OpenBLAS's OpenMP build, all found; no header or library of /usr's packages in "
                  f"{len(deps.splitlines())} dependency lines or the link commands")
    print("; ".join(problems) if problems else detail)
    return 1 if problems else 0


# ---- memory: the prediction against the allocator, and the allocator's cap --------------

def mib(n):
    return f"{n / 2**20:.2f} MiB"


def memory(train, logs):
    """One training step on cuda with --memory-report and --metrics: the allocator's measured
    peak (the CUDA caching allocator's, the stand-in's in the dry run) at most the predicted
    one, both exact from the metrics file's "memory" event. Then the same step with the
    pre-flight check off (GRIDNN_MEMORY_PREFLIGHT=off) and --memory-limit at 3/4 of the
    measured peak (the parameters and batches are about half of it, so the cap is crossed
    inside a layer): the run must fail, naming the layer whose forward or backward crossed
    the cap. Each run's output goes to stderr (the stage's log); one line last. Exit status
    1 when either check fails. The dry run: the same on the device stand-in."""
    job = ["--width", "8", "--input", "64x64x64", "--batch", "2"]
    batch = job[-1]
    metrics = os.path.join(logs, "memory.jsonl")
    common = [train, "--device", "cuda", *job, "--steps", "1", "--train-samples", batch, "--val-samples", batch,
              "--eval-every", "2", "--no-progress"]

    def run(cmd, env=None):
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            return None, ""
        print(r.stdout + r.stderr, file=sys.stderr, flush=True)
        return r.returncode, r.stdout + r.stderr

    if os.path.exists(metrics):
        os.remove(metrics)
    rc, text = run(common + ["--memory-report", "--metrics", metrics])
    ends = [json.loads(l) for l in read(metrics).splitlines() if '"event":"memory"' in l and '"when":"end"' in l]
    m = re.search(r"^rank 0: predicted peak .*, measured .*", text, re.M)
    if rc != 0 or not ends or not m:
        print(f"--memory-report run: exit status {rc}, {len(ends)} memory events at the end, "
              f"{'a' if m else 'no'} report (memory.log)")
        return 1
    e = ends[0]
    predicted, measured = e["predicted_peak_bytes"], e["measured_peak_bytes"]
    error = 100.0 * (predicted - measured) / max(measured, 1)
    line = (f"predicted {mib(predicted)} >= measured {mib(measured)} ({error:+.1f}%)" if measured <= predicted
            else f"predicted {mib(predicted)} < measured {mib(measured)} ({error:+.1f}%): UNDER-PREDICTED")
    limit = measured * 3 // 4
    env = dict(os.environ, GRIDNN_MEMORY_PREFLIGHT="off")
    rc2, text2 = run(common + ["--memory-limit", str(limit)], env)
    named = re.search(r"memory limit: the (forward|backward) of (?:block )?(\S+) asked", text2)
    if rc2 not in (0, None) and named:
        cap = f"cap {mib(limit)} crossed in the {named.group(1)} of {named.group(2)} (exit {rc2})"
    else:
        other = re.search(r"gridnn: error: (.{0,90})", text2)
        cap = (f"cap {mib(limit)}: exit {rc2}, " +
               (f"no layer named: {other.group(1)}" if other else "no memory-limit error"))
    print(f"{line}; {cap}")
    return 0 if measured <= predicted and rc2 not in (0, None) and named else 1


# ---- the summary -----------------------------------------------------------------------

def read(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


def junit(path, owners):
    """(passed, failed, skipped, failure lines, {executable: [passed, skipped]}) of a ctest JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    p = f = s = 0
    fails, per_exe = [], {}
    for tc in root.iter("testcase"):
        status = tc.get("status", "")
        name = tc.get("name", "?")
        exe = per_exe.setdefault(owners.get(name, "?"), [0, 0])
        if status == "run":
            p += 1
            exe[0] += 1
        elif status in ("notrun", "disabled"):
            s += 1
            exe[1] += 1
        else:
            f += 1
            text = (tc.findtext("system-out") or "").splitlines()
            first = next((i for i, l in enumerate(text)
                          if re.search(r"Failure|[Ee]rror|threw|terminate|Abort|signal|Timeout", l)), None)
            lines = text[first:first + 3] if first is not None else text[-3:]
            fails.append(f"{name}: " + " / ".join(l.strip() for l in lines if l.strip())[:220])
    return p, f, s, fails, per_exe


def bench_numbers(path):
    """(ok, errors, key number text, error lines) of a Google Benchmark JSON file."""
    try:
        runs = [b for b in json.load(open(path))["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    except (OSError, ValueError, KeyError):
        return None
    errs = [b for b in runs if b.get("error_occurred")]
    ok = [b for b in runs if not b.get("error_occurred")]
    key = ""
    if ok and "gemm" in os.path.basename(path):  # the largest product
        b = max(ok, key=lambda b: int(b["name"].split("/")[3]))
        key = f", n={b['name'].split('/')[3]} {b.get('GFLOP', 0) / 1000:.1f} TFLOP/s"
    for b in ok:
        if b["name"].startswith("conv3d_fwd/stem/128/"):  # the stem convolution at 128^3, batch 8
            t, unit = b["real_time"], b.get("time_unit", "")
            if unit == "us" and t >= 1000:
                t, unit = t / 1000, "ms"
            key = f", stem fwd 128^3 {t:.3g} {unit}"
    return len(ok), len(errs), key, [f"{b['name']}: {b.get('error_message', '')[:150]}" for b in errs[:3]]


# memcheck's report of an error (its first line), and the sanitizer's own failures.
MEMCHECK_ERROR = re.compile(r"^=+ (Invalid |Misaligned|Out-of-range|Program hit|Malloc|Free|Hardware|Cuda |"
                            r"Device heap|Barrier|Uninitialized|Leaked)", re.M)
SANITIZER_FAILURE = re.compile(r"^=+ (Internal Sanitizer Error.*|Error: .*|.*(?:not supported|unsupported).*)$", re.M)


def memcheck_judge(log, rc, st, limit, dry_run):
    """(status, detail, failure lines) of a memcheck stage's log (memcheck's lines begin with
    '=========' ; the program's own: test-ops's case lines and 'backend mode:' line, or
    gridnn-train's)."""
    lines = log.splitlines()
    sanitizer = lines[0].split("sanitizer: ", 1)[-1] if lines and lines[0].startswith("sanitizer: ") else "?"
    cases = re.findall(r"^  \S+ +(OK|FAIL)", log, re.M)
    passed, failed = cases.count("OK"), cases.count("FAIL")
    started = bool(cases) or "training ResAttNet3D" in log or "training MLP" in log
    trained = '"event":"done"' in log
    what = (f"{passed} cases OK" + (f", {failed} FAIL" if failed else "")) if cases else (
        "1 training step" if trained else ("the training step started" if started else "the program did not start"))
    if dry_run:
        good = (rc == 0 or st == "TIMEOUT") and failed == 0 and (passed > 0 or trained)
        cut = f", stopped at its {limit} s limit" if st == "TIMEOUT" else ""
        return ("skipped" if good else "FAILED"), f"dry run, stand-in, no sanitizer ({sanitizer}): {what}{cut}", []
    summary = re.findall(r"ERROR SUMMARY: (\d+) error", log)
    errors = MEMCHECK_ERROR.findall(log)
    if (summary and int(summary[-1]) > 0) or errors:
        found = []
        for i, l in enumerate(lines):
            if MEMCHECK_ERROR.match(l) and len(found) < 3:
                found.append(" / ".join(x.strip("= ").strip() for x in lines[i:i + 2]))
        n = int(summary[-1]) if summary else len(errors)
        return "FAILED", f"memcheck: {n} errors; {what}", found
    no_device = re.search(r"no CUDA device|no usable CUDA device", log)
    if summary:
        if rc == 0 and (passed or trained) and not failed:
            return "ok", f"memcheck: 0 errors; {what}", []
        if no_device or not started:
            why = "the program saw no GPU under it" if no_device else "ERROR SUMMARY without the program's output"
            return "skipped", f"sanitizer unavailable: {why} (exit {rc})", []
        return "FAILED", f"memcheck: 0 errors, but the program failed under it (exit {rc}); {what}", []
    if st == "TIMEOUT":
        return "partial", f"memcheck: no error reported before its {limit} s limit; {what}", []
    if st == "NOT RUN":
        return st, "no time left for it", []
    if started and not no_device:
        return "FAILED", f"exit {rc} under the sanitizer, no ERROR SUMMARY (crashed?); {what}", []
    tool = SANITIZER_FAILURE.findall(log)
    last = next((l.strip() for l in reversed(lines[1:]) if l.strip() and not l.startswith("+ ")), "no output")
    why = tool[0] if tool else ("the program saw no GPU under it" if no_device else last)
    return "skipped", f"sanitizer unavailable: {why[:140]} (exit {rc})", []


def profile_line(log):
    """'step 12.3 ms: convolution 45.1%, ...; slowest layer L 1.20 ms' from gridnn-train --profile."""
    kinds = re.findall(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+)% \|$", log, re.M)
    step = next((float(ms) for k, ms, _ in kinds if k == "step"), None)
    if step is None:
        return None
    top = sorted(((float(share), k) for k, _, share in kinds if k != "step"), reverse=True)[:3]
    layers = re.findall(r"^\| (\S+) \| ([\d.]+) \| ([\d.]+) \| [\d.]+ \|", log, re.M)
    slow = max(layers, key=lambda l: float(l[1]) + float(l[2]), default=None)
    text = f"step {step:.3g} ms: " + ", ".join(f"{k} {sh:.0f}%" for sh, k in top)
    if slow:
        text += f"; slowest layer {slow[0]} {float(slow[1]) + float(slow[2]):.3g} ms fwd+bwd"
    return text + f"; {len(layers)} layers in profile.log"


def compare_rows(log):
    """Each row of compare_train_torch.py's step-time table, as its header's names -> cells."""
    lines = log.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("| case ")), None)
    if start is None:
        return []
    heads = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("| "):
            break
        rows.append(dict(zip(heads, (c.strip() for c in l.strip("|").split("|")))))
    return rows


def status_word(rc):
    return {0: "ok", 124: "TIMEOUT", 137: "TIMEOUT", 125: "NOT RUN"}.get(rc, "FAILED")


def note_of(names):
    return "selects " + ", ".join(n.replace("resattnet3d-18 ", "") for n in names)


def judge(logs, name, kind, rc, note, dry_run, owners, limit=0):
    """(status, detail, failure lines) of one stage."""
    base = os.path.join(logs, name.replace(" ", "_"))
    st = status_word(rc)
    if kind == "skip":
        return "skipped", note, []
    if kind == "plain":
        return st, note, []
    if kind == "configure":
        log = read(base + ".log")
        if st != "ok":
            return st, f"cmake status {rc} (configure.log)", re.findall(r"^.*(?:CMake Error|Could NOT|not found).*$", log, re.M)[:4]
        found = []
        for what, lib in (("cuDNN", "CUDNN"), ("NCCL", "NCCL"), ("MPI", "MPI_CXX")):
            m = re.search(rf'-- Found {lib}: (\S+).*?\(found (?:suitable )?version "([^"]*)"', log)
            if m:
                where = "pip" if "site-packages" in m.group(1) or "pip_layout" in m.group(1) else (
                    "carried" if "/deps/" in m.group(1) else os.path.dirname(m.group(1)))
                found.append(f"{what} {m.group(2)} ({where})")
        line = re.findall(r"^-- gridnn: (.*)$", log, re.M)
        build_type = line[-1].split("build type=")[-1] if line else "?"
        return "ok", f"{build_type}; {', '.join(found)}; the rest from the carried prefix", []
    if kind == "build":
        errs = re.findall(r"^.*(?:(?:error|Error)[: ]|undefined reference|^FAILED: ).*$", read(base + ".log"), re.M)
        return st, (note if st == "ok" else f"status {rc}; continuing with what built (build.log)"), [e[:300] for e in errs[:6]]
    if kind == "ops":
        log = read(base + ".log")
        line = re.findall(r"^backend mode: (.*)$", log, re.M)
        if "no CUDA device" in log and rc == 77:  # test-ops's "skipped" (CTest's SKIP_RETURN_CODE)
            return "skipped", "no CUDA device: every case skipped (test-ops -m backend)", []
        fails = [re.sub(r"\s+", " ", l.strip()) for l in re.findall(r"^  .* FAIL.*$", log, re.M)][:8]
        if rc == 0 and line:
            return "ok", line[-1] + " (test-ops -m backend)", []
        last = re.findall(r"^  (\S+) +(?:OK|FAIL)", log, re.M)
        why = line[-1] if line else {"TIMEOUT": "TIMEOUT", "NOT RUN": "NOT RUN"}.get(
            st, f"exit status {rc} (crashed? last case finished: {last[-1] if last else 'none'})")
        return ("FAILED" if st == "ok" else st), why + " (test-ops -m backend)", fails
    if kind == "ctest":
        r = junit(base + ".xml", owners)
        if r is None:
            return ("FAILED" if st == "ok" else st), f"no JUnit results ({note})", []
        p, f, s, fails, per_exe = r
        detail = f"{p + f + s} ran: {p} passed, {f} failed, {s} skipped"
        if rc in (124, 137):
            detail += "; stopped at its limit"
        all_skipped = sorted(e for e, (ep, es) in per_exe.items() if ep == 0 and es > 0)
        if dry_run:
            # No GPU: every test must skip (none may pass or fail without a device).
            good = f == 0 and p == 0 and s > 0
            return ("skipped" if good else "FAILED"), detail + ("; none ran without a GPU, as expected" if good
                                                                 else "; expected every test to skip"), fails
        if all_skipped:
            fails.append("every test skipped in: " + " ".join(all_skipped))
        ok = rc == 0 and f == 0 and p > 0 and not all_skipped
        return ("ok" if ok else ("FAILED" if st == "ok" else st)), detail, fails
    if kind == "bench":
        r = bench_numbers(base + ".json")
        if r is None:
            log = read(base + ".log")
            if "Failed to match any benchmarks" in log:
                return "FAILED", "no case matches (no GPU cases registered: no device?)", []
            return ("FAILED" if st == "ok" else st), "no results (crashed or stopped?)", []
        n_ok, n_err, key, errs = r
        ok = rc == 0 and n_err == 0 and n_ok > 0
        return ("ok" if ok else ("FAILED" if st == "ok" else st)), f"{n_ok} ok, {n_err} errors{key}", errs
    if kind == "compare":
        log = read(base + ".log")
        rows = compare_rows(log)
        if rc == 0 and rows:
            parts = []
            for r in rows:
                col = lambda prefix: next((v for k, v in r.items() if k.startswith(prefix)), "-")
                text = (f"{col('case').replace('resattnet3d-18 ', '')}: {col('gridnn s/step')} s/step, "
                        f"torch {col('torch s/step')} ({col('torch/gridnn')}x)")
                if any(k.startswith("torch.compile") for k in r):
                    compiled = col("torch.compile s/step")
                    text += (f", torch.compile {compiled} ({col('compile/gridnn')}x)" if compiled != "-"
                             else ", torch.compile failed")
                parts.append(text)
            fails = re.findall(r"^torch\.compile, .*: (?!first step).*$", log, re.M)[:2]
            return "ok", "; ".join(parts), fails
        errs = re.findall(r"^.*(?:compare_train_torch:|Error|error).*$", log, re.M)[:2]
        return ("FAILED" if st == "ok" else st), f"status {rc} ({os.path.basename(base)}.log)", errs
    if kind == "memcheck":
        return memcheck_judge(read(base + ".log"), rc, st, limit, dry_run)
    if kind == "profile":
        line = profile_line(read(base + ".log"))
        if rc == 0 and line:
            return "ok", line, []
        errs = re.findall(r"^gridnn: error: .*$", read(base + ".log"), re.M)[:2]
        return ("FAILED" if st == "ok" else st), f"status {rc}, {'a' if line else 'no'} profile table", errs
    if kind == "cases":
        names = [l.strip() for l in read(base + ".log").splitlines() if l.startswith("resattnet3d")]
        if rc == 0 and names:
            return "ok", f"dry run: {note_of(names)}; torch not run without a GPU", []
        return ("FAILED" if st == "ok" else st), f"status {rc}, no case selected", []
    return st, note, []


HARD_KINDS = {"plain", "configure", "build", "ctest", "ops", "memcheck", "cases"}
PASSING = ("ok", "skipped", "partial")


def cudnn_line(logs):
    """What cuDNN picked, from the 'gridnn: cuDNN ...' lines of every log (GRIDNN_LOG_CUDNN=1)."""
    chosen, fallbacks, widened = {}, set(), set()
    for f in sorted(os.listdir(logs)):
        for line in read(os.path.join(logs, f)).splitlines():
            m = re.search(r"gridnn: (cuDNN .*?): (\w+) \((.*?) math.*candidate (\d+) of", line)
            if "gridnn: cuDNN" in line and "at its first run; trying" in line:
                fallbacks.add(line.split("gridnn: ", 1)[1])
            elif m:
                chosen[m.group(1)] = (m.group(2), m.group(3), int(m.group(4)))
            elif "gridnn: cuDNN" in line and "no deterministic bf16 algorithm" in line:
                widened.add(line)
    if not chosen and not fallbacks:
        return None
    with open(os.path.join(logs, "cudnn_choices.txt"), "w") as out:
        for what, (algo, math, i) in sorted(chosen.items()):
            out.write(f"{what}: {algo}, {math} math, candidate {i}\n")
        for line in sorted(fallbacks):
            out.write(f"fallback: {line}\n")
    algos = {}
    for algo, math, _ in chosen.values():
        key = f"{algo}/{math}"
        algos[key] = algos.get(key, 0) + 1
    top = ", ".join(f"{k} {v}" for k, v in sorted(algos.items(), key=lambda kv: -kv[1])[:4])
    return (f"cuDNN: {len(chosen)} plan directions ({top}); {len(fallbacks)} candidates failed their first "
            f"run and gave way; {len(widened)} bf16 directions run in fp32 (cudnn_choices.txt)")


def summary(logs, dry_run, budget, quick, elapsed):
    owners = {}
    if os.path.exists(os.path.join(logs, "tests.json")):
        owners = json.load(open(os.path.join(logs, "tests.json")))
    head = [l for l in read(os.path.join(logs, "head.txt")).splitlines() if l.strip()]
    rows, fails, hard = [], [], []
    for line in read(os.path.join(logs, "stages.tsv")).splitlines():
        name, kind, rc, secs, limit, note = (line.split("\t") + [""] * 6)[:6]
        st, detail, f = judge(logs, name, kind, int(rc or 0), note, dry_run, owners, int(limit or 0))
        rows.append((name, st, secs, detail))
        fails += [f"{name}: {x[:200]}" for x in f]
        if (kind in HARD_KINDS or (dry_run and kind == "profile")) and st not in PASSING:
            hard.append(name)
    mode = "GPU check --dry-run" if dry_run else ("GPU check --quick" if quick else "GPU check")
    body = [f"gridnn {mode}, {elapsed}s of {budget}s"] + head
    c = cudnn_line(logs)
    if c:
        body.append(c)
    result = "RESULT: OK" if not hard else f"RESULT: FAILED ({', '.join(hard)})"
    if dry_run:
        result += " [dry run: no GPU stage ran]"
    room = SUMMARY_BYTES - len(result.encode()) - 1

    # Consecutive stages not run for want of time: one row.
    merged = []
    for row in rows:
        if merged and row[1] == "NOT RUN" and merged[-1][1] == "NOT RUN":
            n, st, t, d = merged[-1]
            names = d.split(": ", 1)[1] if d.startswith("no time left: ") else n
            merged[-1] = ("(several)", st, t, f"no time left: {names}, {row[0]}")
        else:
            merged.append(row)

    def lines(width):
        """The table, each row's detail cut at width characters; the failures and the rest."""
        table = [f"{'stage':<18} | {'status':<7} | {'s':>4} | detail",
                 "-" * 19 + "+" + "-" * 9 + "+" + "-" * 6 + "+" + "-" * 44]
        table += [f"{n:<18} | {s:<7} | {t:>4} | {d[:width]}" for n, s, t, d in merged]
        tail = []
        if fails:
            tail.append("failures (first lines; the logs have the rest):")
            tail += [f"  {x[:width + 40]}" for x in fails[:12]]
        return body + table, tail + [CANNOT_TEST, "logs: gpu_check_logs.tar.gz"]

    def size(seq):
        return sum(len(x.encode()) + 1 for x in seq)

    def fill(seq, budget):
        """Whole lines while they fit."""
        taken = []
        for line in seq:
            if size(taken) + len(line.encode()) + 1 > budget:
                break
            taken.append(line)
        return taken

    # At most SUMMARY_BYTES with the result line last: the details shortened until every line
    # fits; else the failures and the closing lines (at most half), then the table's lines
    # while they fit.
    full = next((h + t for h, t in (lines(w) for w in (160, 130, 110, 90, 64)) if size(h + t) <= room), None)
    if full:
        out = full
    else:
        head, tail = lines(64)
        tail = fill(tail, room // 2)
        out = fill(head, room - size(tail) - 60) + ["  [... cut to fit 3 KB]"] + tail
    text = "\n".join(out + [result]) + "\n"
    if not full:  # every line, uncut, in the logs
        with open(os.path.join(logs, "summary_full.txt"), "w") as f:
            f.write("\n".join(sum(lines(160), []) + [result]) + "\n")
        text = text.replace("[... cut to fit 3 KB]", "[... cut to fit 3 KB] (every line: summary_full.txt)")
    open(os.path.join(logs, "summary.txt"), "w").write(text)
    sys.stdout.write(text)
    return 1 if hard else 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd, args = argv[1], argv[2:]
    dry_run = "--dry-run" in args
    pos = [a for a in args if not a.startswith("--")]
    if cmd == "closure":
        return closure(pos[0], dry_run)
    if cmd == "size":
        return size(pos[0])
    if cmd == "select":
        return select(pos[0], pos[1])
    if cmd == "probe":
        return probe(pos[0], pos[1])
    if cmd == "libs":
        return libs(pos[0], pos[1], pos[2], dry_run)
    if cmd == "memory":
        return memory(pos[0], pos[1])
    if cmd == "summary":
        opt = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
        return summary(pos[0], dry_run, int(opt.get("--budget", 0)), "--quick" in args,
                       int(opt.get("--elapsed", 0)))
    print(f"gpu_check.py: unknown command {cmd!r} (closure, size, select, probe, libs, memory, summary)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
