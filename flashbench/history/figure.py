"""What every history plot shares: series, colours, axes, machine spans, legends.

A series is one parameter setting on one machine (never settings joined into one line).
Colour says which kernel (flashbench's own in strong colours; torch's peers grey, drawn
thin: information only; studies black dash-dot); markers tell the other settings apart,
with a legend of their own. Machines are not colours: each panel shades the commits each
machine measured and names it (M1, M2, ... as report.md), so a machine change reads as
one. Axes: one scale per figure, a y-span floor relative to the value (rounding noise is
never magnified into a full-height step), tick labels on every panel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WIDTH, DPI = 11.0, 100  # 1100 px: the width a Markdown page shows without scaling
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
PEER_PREFIXES = ("torch-", "sdpa-", "flex")  # torch's kernels (Backend.peer, by name here)
SPAN_FLOOR = 0.2  # a panel spans at least +-20 % of its values' middle


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def is_peer(kernel) -> bool:
    return isinstance(kernel, str) and kernel.startswith(PEER_PREFIXES)


# each kernel's colour and each dtype's marker the same in every plot (each plot numbered
# its own kernels and dtypes: triton was orange in errors.png and green in rules.png, a
# circle fp32 in one and bf16 in another); names not listed follow, in sorted order
OWN_ORDER = ("flash_model", "triton", "triton-fp8", "split_model", "standard_model",
             "reference", "reference-split8")
PEER_ORDER = ("torch-sdpa", "torch-naive", "sdpa-math", "sdpa-flash", "sdpa-efficient",
              "sdpa-cudnn", "flex")
DTYPE_MARKERS = dict(zip(("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp8_e5m2"),
                         MARKERS, strict=False))


def _ranked(names, order) -> list:
    return [*[k for k in order if k in names], *sorted(k for k in names if k not in order)]


def kernel_colours(kernels) -> dict:
    """kernel -> colour: flashbench's kernels from tab10, peers in greys, a study black;
    the known names keep one colour in every plot (:data:`OWN_ORDER`, :data:`PEER_ORDER`)."""
    plt = pyplot()
    own = {k for k in kernels if isinstance(k, str) and not is_peer(k)}
    peers = {k for k in kernels if is_peer(k)}
    extra = sorted(own - set(OWN_ORDER))
    out = {k: plt.get_cmap("tab10")((OWN_ORDER.index(k) if k in OWN_ORDER
                                     else len(OWN_ORDER) + extra.index(k)) % 10) for k in own}
    levels = _ranked(peers | set(PEER_ORDER), PEER_ORDER)
    out.update({k: plt.get_cmap("Greys")(0.45 + 0.4 * levels.index(k) / (len(levels) - 1))
                for k in peers})
    out[None] = (0, 0, 0, 1)
    return out


def dtype_marker(dtype, taken: dict) -> str:
    """The marker of ``dtype`` (:data:`DTYPE_MARKERS`; another: the next one ``taken``, the
    markers handed out so far, has not used)."""
    if dtype in DTYPE_MARKERS:
        return DTYPE_MARKERS[dtype]
    free = [m for m in MARKERS if m not in DTYPE_MARKERS.values() and m not in taken.values()]
    return (free or list(MARKERS))[0]


def grid(panels: int, cols: int, height: float = 2.5):
    plt = pyplot()
    cols = max(1, min(cols, panels))
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, height * rows + 0.6), squeeze=False)
    for ax in list(axes.flat)[panels:]:
        ax.set_visible(False)
    return fig, axes


def commit_axis(ax, labels: dict, xs) -> None:
    """The panel's own commits on its x axis, at most 4 labelled (the latest always)."""
    xs = sorted({int(x) for x in xs if x == x})
    if not xs:
        return
    # from the latest back, a tick at least a fifth of the axis from the last one kept: the
    # x positions are history's order across every machine, and a panel's commits can sit
    # side by side (three 12-03 commits' labels printed over each other: a probe)
    gap, ticks = (xs[-1] - xs[0]) / 5, []
    for x in reversed(xs):
        if len(ticks) < 4 and (not ticks or ticks[-1] - x >= gap):
            ticks.append(x)
    ticks.reverse()
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels.get(x, str(x)) for x in ticks], fontsize=6)
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)


def machine_spans(ax, spans: list[tuple[str, float, float]]) -> None:
    """Shade every other machine's commits and name each machine at the panel's top; a
    machine change is a dashed line."""
    from matplotlib.transforms import blended_transform_factory

    where = blended_transform_factory(ax.transData, ax.transAxes)
    spans = sorted(spans, key=lambda s: s[1])
    # a label at most every 8% of the axis: machines that took turns commit by commit are
    # named where there is room, not printed over each other
    gap, named = 0.08 * (max(s[2] for s in spans) - min(s[1] for s in spans) + 1), -1e300
    for i, (label, lo, hi) in enumerate(spans):
        if i % 2:
            ax.axvspan(lo - 0.5, hi + 0.5, color="0.9", zorder=0, lw=0)
        if i:
            ax.axvline(lo - 0.5, color="0.4", linestyle="--", lw=0.8, zorder=1)
        if (lo + hi) / 2 - named < gap:
            continue
        named = (lo + hi) / 2
        # under the lines (zorder 2): a label over the top point hid it (a probe counted
        # 32 TFLOP/s and 44 error points hidden)
        ax.text(named, 0.97, label, transform=where, ha="center", va="top",
                fontsize=6, color="0.2", zorder=1.5,
                bbox={"facecolor": "white", "alpha": 0.6, "lw": 0, "pad": 1})


def spans_of(frame: pd.DataFrame, machine_label: dict) -> list[tuple[str, float, float]]:
    """(label, first x, last x) of each run of commits measured by the same machines
    (columns machine, cpu, x), in x order: machines whose commits interleave get a span per
    run ("M2" between two "M3" spans; "M2 M3" where both measured the same commits), never
    one span over the other's commits."""
    who: dict = {}
    for m, c, x in zip(frame["machine"], frame["cpu"], frame["x"], strict=True):
        if x == x:
            key = (m, c if isinstance(c, str) else None)
            who.setdefault(float(x), set()).add(machine_label.get(key, str(m)))
    out: list = []
    for x in sorted(who):
        label = " ".join(sorted(who[x]))
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1], x)
        else:
            out.append((label, x, x))
    return out


def one_scale(axes, values_per_panel: list, log: bool | None = None) -> str:
    """Every visible panel on one y scale: log when asked, or when any panel's positive
    values span more than 20x; returns it."""
    if log is None:
        log = False
        for values in values_per_panel:
            v = np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=float)
            log = log or bool(len(v) and v.max() / v.min() > 20)
    for ax in axes.flat:
        if ax.get_visible():
            ax.set_yscale("log" if log else "linear")
    return "log" if log else "linear"


def span_floor(ax, values, extra=()) -> None:
    """Limits spanning at least :data:`SPAN_FLOOR` of the values' middle (relative), so a
    4e-13 relative difference stays a flat line; ``extra`` (a rule's limit) is kept in view
    when the values come near it."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if not len(v):
        return
    lo, hi = float(v.min()), float(v.max())
    for e in extra:
        if e is not None and np.isfinite(e):
            lo, hi = min(lo, e), max(hi, e)
    log = ax.get_yscale() == "log"
    with np.errstate(over="ignore", invalid="ignore"):
        if log and lo > 0:
            mid, half = np.sqrt(lo) * np.sqrt(hi), max(np.sqrt(hi / lo), 1 + SPAN_FLOOR)
            limits = (min(lo, mid / half) / 1.05, max(hi, mid * half) * 1.05)
        else:
            mid = lo / 2 + hi / 2
            half = max(hi / 2 - lo / 2, SPAN_FLOOR * abs(mid), 1e-300)
            limits = (mid - 1.1 * half, mid + 1.1 * half)
    if not np.all(np.isfinite(limits)):  # values near the float's end (1e308: a probe's
        limits = (np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf))  # file crashed it)
    ax.set_ylim(*limits)


def tick_labels(ax) -> None:
    """At least two labelled y ticks within the limits (a log panel inside one decade
    gets labelled minor ticks; a linear one, plain numbers)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log":
        decades = np.floor(np.log10(hi)) - np.ceil(np.log10(lo)) + 1  # powers of 10 inside
        if hi / lo < 30 or decades < 2:  # 0.0035-0.09 showed "0.01" alone
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.yaxis.set_major_locator(MaxNLocator(5))
    ax.set_ylim(lo, hi)


def visible_tick_labels(ax) -> list[str]:
    """The y tick labels a reader sees (within the limits, non-empty): for the tests."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_ylim())
    return [t.get_text() for t in ax.get_yticklabels()
            if t.get_text() and lo <= t.get_position()[1] <= hi]


def finish(fig, axes, entries: dict, title: str, note: str = ""):
    """Tick labels on every panel, the legends below the panels (``entries``: {legend
    title: {label: handle}}, side by side), the title; returns the figure."""
    for ax in axes.flat:
        if ax.get_visible():
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7, which="both")
            tick_labels(ax)
            if ax.get_yscale() == "log" and "log" not in ax.get_ylabel():  # said (a probe:
                # no plot did; a red team, 2026-12-08: rules.png's axes had no label at all)
                ax.set_ylabel(f"{ax.get_ylabel()} (log scale)".strip(), fontsize=8)
    entries = {k: v for k, v in entries.items() if v}
    rows = max([len(v) for v in entries.values()] or [0])
    cols = {k: 1 if len(v) <= 12 else 2 for k, v in entries.items()}
    rows = max([-(-len(v) // cols[k]) for k, v in entries.items()] or [0]) + 1
    legend_in = 0.15 * rows + 0.2
    # title and note wrapped to the figure's width (a probe read rules.png's note cut off
    # at both ends): about 0.55 em a character, 1.3 em a line
    title, note = (_wrapped(text, fig.get_figwidth(), size) for text, size in ((title, 10),
                                                                               (note, 8)))
    title_in, note_in = (0.0 if not text else (text.count("\n") + 1) * size * 1.3 / 72
                         for text, size in ((title, 10), (note, 8)))
    height = fig.get_figheight() + legend_in + title_in + note_in - 0.15
    fig.set_figheight(height)
    for k, (name, handles) in enumerate(entries.items()):
        fig.legend(list(handles.values()), list(handles), loc="upper left", title=name,
                   title_fontsize=7, fontsize=7, frameon=False, alignment="left",
                   ncol=cols[name], bbox_to_anchor=(0.01 + k / max(1, len(entries)),
                                                    (legend_in - 0.05) / height))
    fig.suptitle(title, fontsize=10, y=1 - 0.05 / height, va="top")
    if note:
        fig.text(0.5, 1 - (0.1 + title_in) / height, note, ha="center", va="top", fontsize=8)
    fig.tight_layout(rect=(0, legend_in / height, 1, 1 - (0.2 + title_in + note_in) / height))
    return fig


def _wrapped(text: str, width_in: float, size: float) -> str:
    """``text`` in lines that fit ``width_in`` inches at ``size`` points."""
    import textwrap

    return textwrap.fill(text, max(20, int(0.95 * width_in * 72 / (0.55 * size))))


def save(fig, path) -> None:
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
