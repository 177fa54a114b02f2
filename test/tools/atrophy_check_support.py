"""What the atrophy scripts' CTest checks share: the skip-or-fail rule for a machine without
their tools, and a list of failed checks.

A test that cannot run (numpy, scipy or nibabel missing, or mricron-data's templates) exits
77, which CTest reports as skipped, unless GRIDNN_REQUIRE_PARITY=1 (set by CI): then it fails.
"""
import os
import sys

TEMPLATES = "/usr/share/mricron/templates"


def missing(test, what):
    if os.environ.get("GRIDNN_REQUIRE_PARITY", "0") == "1":
        print(f"error: GRIDNN_REQUIRE_PARITY=1 but the {test} test cannot run ({what}); run scripts/setup.sh",
              file=sys.stderr)
        sys.exit(1)
    print(f"skipping: {what}; run scripts/setup.sh to enable this test", file=sys.stderr)
    sys.exit(77)


def require_tools(test):
    """Skips (or fails) `test` unless numpy, scipy, nibabel and the templates are here."""
    try:
        import nibabel  # noqa: F401
        import numpy  # noqa: F401
        import scipy.ndimage  # noqa: F401
        import scipy.stats  # noqa: F401
    except ImportError as e:
        missing(test, f"{sys.executable} cannot import numpy, scipy and nibabel ({e})")
    for f in ("ch2bet.nii.gz", "aal.nii.gz", "aal.nii.txt"):
        if not os.path.exists(os.path.join(TEMPLATES, f)):
            missing(test, f"{TEMPLATES}/{f} not found (Debian package mricron-data)")


failures = []


def check(cond, msg):
    """Prints and records one check; returns cond."""
    print(("ok:   " if cond else "FAIL: ") + msg)
    if not cond:
        failures.append(msg)
    return cond
