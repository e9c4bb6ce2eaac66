"""flashbench's asv suites (see benchmarks/common.py).

Thread pools: unless the environment says otherwise, the measured code runs its
OpenMP / OpenBLAS / MKL pools (numpy's BLAS and torch's CPU kernels) with ONE thread.
On a shared 2-CPU machine a second BLAS thread stretches a 30 ms streamed call up to
0.7 s at random (measured while building `flashbench review`), which no number of
samples can average away; one thread keeps timings repeatable. These variables are
read when numpy and torch load, so they are set here, in the package every suite
imports first. Set them before running asv to measure with more threads.

Loading a suite imports no torch (skip_params are literal: common.BACKEND_DTYPES), so
asv's discovery and the review's listing save its import. asv's forkserver (the process
started as ``run_server``) forks one process per grid point from the process that loaded
the suites: there torch is imported here, once, as before, not in every grid point that
uses it (~1.1 s of CPU each). Importing torch initialises no CUDA.
"""

import importlib.util
import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

if sys.argv[1:2] == ["run_server"] and importlib.util.find_spec("torch") is not None:
    import torch  # noqa: F401
