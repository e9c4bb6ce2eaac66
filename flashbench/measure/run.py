"""Runs the cases of ``flashbench check``: is the streaming exact, and is each dtype as
accurate as it can be? :func:`run_check` answers two questions, kept apart, forward and
backward, and returns the report (the CLI renders it: :mod:`flashbench.cli.check_tables`,
:mod:`flashbench.cli.check_view`; docs/check.md tells what each table is):

1. Exactness (float64): streamed vs one-shot softmax, O and LSE (causal and not), and
   dq, dk, dv relative to the gradients' scale; PASS iff <= 1e-12.
2. Dtype cost, per case and precision: flash vs standard model in the same dtype; the
   flash model and every available backend against the float64 reference, by the baseline
   rule (2x the same-dtype standard attention's max abs error plus eps/4) or for
   gradients the gradient rule (:func:`flashbench.accuracy.gradient_floor`), and by the
   band rule (:mod:`flashbench.accuracy.bandrule`); PASS needs both. Gradient cases:
   :func:`flashbench.measure.backward.default_backward_cases` or the ``--shape`` shapes;
   packed batches per sequence (:mod:`flashbench.measure.varlen`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from flashbench import reference
from flashbench.inputs.precision import CHECK_DTYPES, Precision, get_precision
from flashbench.measure.backward import (
    backward_exactness,
    default_backward_cases,
    grad_output,
    measure_gradients,
)
from flashbench.measure.forward import default_cases, exactness, measure_accuracy
from flashbench.measure.records import EXACT_TOL, Case, private
from flashbench.measure.varlen import (
    measure_varlen,
    measure_varlen_gradients,
    varlen_backward_exactness,
    varlen_exactness,
    varlen_grad_output,
    varlen_inputs,
)

__all__ = ["run_check", "overall_passed", "Case", "default_cases"]


def run_check(cases: Sequence[Case] | None = None,
              dtypes: Sequence[str | Precision] = CHECK_DTYPES,
              seed: int = 0, block: int = 64, backends: Sequence[str] = (),
              say: Callable[[str], None] | None = None,
              backward_cases: Sequence[Case] | None = None,
              time_limit: float | None = None, forward: bool = True) -> dict:
    """Run the whole check and return the report as a JSON-ready dict.

    ``dtypes``: precision names or their Precisions, resolved once, here (every layer
    below takes the Precision). ``backends``: backend names to judge beside the flash
    model (``flashbench check`` passes every available one but the float64 reference).
    ``say``: called with each progress line (the CLI prints them on stderr); None: silent.
    ``backward_cases``: where gradients are judged; None means
    :func:`flashbench.measure.backward.default_backward_cases` (those whose causal setting
    appears among ``cases``), ``()`` none. ``time_limit``: seconds a user's kernel may
    take per call (its worker's limit; None: :data:`flashbench.backends.worker.
    DEFAULT_TIME_LIMIT`); the workers stop when the check ends. ``forward`` False: the
    backends' forward is not judged (``check --pass bwd``; the exactness and the flash
    model still are, as yardsticks).
    """
    precs = [get_precision(d) for d in dtypes]  # the door: names become Precisions, once
    with _session(backends, time_limit):
        return _run(cases, precs, seed, block, backends, say or _silent, backward_cases,
                    forward)


def _session(backends, time_limit):
    """The user backends' session (their workers' time limit and end); none without
    backends, so that a check of the flash model alone never imports torch."""
    if not backends:
        return contextlib.nullcontext()
    from flashbench.backends import user

    return user.session(time_limit)


def _silent(msg: str) -> None:
    """No progress lines (``run_check(say=None)``)."""


def _run(cases, dtypes: list[Precision], seed, block, backends, say, backward_cases,
         forward: bool = True) -> dict:
    cases = default_cases() if cases is None else list(cases)
    report = {"meta": _meta(seed, block, dtypes), "exactness": [], "dtypes": [],
              "backends": []}
    for i, case in enumerate(cases, 1):
        say(f"[{i}/{len(cases)}] {case.label()}: fp64 reference")
        if case.varlen is not None:  # a packed batch: per-sequence reference and models
            _run_varlen(report, case, dtypes, seed, block, backends if forward else (), say)
            continue
        q, k, v = private(*case.qkv(seed))
        ref = reference.attention(q, k, v, **case.kwargs(seed))
        report["exactness"] += [r.as_dict() for r in exactness(case, q, k, v, ref, block, seed)]
        judged = ["flash_model", *(backends if forward else ())]
        _add_records(report, measure_accuracy(case, dtypes, judged, seed, block, say,
                                              inputs=(q, k, v), ref=ref))
    _run_gradients(report, cases, backward_cases, dtypes, seed, block, backends, say)
    report["passed"] = overall_passed(report)
    say("done")
    return report


def _add_records(report, records) -> None:
    for rec in records:
        row = rec.as_dict()
        if rec.kernel == "flash_model":
            del row["kernel"], row["peer"]
            report["dtypes"].append(row)
        else:
            row["backend"] = row.pop("kernel")
            report["backends"].append(row)


def _run_varlen(report, case, dtypes, seed, block, backends, say) -> None:
    q, k, v, cu, cu_k = varlen_inputs(case, seed)
    ref = reference.varlen_attention(q, k, v, cu, cu_k, **case.kwargs(seed))
    report["exactness"] += [r.as_dict() for r in
                            varlen_exactness(case, q, k, v, cu, cu_k, ref, block, seed)]
    _add_records(report, measure_varlen(case, dtypes, ["flash_model", *backends], seed, block,
                                        say, inputs=(q, k, v, cu, cu_k), ref=ref))


def _run_gradients(report, cases, backward_cases, dtypes, seed, block, backends, say) -> None:
    if backward_cases is None:
        causals = {c.causal for c in cases}
        backward_cases = [c for c in default_backward_cases() if c.causal in causals]
        report["grad_cases_why"] = ("default gradient cases, small so that the interpreted "
                                    "Triton backward keeps the check near a minute; judge "
                                    "others with --shape")
    report["grad_cases"] = [c.label() for c in backward_cases]
    report["grad_exactness"], report["gradients"] = [], []
    for i, case in enumerate(backward_cases, 1):
        say(f"[grad {i}/{len(backward_cases)}] {case.label()}: fp64 gradients")
        if case.varlen is not None:  # a packed batch: per-sequence gradients and models
            _run_varlen_gradients(report, case, dtypes, seed, block, backends, say)
            continue
        q, k, v, do = private(*case.qkv(seed),
                              grad_output(case.shape, seed))
        ref = reference.attention_grad(q, k, v, do, **case.kwargs(seed))
        report["grad_exactness"] += [r.as_dict() for r in
                                     backward_exactness(case, q, k, v, do, ref, block, seed)]
        for rec in measure_gradients(case, dtypes, ["flash_model", *backends], seed, block,
                                     say, inputs=(q, k, v, do), ref=ref):
            report["gradients"].append(rec.as_dict())


def _run_varlen_gradients(report, case, dtypes, seed, block, backends, say) -> None:
    q, k, v, cu, cu_k = varlen_inputs(case, seed)
    q, k, v, do = private(q, k, v, varlen_grad_output(case, seed))
    ref = reference.varlen_attention_grad(q, k, v, do, cu, cu_k, **case.kwargs(seed))
    report["grad_exactness"] += [r.as_dict() for r in
                                 varlen_backward_exactness(case, q, k, v, do, cu, cu_k, ref,
                                                           block, seed)]
    report["gradients"] += [r.as_dict() for r in measure_varlen_gradients(
        case, dtypes, ["flash_model", *backends], seed, block, say,
        inputs=(q, k, v, do, cu, cu_k), ref=ref)]


def overall_passed(report: dict) -> bool:
    """PASS iff exactness, the flash model and every non-peer backend pass (skips pass),
    forward and backward."""
    return (all(r["passed"] for r in report["exactness"])
            and all(r["passed"] for r in report["dtypes"])
            and all(r.get("passed", True) or r.get("peer") for r in report["backends"])
            and all(r["passed"] for r in report.get("grad_exactness", ()))
            and all(r.get("passed", True) or r.get("peer")
                    for r in report.get("gradients", ())))


def _meta(seed: int, block: int, dtypes: list[Precision]) -> dict:
    return {"seed": seed, "block": block, "dtypes": [p.name for p in dtypes],
            "exact_tol": EXACT_TOL,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": _torch_version(), "machine": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _torch_version() -> str:
    """torch's version, read from its metadata where the check did not import it (a check
    of the flash model alone: the import is 2 s of CPU)."""
    if "torch" in sys.modules:
        return sys.modules["torch"].__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a source build: ask torch itself
        import torch

        return torch.__version__
