"""``flashbench speed``'s text: the host, the table, and the notes below it (what each
clock was, where a row's speedup is not like for like, why a case has no speedup)."""

from __future__ import annotations

from flashbench.cli.common import speed_pass

__all__ = ["render_text", "untimed", "ROUND_TRIP_SHARE"]


def untimed(report: dict) -> str:  # {name: why} of the kernels named and never timed
    return "; ".join(f"{n}: {why}" for n, why in report["untimed"].items())


def _fmt(x, unit="", scale=1.0, digits=3):
    """``x * scale`` to ``digits`` significant digits, kept ("1.00", not "1")."""
    return "-" if x is None else f"{x * scale:#.{digits}g}".rstrip(".") + unit


def _host(host: dict | None) -> list[str]:
    """The CPUs, torch's threads and the load around the run: on a busy CPU the same
    kernel's median moved from 0.2 to 69 ms between runs, and the report said nothing."""
    if not host:
        return []
    load = [x for x in (host.get("load"), host.get("load_end")) if x is not None]
    line = f"host: {host['cpus']} CPUs, torch {host['torch_threads']} threads"
    if load:
        line += (f", 1-minute load average {load[0]:.2f} at the start, {load[-1]:.2f} at the "
                 "end")
        if max(load) > 0.75 * host["cpus"]:
            line += " (a busy machine: times scatter, run again on an idle one to compare)"
    return [line]


def _busy(report: dict) -> set:
    """(case, backend) of the rows timed while processes outside the run were busy."""
    limit = report["meta"].get("outside_cpus")
    return {(r.case, r.backend) for r in report["rows"] if limit is not None
            and r.outside_cpus is not None and r.outside_cpus > limit}


# a user's row whose median a call is over this many times its worker's own: the round trip
# to its worker is a visible part of its time (docs/speed.md, "The worker's path costs")
ROUND_TRIP_SHARE = 1.25


def _unlike(r, rows) -> str | None:
    """A note on every user's row whose speedup is against a row timed in this process: the
    worker's path (its round trip, its wake-up) is in the user's time alone. Why it weighs
    here: a request's calls (median a call x k) shorter than an empty round trip; or a
    median over :data:`ROUND_TRIP_SHARE` x the worker's own clock, more than the round trip
    explains (load); else what the path cost the same sdpa here (a probe, 2026-12-07: an
    identical sdpa as a user's kernel read 0.59-0.85x torch-sdpa in 11 runs of 11, the note
    said in 7)."""
    base = next((b for b in rows if b.case == r.case and b.backend == r.baseline), None)
    if (r.worker_median_s is None or not r.median_s or r.speedup is None or base is None
            or base.worker_median_s is not None):
        return None
    k = r.calls_per_request or 1
    share = r.median_s / r.worker_median_s
    short = r.null_s is not None and r.median_s * k < r.null_s
    if short:
        why = (f"a request's {k} call(s) last less than its empty round trip "
               f"({r.null_s * 1e3:.3g} ms): at calls this short the round trip to its worker "
               "is part of its time")
    elif share > ROUND_TRIP_SHARE:
        trip = "" if r.null_s is None else f" (an empty one: {r.null_s * 1e3:.3g} ms)"
        why = (f"its {r.median_s * 1e3:.3g} ms a call is {share:.2g}x its worker's own clock "
               f"({r.worker_median_s * 1e3:.3g} ms), more than its round trip explains{trip}: "
               "time its worker spent outside its calls (a busy machine, its wake-up)")
    else:
        why = (f"its {r.median_s * 1e3:.3g} ms a call (its worker's own clock: "
               f"{r.worker_median_s * 1e3:.3g} ms) pays the worker's path, which the peer's "
               "does not: the same torch sdpa given as a user's kernel read 0.59-0.85x "
               "built-in torch-sdpa at 1x4x256x64 fp32 on a 2-CPU Intel Xeon VM, 11 runs "
               "(docs/speed.md)")
    twin = (" (flashbench.kernels.torch_peers:sdpa_output is torch-sdpa as a user's kernel)"
            if r.baseline == "torch-sdpa" else "")
    return (f"{r.backend} on {r.case}: its speedup* against {r.baseline} (timed in this "
            f"process) is not like for like: {why}; give the peer as a user's kernel too "
            f"(--backend mod:fn --baseline mod:fn){twin}"
            + (" or raise --samples (more calls a request)" if short else ""))


def render_text(report: dict) -> str:
    m = report["meta"]
    roof = m["roofline"]
    lines = [f"flashbench speed  seed {m['seed']}  device {m['device']}  {m['samples']} timed "
             f"calls per row after {m['warmup']} warm-up", *_host(m.get("host")),
             "peaks (which one each row's % peak and floor are of: named below): matmul "
             "TFLOP/s " + ", ".join(f"{d} {v:.3g}" for d, v in roof["matmul_tflops"].items())
             + f"; copy {roof['copy_gbs']:.3g} GB/s ({roof['how']})",
             f"speedup: the median time a call of {m['baseline']} over the row's, then (low-high) "
             "its 95% interval (scipy.stats.bootstrap, percentile, each row's timed calls "
             "resampled: the calls' scatter, not a rerun's); * a user's kernel against a "
             "peer timed in this process: not like for like (its note below)", "",
             "| case | backend | verdict | median ms | p10-p90 ms | n | TFLOP/s | GB/s "
             "| % peak | speedup |", "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    busy = _busy(report)
    for r in report["rows"]:
        unlike = _unlike(r, report["rows"])  # its note below, its mark in the table
        spread = "-" if r.p10_s is None else f"{_fmt(r.p10_s, '', 1e3)}-{_fmt(r.p90_s, '', 1e3)}"
        lines.append(f"| {r.case} | {r.backend} | {r.status} | {_fmt(r.median_s, '', 1e3)} | "
                     f"{spread} | {len(r.samples_s)} | {_fmt(r.tflops)} | {_fmt(r.gbs)} | "
                     f"{_fmt(r.peak_fraction, '%', 100)} | {_fmt(r.speedup, 'x')}"
                     + ("" if r.speedup_ci is None else
                        f" ({_fmt(r.speedup_ci[0])}-{_fmt(r.speedup_ci[1], 'x')})")
                     + (" (busy)" if r.speedup is not None and busy & {
                         (r.case, r.backend), (r.case, r.baseline)} else "")
                     + (" *" if unlike else "") + " |")
        if (r.case, r.backend) in busy:
            notes.append(f"busy: {r.backend} on {r.case}: processes outside this run kept "
                         f"{r.outside_cpus:.2f} CPUs busy on average while it was timed "
                         "(/proc/stat on this process's CPUs, less this run's own CPU): its "
                         "times are not its kernel's alone, and a speedup it takes part in "
                         "(marked busy) is no measured difference; time it again on an idle "
                         "machine")
        for name, why in r.failures.items():
            notes.append(f"FAIL {r.backend} on {r.case}: {name}: {why}" + (
                " (torch's own attention: for information, as in check; not this run's "
                "verdict)" if r.peer else ""))
        if r.reason:
            notes.append(f"{r.status} {r.backend} on {r.case}: {r.reason}")
        if r.worker_median_s is not None:
            notes.append(f"{r.backend} on {r.case}: clock: {r.clock}; n counts its timed "
                         "requests on new contents (those on returning contents are judged "
                         "against the floor and their neighbours on new contents), p10-p90 "
                         "spreads their times a call; its worker's own "
                         f"clock says {r.worker_median_s * 1e3:.3g} ms a call (median; a "
                         "cross-check only)")
        if unlike is not None:
            notes.append(unlike)
    notes += _no_speedup(report["rows"], m["baseline"])
    clocks = sorted({r.clock for r in report["rows"] if r.clock and r.worker_median_s is None})
    peaks = sorted({f"{r.dtype}: {r.peak}" for r in report["rows"] if r.peak})
    notes += [f"FAIL: a process a kernel left running was killed: {s}; every figure of this "
              "run is suspect (backends.strays)" for s in m.get("strays", ())]
    notes += [f"FAIL: {i}; every figure of this run is suspect (backends.strays)"
              for i in m.get("interference", ())]
    notes += ["FAIL: a file the harness runs from changed during this run (by a kernel, or "
              f"any process of this user): {p}; every "
              "verdict of this run is suspect (measure.planted)" for p in m.get("planted", ())]
    notes += [f"environment: {e}" for e in m.get("environment", ())]
    lines += ["", *notes, *(f"clock: {c}" for c in clocks),
              *([f"% peak and the floor are of: {'; '.join(peaks)}"] if peaks else []),
              "verdict: " + ("nothing timed (exit 2)" if all(
                  r.status == "not timed" for r in report["rows"])
                  else f"none of the kernels named was timed (exit 2): {untimed(report)}"
                  if report.get("untimed") else speed_pass(report) if report["passed"] else "FAIL")]
    return "\n".join(lines)


def _torch_peer(name: str) -> bool:
    """Whether ``name`` is one of torch's own attentions (a row's ``peer`` is False where
    --only named it: it counts toward the verdict then)."""
    from flashbench.backends import get_backend

    try:
        return ":" not in name and get_backend(name).peer
    except (KeyError, ValueError):
        return False


def _no_speedup(rows: list, baseline: str) -> list[str]:
    """Why a case's rows have no speedup (its cells read "-" and nothing said why)."""
    out = []
    for case in dict.fromkeys(r.case for r in rows):
        mine = [r for r in rows if r.case == case]
        if any(r.status == "PASS" for r in mine) and all(r.speedup is None for r in mine):
            base = next((r for r in mine if r.backend == baseline), None)
            peers = [r for r in mine if _torch_peer(r.backend)]  # named in --only: counted
            out.append(f"no speedup on {case}: the baseline, {baseline}, " + (
                f"is {base.status} there" + (f" ({base.reason})" if base.reason else "")
                if base is not None else "has no PASS there: " + "; ".join(
                    f"{r.backend} {r.status}" + (f" ({r.reason})" if r.reason else "")
                    for r in peers) if peers else "is none of its rows (no torch peer "
                "timed it: --only named none, or none takes its dtype or variant: give "
                "--baseline one of the rows)"))
    return out
