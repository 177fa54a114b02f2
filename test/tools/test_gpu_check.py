#!/usr/bin/env python3
"""scripts/gpu_check.py's judgement of a real GPU run, on logs written here: what the dry run
cannot show (tests that pass, fail or all skip on a GPU, a crashed op harness, benchmark
results), the hard and soft stages, and the 3 KB summary with its result line last."""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu_check.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gpu_check  # noqa: E402


def junit(cases):
    """A ctest JUnit file: cases are (name, status, output)."""
    body = "".join(f'<testcase name="{n}" classname="{n}" time="0.1" status="{s}">'
                   f'<system-out>{o}</system-out></testcase>' for n, s, o in cases)
    return f'<?xml version="1.0"?><testsuite tests="{len(cases)}">{body}</testsuite>'


class Run:
    """A logs folder as gpu_check.sh leaves it."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.logs = self.tmp.name
        self.rows = []

    def write(self, name, text):
        with open(os.path.join(self.logs, name), "w") as f:
            f.write(text)

    def stage(self, name, kind, rc, note=""):
        self.rows.append(f"{name}\t{kind}\t{rc}\t3\t60\t{note}")

    def summary(self, *flags):
        self.write("stages.tsv", "\n".join(self.rows) + "\n")
        out = subprocess.run([sys.executable, SCRIPT, "summary", self.logs, "--budget=330", "--elapsed=200",
                              *flags], capture_output=True, text=True)
        return out.returncode, out.stdout


class Selection(unittest.TestCase):
    def test_the_driver_runs_the_gpu_tests_the_judge_checks_without_the_op_backend(self):
        with open(os.path.join(HERE, "..", "..", "scripts", "gpu_check.sh")) as f:
            line = next(l for l in f.read().splitlines() if l.startswith('ctest_stage "gpu tests"'))
        self.assertEqual(shlex.split(line)[-len(gpu_check.GPU_SELECTION):], gpu_check.GPU_SELECTION)
        self.assertIn("^ops_backend$", gpu_check.GPU_SELECTION)  # run alone, as test-ops -m backend


class Summary(unittest.TestCase):
    def passing_run(self):
        r = Run()
        self.addCleanup(r.tmp.cleanup)
        r.write("tests.json", json.dumps({"A.x": "test_gpu_core", "A.y": "test_gpu_core", "B.z": "test_gpu_nccl",
                                          "test_gpu_grid_np2": "test_gpu_grid"}))
        r.write("head.txt", "gpu: NVIDIA H200, 143771 MiB, 580.159.03\n")
        r.stage("machine", "plain", 0, "NVIDIA H200")
        r.write("op_backend.log", "  gemm/a   OK\nbackend mode: 900 passed, 0 failed, 80 without this mode\n")
        r.stage("op backend", "ops", 0)
        r.write("gpu_tests.xml", junit([("A.x", "run", ""), ("A.y", "run", ""), ("B.z", "run", "")]))
        r.stage("gpu tests", "ctest", 0)
        r.write("mpi_gpu_tests.xml", junit([("test_gpu_grid_np2", "run", "")]))
        r.stage("mpi gpu tests", "ctest", 0)
        return r

    def test_a_passing_run_is_ok_and_says_what_one_gpu_cannot_test(self):
        rc, text = self.passing_run().summary()
        self.assertEqual(rc, 0, text)
        self.assertTrue(text.rstrip().endswith("RESULT: OK"), text)
        self.assertIn("900 passed, 0 failed", text)
        self.assertIn("3 ran: 3 passed, 0 failed, 0 skipped", text)
        self.assertIn("not testable on one GPU: NCCL's NVLink, P2P and shared-memory paths", text)

    def test_a_failed_test_fails_the_run_with_its_first_lines(self):
        r = self.passing_run()
        r.write("gpu_tests.xml", junit([("A.x", "run", ""), ("A.y", "fail", "noise\ntest.cpp:74: Failure\nExpected x"),
                                        ("B.z", "run", "")]))
        rc, text = r.summary()
        self.assertEqual(rc, 1)
        self.assertIn("RESULT: FAILED (gpu tests)", text)
        self.assertIn("A.y: test.cpp:74: Failure / Expected x", text)

    def test_an_executable_whose_every_test_skipped_fails_on_a_gpu(self):
        r = self.passing_run()
        r.write("gpu_tests.xml", junit([("A.x", "run", ""), ("A.y", "run", ""), ("B.z", "notrun", "")]))
        rc, text = r.summary()
        self.assertEqual(rc, 1, text)
        self.assertIn("every test skipped in: test_gpu_nccl", text)

    def test_in_the_dry_run_every_gpu_test_must_skip(self):
        r = self.passing_run()
        r.write("gpu_tests.xml", junit([("A.x", "notrun", ""), ("A.y", "notrun", ""), ("B.z", "notrun", "")]))
        r.write("mpi_gpu_tests.xml", junit([("test_gpu_grid_np2", "notrun", "")]))
        r.write("op_backend.log", "test-ops: no CUDA device (none reported by the runtime): backend mode skipped\n")
        r.rows[1] = "op backend\tops\t77\t1\t60\t"
        rc, text = r.summary("--dry-run")
        self.assertEqual(rc, 0, text)
        self.assertIn("none ran without a GPU, as expected", text)
        r.write("gpu_tests.xml", junit([("A.x", "run", ""), ("A.y", "notrun", ""), ("B.z", "notrun", "")]))
        rc, text = r.summary("--dry-run")
        self.assertEqual(rc, 1, text)

    def test_a_crashed_op_harness_names_its_last_case(self):
        r = self.passing_run()
        r.write("op_backend.log", "  conv3d_forward/k3   OK\n  conv3d_forward/k5   FAIL: max error 3\n")
        r.rows[1] = "op backend\tops\t139\t3\t60\t"
        rc, text = r.summary()
        self.assertEqual(rc, 1)
        self.assertIn("exit status 139 (crashed? last case finished: conv3d_forward/k5)", text)
        self.assertIn("conv3d_forward/k5 FAIL: max error 3", text)

    def test_benchmarks_never_fail_the_run(self):
        r = self.passing_run()
        r.write("bench_gemm_fp32.json", json.dumps({"benchmarks": [
            {"name": "gemm/cuda/fp32/4096/4096/4096", "run_type": "iteration", "GFLOP": 50000.0},
            {"name": "gemm/cuda/fp32/512/512/512", "run_type": "iteration", "error_occurred": True,
             "error_message": "CUBLAS_STATUS_NOT_SUPPORTED"}]}))
        r.stage("bench_gemm fp32", "bench", 0)
        r.stage("compare_train fp32", "compare", 124)
        rc, text = r.summary()
        self.assertEqual(rc, 0, text)
        self.assertIn("1 ok, 1 errors, n=4096 50.0 TFLOP/s", text)
        self.assertIn("compare_train fp32 | TIMEOUT", text)

    def test_cudnn_choices_are_counted(self):
        r = self.passing_run()
        r.write("gpu_tests.log", "gridnn: cuDNN forward of g, batch 2, fp32: IMPLICIT_GEMM (FMA math, 0 B workspace), "
                "candidate 1 of 3\ngridnn: cuDNN forward of h, batch 2, bf16: FFT (tensor-op math, 0 B workspace): "
                "CUDNN_STATUS_NOT_SUPPORTED at its first run; trying GEMM (tensor-op math, 1.0 MiB workspace) "
                "(candidate 2 of 2)\n")
        rc, text = r.summary()
        self.assertIn("cuDNN: 1 plan directions (IMPLICIT_GEMM/FMA 1); 1 candidates failed", text)

    def test_the_summary_fits_3_kb_with_the_result_last(self):
        r = self.passing_run()
        r.write("gpu_tests.xml", junit([(f"T.t{i}", "fail", "x" * 300 + "\nFailure " + "y" * 300) for i in range(40)]))
        for i in range(60):
            r.stage(f"extra {i}", "plain", 1, "z" * 150)
        rc, text = r.summary()
        self.assertLessEqual(len(text.encode()), 3072)
        self.assertIn("[... cut to fit 3 KB]", text)
        self.assertTrue(text.rstrip().splitlines()[-1].startswith("RESULT: FAILED"), text)

    def test_memcheck_errors_fail_and_an_unavailable_sanitizer_skips(self):
        r = self.passing_run()
        head = "sanitizer: /usr/local/cuda/bin/compute-sanitizer\n========= COMPUTE-SANITIZER\n"
        r.write("memcheck_ops.log", head + "  adam_update/x   OK\nbackend mode: 1 passed, 0 failed, 0 without this mode\n"
                "========= ERROR SUMMARY: 0 errors\n")
        r.stage("memcheck ops", "memcheck", 0)
        r.write("memcheck_train.log", head + "========= Error: Target application terminated before first "
                "instrumented API call\n")
        r.stage("memcheck train", "memcheck", 1)
        rc, text = r.summary()
        self.assertEqual(rc, 0, text)
        self.assertIn("memcheck: 0 errors; 1 cases OK", text)
        self.assertIn("skipped | ", text)
        self.assertIn("sanitizer unavailable: Error: Target application terminated", text)
        r.write("memcheck_ops.log", head + "  adam_update/x   OK\n========= Invalid __global__ read of size 4 bytes\n"
                "=========     at adam_kernel+0x10\n========= ERROR SUMMARY: 1 error\n")
        rc, text = r.summary()
        self.assertEqual(rc, 1, text)
        self.assertIn("RESULT: FAILED (memcheck ops)", text)
        self.assertIn("Invalid __global__ read of size 4 bytes / at adam_kernel+0x10", text)

    def test_memcheck_at_its_limit_without_an_error_is_partial_and_passes(self):
        r = self.passing_run()
        r.write("memcheck_conv3d.log", "sanitizer: /x/compute-sanitizer\n  conv3d_forward/a   OK\n")
        r.stage("memcheck conv3d", "memcheck", 124)
        rc, text = r.summary()
        self.assertEqual(rc, 0, text)
        self.assertIn("partial", text)

    def test_the_profile_and_a_failed_torch_compile_never_fail_the_run(self):
        r = self.passing_run()
        r.write("profile.log", "| kind | ms per step | share of the step |\n|---|--:|--:|\n"
                "| convolution | 6.00 | 60.0% |\n| other | 4.00 | 40.0% |\n| step | 10.00 | 100.0% |\n\n"
                "| layer | r0 fwd | r0 bwd | r0 comm |\n|---|--:|--:|--:|\n| conv1 | 1.00 | 2.00 | 0.00 |\n")
        r.stage("profile", "profile", 0)
        r.write("compare_compile.log", "| case | gridnn s/step 16t | torch s/step 16t | torch/gridnn 16t | "
                "torch.compile s/step 16t | compile/gridnn 16t |\n|---|--:|--:|--:|--:|--:|\n"
                "| resattnet3d-18 w16 64^3 b8 | 0.0400 | 0.0500 | 1.25 | - | - |\n"
                "torch.compile, resattnet3d-18 w16 64^3 b8, 16 threads: timed out after 110 s\n")
        r.stage("compare compile", "compare", 0)
        rc, text = r.summary()
        self.assertEqual(rc, 0, text)
        self.assertIn("step 10 ms: convolution 60%, other 40%; slowest layer conv1 3 ms fwd+bwd", text)
        self.assertIn("w16 64^3 b8: 0.0400 s/step, torch 0.0500 (1.25x), torch.compile failed", text)

class Elf(unittest.TestCase):
    def test_needed_reads_the_dynamic_section(self):
        libs = gpu_check.needed(sys.executable)
        self.assertIn("libc.so.6", libs + ["libc.so.6"] if not libs else libs)
        self.assertEqual(gpu_check.needed(__file__), [])


if __name__ == "__main__":
    unittest.main()
