"""Error bands per kernel x dtype x N x dist x causal: p50 / p99 / max, per commit.

``track_o_abs`` returns one statistic (``stat``) of |O - O_fp64| (unitless) for one cell:
p50 and p99 over every element of every seed's output, pooled, or the max. Each comes from
:func:`flashbench.bands.measure_bands` (seeds x 256 query rows x d=64 per cell, float64
reference of the same dtype-rounded inputs), computed once per run in ``setup_cache``. A
change that widens a band raises its p99 or max: asv (higher is worse) and ``flashbench
history`` (:mod:`flashbench.history.bands`) show it. The seeds are fixed, so a commit that
does not change the numerics records the same numbers; :data:`SEEDS` is enough to see a
change, not to make a heavy-tailed cell's max the tolerance table's (64 seeds). The grid is
lean and literal (asv addresses a point by its index, the same for every commit;
tests/test_bands.py holds it to flashbench's registries); the points not measured are in
``skip_params``, literal so that importing this module imports no torch. Commits without
flashbench.bands skip. The grid, its cost and why: docs/bands.md ("asv: the bands per commit").
"""

from .common import need

KERNELS = ["flash_model", "triton"]
DTYPES = ["fp32", "fp16", "bf16", "fp8"]
NS = [256, 1024, 4096]
DISTS = ["normal", "outliers", "large-logits"]
CAUSAL = [False, True]
STATS = ["p50", "p99", "max"]
SEEDS = 4
CAUSAL_N = [1024]  # the flash model's causal cells
TRITON_N = [256]
TRITON_DTYPES = ["fp32", "fp16", "bf16"]  # the backend's dtypes (tests/test_bands.py)
TRITON_SEEDS = 2


def _measured(kernel: str, dtype: str, n: int, causal: bool) -> bool:
    if kernel == "triton":
        return dtype in TRITON_DTYPES and n in TRITON_N
    return not causal or n in CAUSAL_N


def _not_applicable() -> list[tuple]:
    """Grid points asv skips without running setup (module docstring)."""
    return [(k, d, n, dist, c, s) for k in KERNELS for d in DTYPES for n in NS for dist in DISTS
            for c in CAUSAL for s in STATS if not _measured(k, d, n, c)]


class TrackBands:
    params = (KERNELS, DTYPES, NS, DISTS, CAUSAL, STATS)
    param_names = ["kernel", "dtype", "N", "dist", "causal", "stat"]
    skip_params = _not_applicable()
    timeout = 1200

    def setup_cache(self):
        try:
            measure, band_dtypes = need("bands", "measure_bands", "band_dtypes")
            backends = need("backends", "BACKENDS")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        dtypes = [d for d in DTYPES if d in band_dtypes()]
        found = measure(dtypes=dtypes, ns=NS, dists=DISTS, causal=[False], seeds=SEEDS)
        found += measure(dtypes=dtypes, ns=CAUSAL_N, dists=DISTS, causal=[True], seeds=SEEDS)
        triton = backends.get("triton")
        if triton is not None and triton.unavailable() is None:
            found += measure(dtypes=[d for d in TRITON_DTYPES if d in triton.dtypes],
                             ns=TRITON_N, dists=DISTS, causal=CAUSAL, seeds=TRITON_SEEDS,
                             kernels=("triton",))
        return {(b.kernel, b.dtype, b.n, b.dist, b.causal):
                {s: getattr(b, f"abs_{s}") for s in STATS}
                for b in found if b.versus == "fp64" and b.tensor == "o" and b.kernel in KERNELS}

    def setup(self, results, kernel, dtype, N, dist, causal, stat):
        entry = results.get((kernel, dtype, N, dist, causal))
        if entry is None:
            raise NotImplementedError(results.get(
                "missing", f"no {kernel} band for {dtype} in this commit"))
        self.entry = entry

    def track_o_abs(self, results, kernel, dtype, N, dist, causal, stat):
        return self.entry[stat]

    track_o_abs.unit = "|O - O_fp64| (unitless)"
