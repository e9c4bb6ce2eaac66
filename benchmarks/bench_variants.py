"""The attention variants (sliding window, softcap, sinks, packed varlen): accuracy per kernel
x dtype x variant, and CPU time of the float64 reference with each.

``variant`` is a parameter naming the case's variant in the text ``flashbench check``
prints (``causal window=(128,0)``, ``softcap=30``, ``sinks``: one seeded N(0, 1) + log(N) - 2
logit per head, ``varlen 512,1000,77``: a packed batch of three sequences with the shape's H and
d); :data:`VARIANTS` maps it to the keywords of flashbench.measure's ``Case``. Accuracy
comes from flashbench.measure (``measure_accuracy``, ``measure_varlen``) in setup_cache,
as in bench_accuracy; a kernel that does not take a variant is declared in skip_params
(:data:`NOT_TAKEN`, literal, held to the registry by a test), never skipped from setup.
Commits without the variants skip.
Units (errors unitless; baseline ratio <= 2; band ratio <= 1, against the band of the flash
model run with the variant, NaN where not judged by it; seconds per call): docs/asv.md.
"""

from .common import Benchmark, FreshCalls, need, record_or_raise, shape_of, verify

VARIANTS = {"causal window=(128,0)": {"causal": True, "window": (128, 0)},  # == VARIANT_SET
            "softcap=30": {"softcap": 30.0}, "sinks": {"sinks": True},
            "varlen 512,1000,77": {"varlen": (512, 1000, 77)}}
KERNELS = ["flash_model", "torch-naive", "triton"]
DTYPES = ["fp32", "fp16", "bf16"]
SHAPES = ["1x2x1024x1024x64"]


# (kernel, variant) pairs that do not apply: a backend without the variant's keyword or
# without a packed-batch entry (``Backend.varlen``); literal, so that importing this module
# imports no torch (tests/test_variants_check.py holds it to the registry)
NOT_TAKEN = [("torch-naive", "varlen 512,1000,77")]


def _not_applicable() -> list[tuple]:
    """:data:`NOT_TAKEN` at every dtype and shape, for asv's ``skip_params``."""
    return [(kernel, d, name, s) for kernel, name in NOT_TAKEN for d in DTYPES for s in SHAPES]


class TrackVariantAccuracy:
    params = (KERNELS, DTYPES, list(VARIANTS), SHAPES)
    param_names = ["kernel", "dtype", "variant", "shape"]
    skip_params = _not_applicable()
    timeout = 900

    def setup_cache(self):
        try:
            Case, measure = need("measure", "Case", "measure_accuracy")
            measure_varlen = need("measure.varlen", "measure_varlen")
        except NotImplementedError as exc:  # a commit without the variants: every one skips
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            for name, kw in VARIANTS.items():
                case = Case(shape_of(shape), "normal", **kw)
                run = measure_varlen if "varlen" in kw else measure
                for rec in run(case, DTYPES, KERNELS):
                    results[(rec.kernel, rec.dtype, name, shape)] = rec
        return results

    def setup(self, results, kernel, dtype, variant, shape):
        rec = results.get((kernel, dtype, variant, shape))
        if rec is None:
            rec = results.get("missing", f"no record for {kernel} {dtype} {variant}")
        self.rec = record_or_raise(rec, f"{kernel} {dtype} ({shape} {variant})")

    def track_o_max_abs(self, results, kernel, dtype, variant, shape):
        return self.rec.o["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, variant, shape):
        return self.rec.o_ratio

    track_o_baseline_ratio.unit = "x standard_model error (O max abs)"

    def track_lse_baseline_ratio(self, results, kernel, dtype, variant, shape):
        if self.rec.lse_ratio is None:
            raise NotImplementedError(f"LSE {self.rec.lse_note}")
        return self.rec.lse_ratio

    track_lse_baseline_ratio.unit = "x standard_model error (LSE max abs)"

    def track_o_band_ratio(self, results, kernel, dtype, variant, shape):
        return _band_ratio(self.rec, "o_band_ratio")

    track_o_band_ratio.unit = "ratio"

    def track_lse_band_ratio(self, results, kernel, dtype, variant, shape):
        return _band_ratio(self.rec, "lse_band_ratio")

    track_lse_band_ratio.unit = "ratio"


def _band_ratio(rec, name: str) -> float:
    """A record's band-rule ratio, NaN where it has none (module docstring: not applicable;
    raising in a track would record a failure)."""
    value = getattr(rec, name, None)
    return float("nan") if value is None else float(value)


class TimeVariantReference(Benchmark):
    """The float64 reference at N = 4096, d = 64, B = H = 1 with each variant: one-shot
    (materialises the scores) and streamed (block = 64, skipping key blocks a window hides:
    its time grows with the window, not with N)."""

    params = (["1x1x4096x4096x64"], ["fp64"],
              ["causal window=(256,0)", "causal window=(1024,0)", "softcap=30", "sinks"],
              ["one-shot", "streamed"])
    param_names = ["shape", "dtype", "variant", "impl"]
    number = 1
    KEYWORDS = {"causal window=(256,0)": {"causal": True, "window": (256, 0)},
                "causal window=(1024,0)": {"causal": True, "window": (1024, 0)},
                "softcap=30": {"softcap": 30.0}, "sinks": {"sinks": [0.5]}}

    def setup(self, shape, dtype, variant, impl):
        fn = need("reference", "attention" if impl == "one-shot" else "online_attention")
        need("inputs.variant", "Variant")  # commits without the variants skip
        self.call = FreshCalls(shape, fn, fresh=1, **self.KEYWORDS[variant])  # k

    def time_attention(self, shape, dtype, variant, impl):
        self.call()

    def teardown(self, shape, dtype, variant, impl):
        verify(self)
