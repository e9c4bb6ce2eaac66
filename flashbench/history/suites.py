"""The one module of flashbench that knows flashbench's own asv suites by name.

The rest of :mod:`flashbench.history` reads what a result says about itself (name, unit,
parameters such as ``shape``); this module adds what names and old results cannot say:
- :data:`ACCURACY`: the accuracy tracks (forward, gradients, FP8, attention variants,
  bands, decode) and the metric each records; :data:`MAIN_METRIC` the one plotted and
  tabled (max |O - O_fp64|), :data:`ACCURACY_LABELS` the parameters that label its rows;
  :func:`rule_limit`: a rule-ratio track's limit (baseline 2, gradient 3, band rule 1).
- :data:`BANDS`: the ``TrackBands`` tracks, read by :mod:`flashbench.history.bands`;
  :func:`matmul_peak`: the matmul-peak timing (2 n^3 FLOPs), under its names old and new;
  :data:`BACKEND_COLUMNS`: the parameters that name what a timing ran.
- :func:`role`: a result that judges no flashbench code, a peer's (torch's own attention,
  for information as in ``check``) or a study's; the review never fails the gate on it.
- :data:`LEGACY`: the suites before they recorded ``shape`` and ``dtype``, their parameter
  names and the shape each ran (docs/history.md, "Throughput from what a result says").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from flashbench.accuracy import BAND_LIMIT, BASELINE_FACTOR, GRAD_FACTOR
from flashbench.inputs.problem import Shape

__all__ = ["ACCURACY", "BANDS", "RULE_LIMITS", "BAND_PAIRS", "rule_limit", "MAIN_METRIC",
           "ACCURACY_LABELS",
           "BACKEND_COLUMNS", "LEGACY", "PEERS", "STUDIES", "role",
           "accuracy_metric", "is_matmul_peak", "matmul_peak", "legacy_param_names",
           "legacy_shaped", "legacy_problem"]

ACCURACY = re.compile(r"(?:TrackAccuracy|TrackGradAccuracy|TrackFP8Accuracy|TrackBands"
                      r"|TrackDecodeAccuracy|TrackDecodeMerge|TrackVariantAccuracy"
                      r"|TrackMLADecodeAccuracy|TrackHeadDimAccuracy|TrackStandardModel"
                      r"|TrackStandardBackward|TrackReference|TrackVariantReference)"
                      r"\.track_(?P<metric>\w+)$")
# the tolerance-bands suite: a band edge per dtype x N x dist x causal x stat (p50/p99/max)
BANDS = re.compile(r"TrackBands\.track_(?P<tensor>o|lse)_(?P<metric>abs|rel|ratio)$")
# rule-ratio tracks: kernel error / same-dtype standard error, and the factor of their rule
RULE_LIMITS = {"o_baseline_ratio": BASELINE_FACTOR, "lse_baseline_ratio": BASELINE_FACTOR,
               "dq_ratio": GRAD_FACTOR, "dk_ratio": GRAD_FACTOR, "dv_ratio": GRAD_FACTOR,
               **{f"{t}_band_ratio": BAND_LIMIT for t in ("o", "lse", "dq", "dk", "dv")},
               # the float64 reference's error over the exactness tolerance (TrackReference,
               # TrackVariantReference)
               "reference_o_exactness": 1.0, "reference_lse_exactness": 1.0,
               "inputs_exactness": 1.0}
# the band rule's ratio beside each baseline-rule ratio (history tables and plots)
BAND_PAIRS = {"o_baseline_ratio": "o_band_ratio", "lse_baseline_ratio": "lse_band_ratio",
              "dq_ratio": "dq_band_ratio", "dk_ratio": "dk_band_ratio",
              "dv_ratio": "dv_band_ratio"}
MAIN_METRIC = "o_max_abs"  # track_o_max_abs: max |O - O_fp64| (unitless)
ACCURACY_LABELS = ("kernel", "dtype", "causal", "shape", "dist", "variant")
# what a timing ran: the first of these parameters that a result holds as text
BACKEND_COLUMNS = ("backend", "kernel", "impl", "model")
# torch's own attention (the backends whose record says ``peer=True``; a test keeps the two
# in step): judged for information, never against flashbench
PEERS = re.compile(r"torch-naive|torch-sdpa|sdpa-[\w-]+|flex")
# studies: tracks that answer one question once (the split-KV merge's 16-bit stores)
STUDIES = re.compile(r"\bTrackDecodeMerge\.")
_RAN = re.compile(r"\b(?P<name>" + "|".join(BACKEND_COLUMNS) + r")='(?P<value>[^']*)'")

_PEAK = re.compile(r"(TimeMatmulPeak\.time_matmul|TrackMatmulPeak\.track_matmul)$")
_PEAK_OLD = re.compile(r"TrackMatmulPeak\.track_matmul_(?P<dtype>[a-z0-9]+)_(?P<n>\d+)$")


def rule_limit(metric: str) -> float | None:
    """The rule's factor for a rule-ratio metric ("o_baseline_ratio" -> 2.0), else None."""
    return RULE_LIMITS.get(metric)


def role(benchmark: str, params: str) -> str | None:
    """"study" for a study's result, "peer" for one of torch's own attention (the first of
    :data:`BACKEND_COLUMNS` in asv's params label, ``kernel='torch-sdpa', ...``, names
    one), None for flashbench's own."""
    if STUDIES.search(benchmark):
        return "study"
    ran = next(iter(sorted(_RAN.finditer(params or ""),
                           key=lambda m: BACKEND_COLUMNS.index(m["name"]))), None)
    return "peer" if ran is not None and PEERS.fullmatch(ran["value"]) else None


def accuracy_metric(benchmark: str) -> str | None:
    """The metric an accuracy track records ("o_max_abs"), None for other benchmarks."""
    m = ACCURACY.search(benchmark)
    return m["metric"] if m else None


def is_matmul_peak(benchmark: str) -> bool:
    return bool(_PEAK.search(benchmark) or _PEAK_OLD.search(benchmark))


def matmul_peak(benchmark: str, params: dict) -> tuple[float, str | None] | None:
    """(FLOPs, dtype) of one matmul-peak timing, None for other benchmarks.

    ``params``: the result's parameters by name. FLOPs = 2 n^3 (one n x n x n matmul).
    """
    if _PEAK.search(benchmark):
        n, dtype = params.get("n"), params.get("dtype")
    elif m := _PEAK_OLD.search(benchmark):
        n, dtype = int(m["n"]), m["dtype"]
    else:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    return 2.0 * n**3, dtype if isinstance(dtype, str) else None


@dataclass(frozen=True)
class Legacy:
    """A suite as it was before it recorded its problem as parameters."""

    params: dict[str, type]  # the parameter names in order, with the type of their values
    shape: Callable[[dict], tuple] | None = None  # parameters -> (B, H, Nq, Nk, d)
    dtype: str | None = None  # the dtype of a suite that had no dtype parameter
    shape_params: tuple[str, ...] = field(default=())  # the parameters ``shape`` reads


LEGACY: dict[str, Legacy] = {
    "TrackAccuracy": Legacy({"kernel": str, "dtype": str, "causal": bool}),
    "TrackDeviceTime.track_device_time": Legacy(
        {"backend": str, "dtype": str, "N": int, "d": int, "causal": bool},
        lambda p: (max(1, 16384 // p["N"]), 16, p["N"], p["N"], p["d"]),
        shape_params=("N", "d")),
    "TimeCPUBackend.time_backend": Legacy(
        {"backend": str, "dtype": str, "N": int, "causal": bool},
        lambda p: (1, 8, p["N"], p["N"], 64), shape_params=("N",)),
    "TimeAttention.time_attention": Legacy(
        {"N": int, "d": int, "causal": bool, "impl": str},
        lambda p: (1, 1, p["N"], p["N"], p["d"]), dtype="fp64", shape_params=("N", "d")),
    "TimeStreamBlock.time_online_attention": Legacy({"block": int}),
    "TimeModels.time_model": Legacy({"model": str, "dtype": str}),
    "TimeSoftmax.time_softmax": Legacy({"N": int, "impl": str}),
    "PeakmemAttention.peakmem_attention": Legacy({"N": int, "impl": str}),
}


def _legacy(benchmark: str) -> Legacy | None:
    parts = benchmark.split(".")
    return LEGACY.get(".".join(parts[-2:])) or (LEGACY.get(parts[-2]) if len(parts) > 1
                                                 else None)


def _fits(value, kind: type) -> bool:
    return type(value) is kind or (kind is float and type(value) is int)


def legacy_param_names(benchmark: str, grid: list[list]) -> list[str] | None:
    """The parameter names of an old suite whose grid (parsed values, one list per
    parameter) has exactly its parameters' number and value types; else None."""
    old = _legacy(benchmark)
    if old is None or len(grid) != len(old.params):
        return None
    if all(all(_fits(v, kind) for v in values)
           for values, kind in zip(grid, old.params.values(), strict=True)):
        return list(old.params)
    return None


def legacy_shaped(benchmark: str) -> bool:
    """Whether ``benchmark`` is an old suite whose shape :func:`legacy_problem` knows."""
    old = _legacy(benchmark)
    return old is not None and old.shape is not None


def legacy_problem(benchmark: str, params: dict) -> tuple[Shape, str | None, tuple] | None:
    """(Shape, dtype or None, the parameters that gave the shape) of a timing written by
    an old suite without a ``shape`` parameter; None where the table does not know it."""
    old = _legacy(benchmark)
    if old is None or old.shape is None:
        return None
    if not all(type(params.get(name)) is int and params[name] >= 1
               for name in old.shape_params):
        return None
    b, h, nq, nk, d = (int(x) for x in old.shape(params))
    return Shape(b, h, nq, nk, d), old.dtype, old.shape_params
