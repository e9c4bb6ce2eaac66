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


class TrackVariantReference:
    """The float64 reference under each variant against attention computed here
    (``common.attention_row``: numpy and scipy, never the commit's flashbench), on the
    inputs the variant's case draws; and those inputs (q, k, v, and the sinks) against the
    suite's own draws of them (N(0, 1) from seed 0; a softcap c's q and k times
    sqrt(max(1, c / 4)); sinks N(0, 1) from seed 2 + log(N) - 2). TrackReference holds plain
    attention alone: a head whose reference took the softcap's tanh in float32, or whose
    softcap case drew N(0, 1) q and k again, read kernels' rows worse with nothing naming the
    truth or the inputs (a red team, 2026-12-08). Each error over the exactness tolerance
    (1e-12 x max(1, the largest |value|)): at most 1 passes; 0.01 where below that."""

    params = (["causal window=(128,0)", "softcap=30", "sinks"], SHAPES)
    param_names = ["variant", "shape"]
    FLOOR = 0.01

    def setup_cache(self):
        import numpy as np

        from .common import attention_row

        try:
            Case = need("measure", "Case")
            attention = need("reference", "attention")
            need("inputs.problem", "softcap_gain", "sink_logits")  # the draws of 2026-12-08
        except NotImplementedError as exc:
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            b, h, nq, nk, d = (int(x) for x in shape.split("x"))
            rng = np.random.default_rng(0)  # make_qkv's "normal": q, k, v drawn in turn
            draws = [rng.standard_normal((b, h, n, d)) for n in (nq, nk, nk)]
            for name in self.params[0]:
                case = Case(shape_of(shape), "normal", **VARIANTS[name])
                got, kw = case.qkv(0), case.kwargs(0)
                gain = np.sqrt(max(1.0, kw["softcap"] / 4)) if "softcap" in kw else 1.0
                want = [draws[0] * gain, draws[1] * gain, draws[2]]
                if "sinks" in kw:
                    got = [*got, kw["sinks"]]
                    want.append(np.random.default_rng(2).standard_normal(h) + np.log(nk) - 2)
                inputs = max(_over(x, t) for x, t in zip(got, want, strict=True))
                q, k, v = got[:3]
                here = np.stack([attention_row((q, k, v), r, **kw) for r in range(nq)], -2)
                results[(name, shape)] = {"inputs": inputs,
                                          "o": _over(attention(q, k, v, **kw)[0], here)}
        return results

    def setup(self, results, variant, shape):
        if "missing" in results:
            raise NotImplementedError(results["missing"])
        self.errors = results[(variant, shape)]

    def track_reference_o_exactness(self, results, variant, shape):
        return self.errors["o"]

    track_reference_o_exactness.unit = ("max |O_reference - O_here| / (1e-12 x max(1, max |O|))"
                                        ", 0.01 where below")

    def track_inputs_exactness(self, results, variant, shape):
        return self.errors["inputs"]

    track_inputs_exactness.unit = ("max |the case's q, k, v, sinks - the suite's draws| / (1e-12 "
                                   "x max(1, max |value|)), 0.01 where below")


def _over(got, want) -> float:
    """max |got - want| over the exactness tolerance, 1e-12 x max(1, max |want|);
    TrackVariantReference.FLOOR where below it, inf where not finite or of another shape."""
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    err = float(np.max(np.abs(got - want)))
    tol = 1e-12 * max(1.0, float(np.max(np.abs(want))))
    return max(TrackVariantReference.FLOOR, err / tol) if np.isfinite(err) else float("inf")


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
