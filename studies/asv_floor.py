"""How close do honest CPU kernels come to the asv suites' floor (benchmarks/floor.py)?

Every CPU ``time_`` grid point at HEAD, as asv runs one: setup, 3 timed calls, teardown
(which judges the floor); prints each judged point's fastest call over its floor (512^3
peaks, one BLAS/torch thread as the suites run) and the smallest ratio. A point fails
below 0.5. Run from the repository root: ``python -m studies.asv_floor`` (~6 min here).
"""

import itertools
import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")


def main() -> int:
    sys.path.insert(0, ".")
    from asv_runner.discovery import disc_benchmarks

    from benchmarks import floor

    ratios = []
    for b in disc_benchmarks("benchmarks"):
        if b.type != "time" or "gpu" in b.name.lower():
            continue
        for i, combo in enumerate(itertools.product(*b._params) if b._params else [()]):
            if tuple(combo) in b._skip_tuples:
                continue
            if b._params:
                b.set_param_idx(i)
            params = b._build_params()
            try:
                for setup in b._setups:
                    setup(*params)
            except NotImplementedError:
                continue
            for _ in range(3):
                b.func(*params)
            call = getattr(getattr(b.func, "__self__", None), "call", None)
            work = getattr(call, "work", None)
            try:
                for teardown in b._teardowns:
                    teardown(*params)
                status = "ok"
            except Exception as exc:  # noqa: BLE001 - reported, the survey goes on
                status = f"FAILED: {exc}"[:300]
            if work is None:
                print(f"  not judged  {b.name}{combo} {status}", flush=True)
                continue
            peak, bandwidth = floor.roofline(512, None)
            ratio = call.fastest / max(work[0] / peak, work[1] / bandwidth)
            ratios.append((ratio, b.name, combo))
            print(f"{ratio:8.2f} x floor {call.fastest * 1e3:9.2f} ms  {b.name}{combo} {status}",
                  flush=True)
    if ratios:
        ratio, name, combo = min(ratios)
        print(f"smallest: {ratio:.2f} x floor, {name}{combo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
