"""Accuracy at the head dims real models use (issue 37): d = 80 (Phi-2), 96 (Phi-3-mini) and
192/128 (DeepSeek's MLA prefill: d_qk = 192, d_v = 128), per commit.

TrackHeadDimAccuracy: one causal case per shape (B=1, H=2, N=256, standard-normal inputs,
seed 0) in fp32 and bf16, for the flash model, the Triton kernel (padded to its compiled
width; interpreted without a GPU) and torch's SDPA, measured once per run in setup_cache by
flashbench.measure.measure_accuracy as bench_accuracy's TrackAccuracy is (a class of its
own, so TrackAccuracy's series go on unchanged). A commit before these head dims existed
gives an Unavailable record (skipped with its reason) or a Failed one (FAIL). Units and
rules: docs/asv.md ("Suites"), docs/bands.md ("Head dims").
"""

from .common import known_dtypes as _known
from .common import need, record_or_raise, shape_of
from .common import record_field as _field

KERNELS = ["flash_model", "triton", "torch-sdpa"]
DTYPES = ["fp32", "bf16"]
SHAPES = ["1x2x256x256x80", "1x2x256x256x96", "1x2x256x256x192/128"]
DISTS = ["normal"]


class TrackHeadDimAccuracy:
    params = (KERNELS, DTYPES, [True], SHAPES, DISTS)
    param_names = ["kernel", "dtype", "causal", "shape", "dist"]
    timeout = 900

    def setup_cache(self):
        try:
            Case, measure = need(("measure", "check"), "Case", "measure_accuracy")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            try:
                case = Case(shape_of(shape), "normal", True)
            except ValueError as exc:  # a commit whose Shape reads no d/dv
                results[shape] = f"this commit cannot read shape {shape}: {exc}"
                continue
            for rec in measure(case, _known(DTYPES), KERNELS):
                results[(rec.kernel, rec.dtype, True, shape)] = rec
        return results

    def setup(self, results, kernel, dtype, causal, shape, dist):
        rec = results.get((kernel, dtype, causal, shape), results.get(shape))
        if rec is None:
            rec = results.get("missing", f"no record for {kernel} {dtype} in this commit")
        self.rec = record_or_raise(rec, f"{kernel} {dtype} ({shape} causal)")

    def track_o_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o_ratio")

    track_o_baseline_ratio.unit = "x standard_model error (O max abs)"

    def track_o_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o_band_ratio")

    track_o_band_ratio.unit = "ratio"
