"""Accuracy per kernel x dtype x causal, against the float64 reference.

One case per run (``shape`` and ``dist`` parameters: B=1, H=2, N=1024, d=64,
standard-normal inputs, seed 0); the Triton kernel runs under the interpreter where
there is no GPU: accuracy is what it would be on the GPU, time is never taken from
it. Every number is computed once per run in setup_cache by
flashbench.measure.measure_accuracy; each track_ returns one of them.

The grid is written out here, not read from flashbench: asv re-imports this module
in each commit's environment and addresses a combination by its index in the grid,
so the grid must be the same for every commit. tests/test_benchmarks.py holds it
equal to flashbench's registries (every backend but the float64 reference; every
modelled dtype but fp64), so a new dtype or backend cannot be left out silently.

Units: errors are unitless (|O - O_ref| of unit-variance data); the baseline ratio
is kernel error / same-dtype standard_model error (the rule passes at <= 2).
asv treats higher as worse, which fits every number here.
"""

from .common import need, shape_of

KERNELS = ["flash_model", "torch-naive", "torch-sdpa", "triton"]
DTYPES = ["fp32", "tf32", "fp16", "bf16"]
SHAPES = ["1x2x1024x1024x64"]
DISTS = ["normal"]


def _not_applicable() -> list[tuple]:
    """Grid points whose backend does not take the dtype (from the backend registry):
    asv's ``skip_params`` skips them without running setup, and says so."""
    try:
        backends = need("backends", "BACKENDS")
    except NotImplementedError:
        return []
    return [(k, d, c, s, dist) for k in KERNELS if k in backends for d in DTYPES
            if d not in backends[k].dtypes for c in (False, True) for s in SHAPES
            for dist in DISTS]


def _field(rec, name):
    """A record's field: measure's dataclasses, or the dicts older commits returned."""
    return rec[name] if isinstance(rec, dict) else getattr(rec, name)


class TrackAccuracy:
    params = (KERNELS, DTYPES, [False, True], SHAPES, DISTS)
    param_names = ["kernel", "dtype", "causal", "shape", "dist"]
    skip_params = _not_applicable()
    timeout = 900

    def setup_cache(self):
        try:
            Case, measure = need(("measure", "check"), "Case", "measure_accuracy")
            backends = need("backends", "BACKENDS")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            for causal in (False, True):
                case = Case(shape_of(shape), "normal", causal)
                kernels = [k for k in KERNELS if k == "flash_model" or k in backends]
                found = measure(case, DTYPES, kernels)
                if isinstance(found, dict):  # older commits: {(kernel, dtype): dict or str}
                    found = [(kernel, dtype, rec) for (kernel, dtype), rec in found.items()]
                else:
                    found = [(r.kernel, r.dtype, getattr(r, "reason", r)) for r in found]
                for kernel, dtype, rec in found:
                    results[(kernel, dtype, causal, shape)] = rec
        return results

    def setup(self, results, kernel, dtype, causal, shape, dist):
        rec = results.get((kernel, dtype, causal, shape))
        if rec is None:
            rec = results.get("missing", f"no record for {kernel} {dtype} in this commit")
        if isinstance(rec, str):
            raise NotImplementedError(rec)
        self.rec = rec

    def track_o_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_rmse(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["rmse"]

    track_o_rmse.unit = "RMSE of O vs fp64"

    def track_o_rel_p99(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["rel_p99"]

    track_o_rel_p99.unit = "p99 relative error of O"

    def track_lse_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "lse")["max_abs"]

    track_lse_max_abs.unit = "max |LSE - LSE_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o_ratio")

    track_o_baseline_ratio.unit = "x standard_model error (O max abs)"

    def track_lse_baseline_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "lse_ratio")

    track_lse_baseline_ratio.unit = "x standard_model error (LSE max abs)"
