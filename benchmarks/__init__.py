"""flashbench's asv suites (see benchmarks/common.py).

Thread pools: unless the environment says otherwise, the measured code runs its
OpenMP / OpenBLAS / MKL pools (numpy's BLAS and torch's CPU kernels) with ONE thread.
On a shared 2-CPU machine a second BLAS thread stretches a 30 ms streamed call up to
0.7 s at random (measured while building `flashbench review`), which no number of
samples can average away; one thread keeps timings repeatable. These variables are
read when numpy and torch load, so they are set here, in the package every suite
imports first. Set them before running asv to measure with more threads.
"""

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
