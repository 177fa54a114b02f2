#!/usr/bin/env python3
"""gridnn-train under a real Slurm cluster: the local two-node one of scripts/slurm_local.sh.

Usage: slurm_jobs.py GRIDNN_TRAIN REPO WORKDIR CASE

Every job goes through sbatch, most of them through examples/slurm/cpu.sbatch or gpu.sbatch as
written (sizes by sbatch --export, the allocation by sbatch's own options). Each rank is
started through a probe that records Slurm's word on where it runs (SLURM_NODEID,
SLURMD_NODENAME: the rank's own under srun, its Hydra proxy's under mpiexec, which srun
placed) and then execs gridnn-train.

Cases:
  placement-srun, placement-mpiexec
      2 nodes x 1 task (2x1), 1 node x 2 tasks (1x2) and 2 nodes x 2 tasks (2x2), each with
      --rank-order rows-in-node and cols-in-node: the job completes, its metrics file is whole,
      the rank -> node table gridnn prints agrees with Slurm's placement, and its header says
      which groups cross nodes as they do.
  time-limit
      cpu.sbatch with --time=1 --signal=TERM@25 on a run longer than Slurm's signal can come
      (its steps sized from a measured rate): every rank saves and exits 75, the script
      requeues the job, the second start resumes and ends bitwise where an uninterrupted job
      ends. Slurm checks time limits every 30 s, so every start of a 1-minute job would stop
      at a random point: once the first start is requeued, the test lifts the limit.
  preempt
      The same with scancel --signal=TERM mid-run.
  reshape
      A job stopped on 2 nodes x 1 task (--grid 2x1) resumes as 1 node x 2 tasks with --grid 1x2;
      its losses match the same checkpoint resumed on 2x1 within the grid-change tolerance.
  dead-task
      SIGKILL to rank 1 through srun --kill-on-bad-exit=1 (gpu.sbatch), through mpiexec, and
      through cpu.sbatch as written (no --kill-on-bad-exit: --comm-timeout ends it): the job
      ends within --comm-timeout + 15 s, not COMPLETED, with a message naming rank 1.
  bad-grid
      --grid 2x2 in an allocation of 2 tasks: refused on every rank with exit status 1, both
      numbers and the allocation named, no requeue; and srun without --mpi, whose tasks MPI
      sees as jobs of one process: a message naming --mpi.
  allocation
      --grid auto in 2 nodes x 2 tasks plans for 2 nodes of 2 ranks and runs what it chose;
      gridnn-plan --slurm in the same allocation prints an srun line, which then runs.
  gpu-script
      gpu.sbatch passes sbatch --test-only with its own GPU request (the cluster's stand-in
      GPUs), and runs to the end with DEVICE=cpu.

Each case prints "result: scenario | launcher | job state | seconds | check" lines (the table
of bench/RESULTS.md) and "ok: ..." at the end, or "FAIL (case): why" with exit status 1. When
the local cluster is not running the case is skipped (exit 77) with the reason, unless
GRIDNN_REQUIRE_SLURM=1 (CI), where that is a failure. cluster-start and cluster-stop are the
CTest fixture around the cases: start the cluster when it can be and is not running, and stop
only a cluster that cluster-start started.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# A small network on tiny volumes: a few ms a step on 2 ranks.
TINY = {"DATA": "synthetic", "INPUT": "8x8x8", "WIDTH": "2", "BATCH": "4"}
TINY_ARGS = "--train-samples 16 --val-samples 4 --no-progress --seed 7 --eval-every 1000000"
# The grid-change tolerance of test_dist_train (three steps: 4 x 1e-4 relative) on its setup.
GRID_CHANGE = {"DATA": "synthetic", "INPUT": "24x24x20", "WIDTH": "2", "BATCH": "8"}
GRID_CHANGE_ARGS = ("--classes 3 --train-samples 32 --val-samples 4 --no-augment --momentum 0.9 --nesterov "
                    "--weight-decay 5e-4 --lr 0.01 --no-progress --seed 7 --eval-every 1000000 --log-every 1")
GRID_CHANGE_TOLERANCE = 4e-4


def polite(ranks):
    """The two "nodes" share this machine's cores, which gridnn cannot see from one node: where a
    job has more ranks than the machine has cores, they must not spin in MPI waits."""
    return {"GRIDNN_POLITE_WAIT": "1"} if ranks > os.cpu_count() else {}


class Failure(Exception):
    pass


def fail(why):
    raise Failure(why)


class Cluster:
    def __init__(self, repo, work, train):
        self.repo, self.work, self.train = repo, work, train
        self.local = os.path.join(repo, "scripts", "slurm_local.sh")
        conf = subprocess.run(["bash", self.local, "conf"], capture_output=True, text=True).stdout.strip()
        self.env = dict(os.environ, SLURM_CONF=conf, OMP_NUM_THREADS="1")
        self.probe = os.path.join(work, "rank_probe.sh")
        self.placements = os.path.join(work, "placements")
        self.results = []

    def run(self, cmd, check=True, timeout=60, **kw):
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.work, **kw)
        if check and r.returncode != 0:
            fail(f"{' '.join(cmd)}: exit {r.returncode}: {r.stdout[-500:]}{r.stderr[-500:]}")
        return r

    def up(self):
        """None when both nodes answer, else why not."""
        if not shutil.which("sinfo"):
            return "Slurm is not installed (scripts/setup.sh installs slurm-wlm and munge)"
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=self.env)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        if r.returncode != 0 or len(states) != 2:
            return (f"the local Slurm cluster is not running (SLURM_CONF={self.env['SLURM_CONF']}; "
                    f"start it as root with scripts/slurm_local.sh start): {r.stderr.strip()[:200]}")
        if not all(s.rstrip("*") in ("idle", "mix", "alloc", "comp") for s in states.values()):
            return f"the local Slurm cluster's nodes are not usable: {states}"
        return None

    def write_probe(self):
        os.makedirs(self.placements, exist_ok=True)
        with open(self.probe, "w") as f:
            f.write(f"""#!/bin/bash
# Records where Slurm placed this rank, then becomes gridnn-train.
env_of=/proc/$$/environ
if [ "$(cat /proc/$PPID/comm 2>/dev/null)" = hydra_pmi_proxy ]; then env_of=/proc/$PPID/environ; fi
slurm() {{ tr '\\0' '\\n' <"$env_of" | sed -n "s/^$1=//p"; }}
echo "$PMI_RANK $$ $(slurm SLURM_NODEID) $(slurm SLURMD_NODENAME)" >"{self.placements}/$SLURM_JOB_ID.$PMI_RANK"
exec "{self.train}" "$@"
""")
        os.chmod(self.probe, 0o755)

    def sbatch(self, script, options=(), export=None, wrap=None):
        """Submits; returns the job id."""
        cmd = ["sbatch", "--parsable", *options]
        if export is not None:
            cmd.append("--export=" + ",".join(["ALL"] + [f"{k}={v}" for k, v in export.items()]))
        cmd += ["--wrap", wrap] if wrap else [script]
        return self.run(cmd).stdout.strip().split(";")[0]

    def example(self, name):
        return os.path.join(self.repo, "examples", "slurm", name)

    def info(self, job):
        r = self.run(["scontrol", "show", "job", "-o", job])
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait(self, job, timeout, on_poll=None):
        """Polls until the job ends; returns its scontrol record."""
        end = time.time() + timeout
        while time.time() < end:
            info = self.info(job)
            if on_poll:
                on_poll(info)
            if info.get("JobState") in TERMINAL:
                return info
            time.sleep(0.25)
        self.run(["scancel", job], check=False)
        fail(f"job {job} did not end within {timeout} s (cancelled): {self.info(job)}")

    def output(self, job, name=None):
        path = os.path.join(self.work, name or f"gridnn-{job}.out")
        return open(path).read() if os.path.exists(path) else ""

    def placement(self, job):
        """{rank: (pid, SLURM_NODEID, SLURMD_NODENAME)} from the probe's records."""
        out = {}
        for f in os.listdir(self.placements):
            if f.startswith(job + "."):
                rank, pid, nodeid, nodename = open(os.path.join(self.placements, f)).read().split()
                out[int(rank)] = (int(pid), int(nodeid), nodename)
        return out

    def result(self, scenario, launcher, info, seconds, check):
        state = f"{info['JobState']} {info['ExitCode']}"
        if int(info.get("Restarts", 0)):
            state += f", {info['Restarts']} requeue" + ("s" if int(info["Restarts"]) > 1 else "")
        row = f"result: {scenario} | {launcher} | {state} | {seconds:.0f} | {check}"
        print(row, flush=True)


def metrics_whole(path, steps):
    """Every line is JSON; a "done" event at `steps`; the train lines reach it."""
    if not os.path.exists(path):
        fail(f"no metrics file {path}")
    events = []
    for n, line in enumerate(open(path), 1):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            fail(f"{path}:{n} is not a JSON line: {line[:120]!r}")
    done = [e for e in events if e.get("event") == "done"]
    if not done or done[-1]["step"] != steps:
        fail(f"{path}: no \"done\" event at step {steps}")
    trained = [e["step"] for e in events if e.get("event") == "train"]
    if not trained or max(trained) != steps:
        fail(f"{path}: the train lines end at step {max(trained, default=0)}, not {steps}")
    return events


def train_lines(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        if '"event":"train"' in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # being written
    return out


def wait_train_step(path, step, job, c, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        lines = train_lines(path)
        if lines and lines[-1]["step"] >= step:
            return lines[-1]["step"]
        if c.info(job).get("JobState") in TERMINAL:
            fail(f"job {job} ended before step {step}:\n{c.output(job)[-1500:]}")
        time.sleep(0.1)
    fail(f"job {job} did not reach step {step} in {timeout} s")


def gridnn_table(text):
    """From gridnn's rank table: (header, {rank: (node, row, col)})."""
    header = re.search(r"^rank order (\S+): row groups [^;]*?(cross nodes|inside a node); column groups .*?"
                       r"(cross nodes|inside a node)", text, re.M | re.I)
    if not header:
        fail(f"gridnn printed no rank order line:\n{text[-1500:]}")
    table = {}
    for node, entries in re.findall(r"^  node (\d+): (.*)$", text, re.M):
        for rank, row, col in re.findall(r"(\d+)=\((\d+),(\d+)\)", entries):
            table[int(rank)] = (int(node), int(row), int(col))
    return header, table


def expected_position(rank, grid, order):
    rows, cols = grid
    if order == "rows-in-node":
        return rank % rows, rank // rows  # w = c * Pr + r
    return rank // cols, rank % cols  # w = r * Pc + c


# ---- cases -------------------------------------------------------------------------------------


def placement_case(c, launcher):
    shapes = [(2, 1, (2, 1)), (1, 2, (1, 2)), (2, 2, (2, 2))]  # nodes, tasks per node, grid
    steps = 20
    jobs = []
    for nodes, per_node, grid in shapes:
        for order in ("rows-in-node", "cols-in-node"):
            g = f"{grid[0]}x{grid[1]}"
            waits = polite(nodes * per_node)
            ckpt = os.path.join(c.work, f"{launcher}-{g}-{order}")
            options = [f"--nodes={nodes}", f"--ntasks-per-node={per_node}", "--cpus-per-task=1"]
            if launcher == "srun":
                job = c.sbatch(c.example("cpu.sbatch"), options,
                               dict(TINY, GRIDNN=c.probe, GRID=g, RANK_ORDER=order, STEPS=steps, CKPT=ckpt,
                                    GRIDNN_ARGS=TINY_ARGS, **waits))
                out = None
            else:
                out = f"mpiexec-{g}-{order}.out"
                line = (f"mpiexec {c.probe} --grid {g} --rank-order {order} --data synthetic --input 8x8x8 "
                        f"--width 2 --batch 4 --steps {steps} {TINY_ARGS} --checkpoint-dir {ckpt} "
                        f"--metrics {ckpt}/metrics.jsonl")
                job = c.sbatch(None, options + ["-o", out], waits, wrap=line)
            jobs.append((job, nodes, per_node, grid, order, ckpt, out, time.time()))
    for job, nodes, per_node, grid, order, ckpt, out, submitted in jobs:
        info = c.wait(job, 120)
        text = c.output(job, out)
        what = f"{nodes} node{'s' if nodes > 1 else ''} x {per_node} task{'s' if per_node > 1 else ''}, {grid[0]}x{grid[1]} {order}"
        if info["JobState"] != "COMPLETED" or info["ExitCode"] != "0:0":
            fail(f"{launcher} {what}: job {job} {info['JobState']} {info['ExitCode']}:\n{text[-2000:]}")
        metrics_whole(os.path.join(ckpt, "metrics.jsonl"), steps)
        header, table = gridnn_table(text)
        slurm = c.placement(job)
        ranks = nodes * per_node
        if sorted(slurm) != list(range(ranks)) or sorted(table) != list(range(ranks)):
            fail(f"{launcher} {what}: ranks in Slurm's placement {sorted(slurm)}, in gridnn's table {sorted(table)}")
        for rank in range(ranks):
            node, row, col = table[rank]
            if node != slurm[rank][1]:
                fail(f"{launcher} {what}: gridnn puts rank {rank} on node {node}, Slurm on SLURM_NODEID "
                     f"{slurm[rank][1]} ({slurm[rank][2]})")
            if (row, col) != expected_position(rank, grid, order):
                fail(f"{launcher} {what}: rank {rank} at ({row},{col}), {order} puts it at "
                     f"{expected_position(rank, grid, order)}")
        # Which groups really cross nodes, from Slurm's placement.
        node_of = {}
        for rank in range(ranks):
            node_of[expected_position(rank, grid, order)] = slurm[rank][1]
        rows_cross = any(node_of[(r, cc)] != node_of[(0, cc)] for r in range(grid[0]) for cc in range(grid[1]))
        cols_cross = any(node_of[(r, cc)] != node_of[(r, 0)] for r in range(grid[0]) for cc in range(grid[1]))
        said = (header.group(2).lower() == "cross nodes", header.group(3).lower() == "cross nodes")
        if said != (rows_cross, cols_cross):
            fail(f"{launcher} {what}: gridnn says row groups {header.group(2)}, column groups {header.group(3)}; "
                 f"Slurm's placement has them crossing: rows {rows_cross}, columns {cols_cross}")
        names = ", ".join(f"{r}->{slurm[r][2]}" for r in range(ranks))
        c.result(f"placement {what}", f"srun --mpi=pmi2 (cpu.sbatch)" if launcher == "srun" else "mpiexec in sbatch",
                 info, elapsed(info), f"gridnn's table = Slurm's ({names}); metrics whole")
    return f"{len(jobs)} jobs through {launcher}: gridnn's rank table agrees with Slurm's placement"


def elapsed(info):
    """Seconds from the job's (last) start to its end, as Slurm records them."""
    def t(s):
        return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))
    try:
        return t(info["EndTime"]) - t(info["StartTime"])
    except (KeyError, ValueError):
        return float("nan")


def last_checkpoint(folder):
    files = sorted(f for f in os.listdir(folder) if f.startswith("step-") and f.endswith(".safetensors"))
    return os.path.join(folder, files[-1]) if files else None


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def stopped_and_resumed(c, job, info, text, steps, ckpt, reference, ranks):
    """The checks shared by the time-limit and preemption cases: every rank exited 75, the script
    requeued the job once, the second start resumed from the stop's checkpoint and ended where
    the uninterrupted job ended, to the bit. Returns the step it stopped at."""
    if info["JobState"] != "COMPLETED" or info["ExitCode"] != "0:0":
        fail(f"job {job} ended {info['JobState']} {info['ExitCode']}:\n{text[-2500:]}")
    if info.get("Restarts") != "1":
        fail(f"job {job} was requeued {info.get('Restarts')} times, expected once:\n{text[-2500:]}")
    stop = re.search(r"SIGTERM reached rank \d+.*stopped after step (\d+); saved (\S+)", text)
    if not stop:
        fail(f"job {job}: no stop message:\n{text[-2500:]}")
    at = int(stop.group(1))
    exits = re.findall(r"tasks? ([\d,-]+): Exited with exit code 75", text)
    stopped_ranks = set()
    for spec in exits:
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            stopped_ranks.update(range(int(lo), int(hi or lo) + 1))
    if stopped_ranks != set(range(ranks)):
        fail(f"job {job}: ranks {sorted(stopped_ranks)} exited with 75, expected all {ranks}:\n{text[-2500:]}")
    if f"requeueing job {job}" not in text:
        fail(f"job {job}: the script did not requeue it")
    if not re.search(rf"resumed from \S*step-0*{at}\.safetensors at step {at}", text):
        fail(f"job {job}: the second start did not resume from step {at}:\n{text[-2500:]}")
    if at >= steps:
        fail(f"job {job}: it stopped at step {at}, after the end")
    last = os.path.join(ckpt, f"step-{steps:08d}.safetensors")
    want = os.path.join(reference, f"step-{steps:08d}.safetensors")
    if not os.path.exists(last) or not same_bytes(last, want):
        fail(f"job {job}: {last} is not bitwise equal to the uninterrupted job's {want}")
    return at


def run_to_end(c, name, export, options, timeout=300):
    """An uninterrupted cpu.sbatch job (the reference of the bitwise checks)."""
    ckpt = os.path.join(c.work, name)
    job = c.sbatch(c.example("cpu.sbatch"), options, dict(export, CKPT=ckpt))
    info = c.wait(job, timeout)
    if info["JobState"] != "COMPLETED":
        fail(f"the uninterrupted job {job} ended {info['JobState']} {info['ExitCode']}:\n{c.output(job)[-2000:]}")
    return ckpt, info


def time_limit_case(c):
    options = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"]
    sizes = {"DATA": "synthetic", "INPUT": "16x16x16", "WIDTH": "4", "BATCH": "4", "GRIDNN": c.probe, "GRID": "2x1",
             "GRIDNN_ARGS": TINY_ARGS, "SAVE_EVERY": "1000000"}
    # The rate of this machine now: the run must outlast the latest the signal can come (35 s
    # into a 1-minute job with TERM@25: Slurm sends it at its first 30-s check from 5 s on);
    # about 50 s of steps.
    probe, _ = run_to_end(c, "rate", dict(sizes, STEPS=1000, GRIDNN_ARGS=TINY_ARGS + " --log-every 100"), options)
    seconds = {e["step"]: e["seconds"] for e in metrics_whole(os.path.join(probe, "metrics.jsonl"), 1000)
               if e.get("event") == "train"}
    per_step = (seconds[1000] - seconds[100]) / 900  # past the first steps' warm-up
    steps = int(math.ceil(50 / per_step / 100) * 100)
    print(f"{per_step * 1e3:.1f} ms a step: {steps} steps, about {steps * per_step:.0f} s", flush=True)
    reference, ref_info = run_to_end(c, "whole", dict(sizes, STEPS=steps), options)

    ckpt = os.path.join(c.work, "limited")
    job = c.sbatch(c.example("cpu.sbatch"), options + ["--time=1", "--signal=TERM@25"],
                   dict(sizes, STEPS=steps, CKPT=ckpt))
    lifted = []

    def lift(info):  # once requeued, the second start may run to the end
        if info.get("Restarts") == "1" and not lifted:
            c.run(["scontrol", "update", f"JobId={job}", "TimeLimit=10"])
            lifted.append(time.time())

    first_start = time.time()
    info = c.wait(job, 240, on_poll=lift)
    text = c.output(job)
    if info.get("Restarts") == "0" and info["JobState"] == "COMPLETED":
        fail(f"job {job}: Slurm's signal did not come before the run ended ({steps} steps in {elapsed(info):.0f} s; "
             "the machine ran faster than measured)")
    at = stopped_and_resumed(c, job, info, text, steps, ckpt, reference, 2)
    c.result("uninterrupted reference (2 nodes x 1 task, 2x1)", "srun --mpi=pmi2 (cpu.sbatch)", ref_info,
             elapsed(ref_info), f"{steps} steps")
    c.result("time limit: --time=1 --signal=TERM@25, 2x1", "srun --mpi=pmi2 (cpu.sbatch)", info,
             time.time() - first_start,
             f"first start stopped at step {at} of {steps} ({(lifted[0] - first_start) if lifted else 0:.0f} s), "
             "every rank exit 75, requeued, resumed; final weights bitwise equal to the reference")
    return f"time limit: stopped at step {at} of {steps}, requeued, resumed, bitwise equal"


def preempt_case(c):
    options = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"]
    steps = 3000
    sizes = dict(TINY, GRIDNN=c.probe, GRID="2x1", GRIDNN_ARGS=TINY_ARGS, STEPS=steps, SAVE_EVERY="1000000")
    ckpt = os.path.join(c.work, "preempted")
    start = time.time()
    job = c.sbatch(c.example("cpu.sbatch"), options, dict(sizes, CKPT=ckpt))
    wait_train_step(os.path.join(ckpt, "metrics.jsonl"), 20, job, c)
    c.run(["scancel", "--signal=TERM", job])
    info = c.wait(job, 180)
    reference, ref_info = run_to_end(c, "whole", sizes, options)
    at = stopped_and_resumed(c, job, info, c.output(job), steps, ckpt, reference, 2)
    c.result("preemption by hand: scancel --signal=TERM, 2x1", "srun --mpi=pmi2 (cpu.sbatch)", info,
             time.time() - start, f"stopped at step {at} of {steps}, every rank exit 75, requeued, resumed; "
             "final weights bitwise equal to an uninterrupted job")
    return f"preempted at step {at}, requeued, resumed, bitwise equal"


def losses(path):
    return {e["step"]: e["loss"] for e in train_lines(path)}


def reshape_case(c):
    sizes = dict(GRID_CHANGE, GRIDNN=c.probe, GRIDNN_ARGS=GRID_CHANGE_ARGS, SAVE_EVERY="1000000")
    first = os.path.join(c.work, "first")
    # No requeue: the stop ends the job (the script's scontrol requeue is refused).
    job = c.sbatch(c.example("cpu.sbatch"), ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--no-requeue"],
                   dict(sizes, GRID="2x1", STEPS=100000, CKPT=first))
    wait_train_step(os.path.join(first, "metrics.jsonl"), 3, job, c)
    c.run(["scancel", "--signal=TERM", job])
    info = c.wait(job, 60)
    saved = last_checkpoint(first)
    if info["ExitCode"] != "75:0" or not saved:
        fail(f"the first job {job} ended {info['JobState']} {info['ExitCode']} with checkpoint {saved}:\n"
             f"{c.output(job)[-2000:]}")
    at = int(re.search(r"step-(\d+)", saved).group(1))
    c.result("stopped for a new shape: 2 nodes x 1 task, 2x1", "srun --mpi=pmi2 (cpu.sbatch --no-requeue)", info,
             elapsed(info), f"exit 75 at step {at}")
    steps = at + 3
    runs = {}
    for name, grid, nodes, per_node in (("on-2x1", "2x1", 2, 1), ("on-1x2", "1x2", 1, 2)):
        ckpt = os.path.join(c.work, name)
        shutil.copytree(first, ckpt)
        j = c.sbatch(c.example("cpu.sbatch"), [f"--nodes={nodes}", f"--ntasks-per-node={per_node}", "--cpus-per-task=1"],
                     dict(sizes, GRID=grid, STEPS=steps, CKPT=ckpt))
        runs[name] = (j, ckpt, nodes, per_node, grid)
    got = {}
    for name, (j, ckpt, nodes, per_node, grid) in runs.items():
        i = c.wait(j, 120)
        text = c.output(j)
        if i["JobState"] != "COMPLETED" or f"resumed from {ckpt}/step-{at:08d}.safetensors" not in text:
            fail(f"the job resumed {name} ({j}) ended {i['JobState']} {i['ExitCode']}:\n{text[-2000:]}")
        got[name] = (losses(os.path.join(ckpt, "metrics.jsonl")), i)
    worst = 0.0
    for step in range(at + 1, steps + 1):
        a, b = got["on-2x1"][0].get(step), got["on-1x2"][0].get(step)
        if a is None or b is None:
            fail(f"no loss at step {step}: 2x1 {a}, 1x2 {b}")
        worst = max(worst, abs(a - b) / abs(a))
    if worst > GRID_CHANGE_TOLERANCE:
        fail(f"the losses after resuming on 1x2 part from 2x1's by {worst:.2e} (tolerance {GRID_CHANGE_TOLERANCE})")
    for name in ("on-2x1", "on-1x2"):
        j, _, nodes, per_node, grid = runs[name]
        c.result(f"resumed on {nodes} node{'s' if nodes > 1 else ''} x {per_node} task{'s' if per_node > 1 else ''}, "
                 f"--grid {grid}", "srun --mpi=pmi2 (cpu.sbatch)", got[name][1], elapsed(got[name][1]),
                 f"steps {at + 1}-{steps}: losses within {worst:.1e} of each other (tolerance {GRID_CHANGE_TOLERANCE:g})")
    return f"stopped at step {at} on 2x1, resumed on 1x2: losses within {worst:.1e} of 2x1's"


def dead_case(c):
    timeout = 10
    base = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"]
    sizes = dict(TINY, GRIDNN=c.probe, GRID="2x1", GRIDNN_ARGS=TINY_ARGS, STEPS=10000000, SAVE_EVERY="1000000",
                 COMM_TIMEOUT=timeout)
    launches = [
        ("srun --mpi=pmi2 --kill-on-bad-exit=1 (gpu.sbatch, DEVICE=cpu)", "gpu.sbatch", ["--gpus-per-node=1"],
         r"task 1: Killed"),
        # Hydra names the rank by its pid and node.
        ("mpiexec in sbatch", None, [], r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*=\s*PID {pid} RUNNING AT n2"),
        ("srun --mpi=pmi2 (cpu.sbatch, no --kill-on-bad-exit)", "cpu.sbatch", [],
         r"task 1: Killed[\s\S]*communication timeout: waited [\d.]+ s \(--comm-timeout 10\)[^\n]*rank 1"),
    ]
    summary = []
    for n, (launcher, script, extra, message) in enumerate(launches):
        ckpt = os.path.join(c.work, f"dead{n}")
        out = None
        if script:
            job = c.sbatch(c.example(script), base + extra, dict(sizes, CKPT=ckpt, DEVICE="cpu"))
        else:
            out = "mpiexec-dead.out"
            job = c.sbatch(None, base + ["-o", out], wrap=(
                f"mpiexec {c.probe} --grid 2x1 --data synthetic --input 8x8x8 --width 2 --batch 4 --steps 10000000 "
                f"{TINY_ARGS} --comm-timeout {timeout} --metrics {ckpt}/metrics.jsonl"))
        wait_train_step(os.path.join(ckpt, "metrics.jsonl"), 20, job, c)
        pid = c.placement(job).get(1, (None,))[0]
        if not pid:
            fail(f"{launcher}: rank 1's pid is unknown")
        os.kill(pid, 9)
        killed = time.time()
        info = c.wait(job, timeout + 60)
        took = time.time() - killed
        text = c.output(job, out)
        if took > timeout + 15:
            fail(f"{launcher}: the job ended {took:.0f} s after rank 1 died (limit --comm-timeout + 15 s)")
        if info["JobState"] == "COMPLETED" or info["ExitCode"] == "0:0":
            fail(f"{launcher}: the job ended {info['JobState']} {info['ExitCode']} after a rank died")
        if int(info.get("Restarts", 0)) != 0:
            fail(f"{launcher}: the job was requeued")
        message = message.replace("{pid}", str(pid))
        if not re.search(message, text):
            fail(f"{launcher}: no message naming rank 1 (/{message}/):\n{text[-2500:]}")
        named = re.search(message, text).group(0).split("\n")[-1].strip("= \n")
        c.result("a dead task: SIGKILL to rank 1 of 2x1", launcher, info, took, f"ended {took:.0f} s after the kill: \"{named[-110:]}\"")
        summary.append(f"{took:.0f} s")
    return "a dead rank ends the job in " + ", ".join(summary)


def bad_grid_case(c):
    ckpt = os.path.join(c.work, "bad")
    start = time.time()
    job = c.sbatch(c.example("cpu.sbatch"), ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"],
                   dict(TINY, GRIDNN=c.probe, GRID="2x2", STEPS=10, CKPT=ckpt, GRIDNN_ARGS=TINY_ARGS))
    info = c.wait(job, 60)
    text = c.output(job)
    if info["JobState"] != "FAILED" or info["ExitCode"] != "1:0" or info.get("Restarts") != "0":
        fail(f"job {job} ended {info['JobState']} {info['ExitCode']} after {info.get('Restarts')} requeues, "
             f"expected FAILED 1:0 and none:\n{text}")
    if not re.search(r"gridnn: error: --grid 2x2 needs 4 processes, the job has 2; the allocation \(Slurm job "
                     + job + r": 2 tasks on 2 nodes \(1 each\)\) does not: submit with 4 tasks .* srun", text):
        fail(f"job {job}: the message does not name both sizes, the allocation and srun:\n{text}")
    ones = re.findall(r"tasks? ([\d,-]+): Exited with exit code 1\b", text)
    if sorted(ones) != ["0", "1"]:
        fail(f"job {job}: not every rank exited with status 1 ({ones}):\n{text}")
    c.result("bad input: --grid 2x2 in 2 tasks", "srun --mpi=pmi2 (cpu.sbatch)", info, time.time() - start,
             "refused on every rank, exit 1, no requeue: \"" + re.search(r"the job has 2[^(]*", text).group(0).strip() + " ...\"")

    start = time.time()
    job = c.sbatch(None, ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "-o", "no-pmi.out"],
                   wrap=f"srun {c.train} --grid 2x1 --width 2 --input 8x8x8 --batch 4 --steps 2 --no-progress")
    info = c.wait(job, 60)
    text = c.output(job, "no-pmi.out")
    if info["ExitCode"] != "1:0" or "srun started 2 tasks but MPI sees each as a job of 1 process" not in text \
            or "--mpi=pmi2" not in text:
        fail(f"srun without --mpi: job {job} ended {info['JobState']} {info['ExitCode']}:\n{text}")
    c.result("bad input: srun without --mpi (tasks that MPI sees as 1-process jobs)", "srun (sbatch --wrap)", info,
             time.time() - start, "exit 1 on every rank, the message names --mpi=pmi2")
    return "a grid that does not fit the allocation is refused with exit 1 on every rank"


def allocation_case(c):
    """--grid auto plans for the allocation; gridnn-plan --slurm prints an srun line that runs."""
    ckpt = os.path.join(c.work, "auto")
    start = time.time()
    job = c.sbatch(c.example("cpu.sbatch"), ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1"],
                   dict(TINY, GRIDNN=c.probe, GRID="auto", STEPS=10, CKPT=ckpt, GRIDNN_ARGS=TINY_ARGS,
                        **polite(4)))
    info = c.wait(job, 120)
    text = c.output(job)
    said = re.search(r"--grid auto in Slurm job " + job + r": 4 tasks on 2 nodes \(2 each\): (\d+)x(\d+) "
                     r"--rank-order rows-in-node of [^\n]* on 2 nodes x 2 ranks \(crossing nodes: ([a-z+]+)\)", text)
    if info["JobState"] != "COMPLETED" or not said:
        fail(f"--grid auto: job {job} ended {info['JobState']} {info['ExitCode']}:\n{text[-2000:]}")
    grid = f"{said.group(1)}x{said.group(2)}"
    if f"grid {grid}, 10 steps" not in text:
        fail(f"--grid auto chose {grid} but the run says otherwise:\n{text[-2000:]}")
    metrics_whole(os.path.join(ckpt, "metrics.jsonl"), 10)
    c.result("--grid auto in 2 nodes x 2 tasks", "srun --mpi=pmi2 (cpu.sbatch)", info, time.time() - start,
             f"planned {grid} for 2 nodes x 2 ranks (crossing: {said.group(3)}); ran it")

    plan = os.path.join(os.path.dirname(c.train), "gridnn-plan")
    metrics = os.path.join(c.work, "planned.jsonl")
    # The planner's srun line, with gridnn-train's path for its name and run flags for its "...".
    script = (f"plan=$({plan} --slurm --width 2 --input 8x8x8 --batch 4) || exit 1\n"
              "echo \"$plan\"\n"
              f"line=$(echo \"$plan\" | sed -n 's|^  srun |srun |p' | sed 's| gridnn-train | {c.train} |; s| [.][.][.]$||')\n"
              f"eval \"$line --data synthetic --steps 10 {TINY_ARGS} --metrics {metrics}\"\n")
    start = time.time()
    job = c.sbatch(None, ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "-o", "planned.out"],
                   polite(4), wrap=script)
    info = c.wait(job, 120)
    text = c.output(job, "planned.out")
    line = re.search(r"Slurm job " + job + r": 4 tasks on 2 nodes \(2 each\): run it with\n  (srun --mpi=pmi2 "
                     r"gridnn-train --grid (\d+x\d+) --rank-order \S+ [^\n]*)", text)
    if info["JobState"] != "COMPLETED" or not line:
        fail(f"gridnn-plan --slurm: job {job} ended {info['JobState']} {info['ExitCode']}:\n{text[-2000:]}")
    if f"grid {line.group(2)}, 10 steps" not in text:
        fail(f"the planned line did not run on {line.group(2)}:\n{text[-2000:]}")
    metrics_whole(metrics, 10)
    c.result("gridnn-plan --slurm in 2 nodes x 2 tasks, then its srun line", "srun --mpi=pmi2 (sbatch --wrap)", info,
             time.time() - start, f"\"{line.group(1)}\" ran")
    return f"--grid auto chose {grid}; gridnn-plan --slurm printed \"{line.group(1)}\", which ran"


def gpu_script_case(c):
    script = c.example("gpu.sbatch")
    r = c.run(["sbatch", "--test-only", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", script], check=False)
    said = (r.stdout + r.stderr).strip()
    if r.returncode != 0 or "to start at" not in said:
        fail(f"sbatch --test-only gpu.sbatch: {said}")
    ckpt = os.path.join(c.work, "gpu")
    steps = 20
    start = time.time()
    job = c.sbatch(script, ["--nodes=2", "--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=1"],
                   dict(TINY, DEVICE="cpu", GRIDNN=c.probe, GRID="2x2", STEPS=steps, CKPT=ckpt, GRIDNN_ARGS=TINY_ARGS,
                        NCCL_SOCKET_IFNAME="lo", **polite(4)))
    info = c.wait(job, 120)
    if info["JobState"] != "COMPLETED":
        fail(f"gpu.sbatch with DEVICE=cpu: job {job} ended {info['JobState']} {info['ExitCode']}:\n{c.output(job)}")
    metrics_whole(os.path.join(ckpt, "metrics.jsonl"), steps)
    c.result("gpu.sbatch: --test-only with its --gpus-per-node=4, then run with DEVICE=cpu, 2x2 cols-in-node",
             "srun --mpi=pmi2 --kill-on-bad-exit=1 (gpu.sbatch)", info, time.time() - start,
             f"--test-only: \"{said.split(' using')[0]}\"; run: metrics whole")
    return "gpu.sbatch passes --test-only and runs with DEVICE=cpu"


# ---- the fixture -------------------------------------------------------------------------------


def cluster_start(c):
    marker = os.path.join(c.work, "started-by-ctest")
    if c.up() is None:
        print("the local Slurm cluster is already running: the tests use it and leave it running")
        return
    if os.geteuid() != 0:
        print("not root: the local Slurm cluster cannot be started here; the slurm tests will be skipped")
        return
    r = subprocess.run(["bash", c.local, "start"], capture_output=True, text=True)
    print(r.stdout + r.stderr)
    if r.returncode == 0:
        open(marker, "w").close()


def cluster_stop(c):
    marker = os.path.join(c.work, "started-by-ctest")
    if os.path.exists(marker):
        r = subprocess.run(["bash", c.local, "stop"], capture_output=True, text=True)
        print(r.stdout + r.stderr)
        os.remove(marker)


CASES = {
    "placement-srun": lambda c: placement_case(c, "srun"),
    "placement-mpiexec": lambda c: placement_case(c, "mpiexec"),
    "time-limit": time_limit_case,
    "preempt": preempt_case,
    "reshape": reshape_case,
    "dead-task": dead_case,
    "bad-grid": bad_grid_case,
    "allocation": allocation_case,
    "gpu-script": gpu_script_case,
}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    train, repo, work = (os.path.abspath(a) for a in sys.argv[1:4])
    case = sys.argv[4]
    if case in ("cluster-start", "cluster-stop"):
        os.makedirs(work, exist_ok=True)
        c = Cluster(repo, work, train)
        (cluster_start if case == "cluster-start" else cluster_stop)(c)
        return 0
    if case not in CASES:
        sys.exit(f"unknown case {case}; one of {', '.join(CASES)}")
    work = os.path.join(work, case)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    c = Cluster(repo, work, train)
    why = c.up()
    if why:
        if os.environ.get("GRIDNN_REQUIRE_SLURM") == "1":
            print(f"FAIL ({case}): GRIDNN_REQUIRE_SLURM=1 but {why}")
            return 1
        print(f"skipped: {why}")
        return 77
    c.write_probe()
    start = time.time()
    try:
        what = CASES[case](c)
    except Failure as e:
        print(f"FAIL ({case}): {e}")
        return 1
    print(f"ok: {what} ({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
