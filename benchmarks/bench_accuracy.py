"""Accuracy per kernel x dtype x causal, against the float64 reference.

Shape B=1, H=2, N=1024, d=64, standard-normal inputs, seed 0 (the Triton kernel
runs under the interpreter where there is no GPU: accuracy is what it would be on
the GPU, time is never taken from it). Every number is computed once per run in
setup_cache by flashbench.check.measure_accuracy; each track_ returns one of them.

Units: errors are unitless (|O - O_ref| of unit-variance data); the baseline ratio
is kernel error / same-dtype standard_model error (the rule passes at <= 2).
asv treats higher as worse, which fits every number here.
"""

from .common import need

SHAPE = (1, 2, 1024, 1024, 64)
KERNELS = ["flash_model", "torch-naive", "torch-sdpa", "triton"]
DTYPES = ["fp32", "tf32", "fp16", "bf16"]


class TrackAccuracy:
    params = (KERNELS, DTYPES, [False, True])
    param_names = ["kernel", "dtype", "causal"]
    timeout = 900

    def setup_cache(self):
        try:
            Case, measure = need("check", "Case", "measure_accuracy")
            Shape = need("inputs", "Shape")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for causal in (False, True):
            case = Case(Shape(*SHAPE), "normal", causal)
            for (kernel, dtype), rec in measure(case, DTYPES, KERNELS).items():
                results[(kernel, dtype, causal)] = rec
        return results

    def setup(self, results, kernel, dtype, causal):
        rec = results.get((kernel, dtype, causal),
                          results.get("missing", f"{kernel} does not take {dtype}"))
        if isinstance(rec, str):
            raise NotImplementedError(rec)
        self.rec = rec

    def track_o_max_abs(self, results, kernel, dtype, causal):
        return self.rec["o"]["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_rmse(self, results, kernel, dtype, causal):
        return self.rec["o"]["rmse"]

    track_o_rmse.unit = "RMSE of O vs fp64"

    def track_o_rel_p99(self, results, kernel, dtype, causal):
        return self.rec["o"]["rel_p99"]

    track_o_rel_p99.unit = "p99 relative error of O"

    def track_lse_max_abs(self, results, kernel, dtype, causal):
        return self.rec["lse"]["max_abs"]

    track_lse_max_abs.unit = "max |LSE - LSE_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, causal):
        return self.rec["o_ratio"]

    track_o_baseline_ratio.unit = "x standard_model error (O max abs)"

    def track_lse_baseline_ratio(self, results, kernel, dtype, causal):
        return self.rec["lse_ratio"]

    track_lse_baseline_ratio.unit = "x standard_model error (LSE max abs)"
