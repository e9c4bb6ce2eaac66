"""Papers' accuracy tables rerun with flashbench's precision models.

:func:`fa3_table3` reruns FlashAttention-3's Table 3 (arXiv 2407.08608, section 4.3): RMSE
of O against the float64 reference (:func:`flashbench.reference.attention`) on
``make_qkv(shape, "outliers", seed)`` inputs (N(0, 1) + N(0, 100) * Bernoulli(0.001)), for
fp16 standard and flash attention, the baseline FP8 attention, FlashAttention-3's FP8
forward and its two ablations (:mod:`flashbench.numerics.fp8`). Per seed the RMSE runs over
all B*H*Nq*dv elements of O; the figure pools the seeds (sqrt of the mean per-seed MSE),
the range is the smallest and largest per-seed RMSE. The paper states no shape; the
default is B=1, H=2, N=4096, d=128, with FlashAttention-3's FP8 tile for that d
(:func:`fa3_fp8_tile`) as the blocks of the block quantisation.

Measuring apart from rendering: :func:`fa3_table3` returns a :class:`Table` record;
:func:`render_markdown` writes it out. Its output and how to read it: docs/fp8.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flashbench import numerics, reference
from flashbench.inputs.precision import FP8_DTYPES
from flashbench.inputs.problem import Shape, make_qkv
from flashbench.inputs.validation import check_block
from flashbench.numerics import fp8

__all__ = ["FA3_TABLE3", "FA3_SHAPE", "Setting", "Row", "Table", "fa3_fp8_tile", "fa3_table3",
           "order_claims", "render_markdown"]

FA3_SHAPE = Shape(1, 2, 4096, 4096, 128)
FA3_SOURCE = "FlashAttention-3 (arXiv 2407.08608), section 4.3, Table 3"


@dataclass(frozen=True)
class Setting:
    """One line of the paper's table: which model, in which dtype, with which options."""

    label: str
    dtype: str
    model: str  # "standard" or "flash"
    paper_rmse: float
    options: dict = field(default_factory=dict)


FA3_TABLE3 = (
    Setting("FP16 standard attention", "fp16", "standard", 3.2e-4),
    Setting("FP16 FlashAttention-2 / -3", "fp16", "flash", 1.9e-4),
    Setting("FP8 baseline (per-tensor scales, fp16 softmax)", "fp8", "standard", 2.4e-2),
    Setting("FP8 FlashAttention-3 (block quantisation + incoherent processing)", "fp8",
            "flash", 9.1e-3, {"quant": "block", "incoherent": True}),
    Setting("FP8 FlashAttention-3 without block quantisation", "fp8", "flash", 9.3e-3,
            {"quant": "tensor", "incoherent": True}),
    Setting("FP8 FlashAttention-3 without incoherent processing", "fp8", "flash", 2.4e-2,
            {"quant": "block", "incoherent": False}),
)


def fa3_fp8_tile(d: int) -> tuple[int, int]:
    """FlashAttention-3's FP8 forward tile (query rows, keys) on Hopper for head dim d,
    non-causal (hopper/tile_size.h, tile_size_fwd_sm90 with element size 1)."""
    if d <= 64:
        return 192, 160
    if d <= 96:
        return 192, 128
    if d <= 128:
        return 128, 224
    if d <= 192:
        return 128, 160
    return 128, 128


@dataclass(frozen=True)
class Row:
    """One setting's result: pooled RMSE over seeds, the per-seed range, the paper's figure."""

    setting: Setting
    rmse: float
    rmse_min: float
    rmse_max: float

    @property
    def ratio(self) -> float:
        """flashbench's RMSE / the paper's."""
        return self.rmse / self.setting.paper_rmse


@dataclass(frozen=True)
class Table:
    """A rerun table with everything needed to say how it was made."""

    title: str
    shape: Shape
    seeds: tuple[int, ...]
    block_q: int
    block: int
    rows: tuple[Row, ...]


def _run(setting: Setting, q, k, v, block_q: int, block: int):
    if setting.dtype in FP8_DTYPES:
        if setting.model == "standard":
            return fp8.standard_fp8(q, k, v, setting.dtype)[0]
        return fp8.flash_fp8(q, k, v, setting.dtype, block=block, block_q=block_q,
                             **setting.options)[0]
    if setting.model == "standard":
        return numerics.standard_model(q, k, v, setting.dtype)[0]
    return numerics.flash_model(q, k, v, setting.dtype, block=block)[0]


def fa3_table3(shape: Shape = FA3_SHAPE, seeds: Sequence[int] = (0, 1, 2),
               block_q: int | None = None, block: int | None = None,
               settings: Sequence[Setting] = FA3_TABLE3,
               say: Callable[[str], None] = lambda msg: None) -> Table:
    """Rerun FlashAttention-3's Table 3 (module docstring) and return the :class:`Table`.

    ``block_q`` / ``block``: query rows and keys per tile (default: FlashAttention-3's
    FP8 tile for ``shape.d``, :func:`fa3_fp8_tile`); every flash row streams keys in
    blocks of ``block``, the FP8 ones quantise per ``block_q`` / ``block`` rows.
    """
    if not isinstance(shape, Shape):
        raise TypeError(f"shape must be a flashbench.inputs.Shape, got {type(shape).__name__}")
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    tile_q, tile_k = fa3_fp8_tile(shape.d)
    block_q = tile_q if block_q is None else check_block(block_q)
    block = tile_k if block is None else check_block(block)
    mse = {s.label: [] for s in settings}
    for seed in seeds:
        say(f"seed {seed}: float64 reference")
        q, k, v = make_qkv(shape, "outliers", seed)
        ref = reference.attention(q, k, v)[0]
        for s in settings:
            say(f"seed {seed}: {s.label}")
            o = np.asarray(_run(s, q, k, v, block_q, block)).astype(np.float64)
            mse[s.label].append(float(np.mean((o - ref) ** 2)))
    rows = tuple(Row(s, float(np.sqrt(np.mean(mse[s.label]))),
                     float(np.sqrt(min(mse[s.label]))), float(np.sqrt(max(mse[s.label]))))
                 for s in settings)
    return Table(FA3_SOURCE, shape, seeds, block_q, block, rows)


def _e(x: float) -> str:
    return f"{x:.2e}"


def render_markdown(table: Table) -> str:
    """The table as Markdown, headed by how it was made."""
    seeds = ", ".join(str(s) for s in table.seeds)
    lines = [
        f"**{table.title}**, rerun with flashbench's precision models",
        "",
        f"Inputs: `outliers` (N(0,1) + N(0,100)·Bernoulli(0.001)), shape "
        f"{table.shape.label()}, seeds {seeds}; scale 1/sqrt(d), not causal. "
        f"RMSE of O against the float64 reference over all elements, pooled over seeds "
        f"(sqrt of the mean per-seed MSE); range: smallest and largest per-seed RMSE. "
        f"Tiles: {table.block_q} query rows x {table.block} keys (flash rows stream keys "
        f"in blocks of {table.block}; FP8 block quantisation per tile).",
        "",
        "| setting | paper RMSE | flashbench RMSE | per-seed range | flashbench / paper |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in table.rows:
        lines.append(f"| {r.setting.label} | {_e(r.setting.paper_rmse)} | {_e(r.rmse)} | "
                     f"{_e(r.rmse_min)} .. {_e(r.rmse_max)} | {r.ratio:.2f} |")
    within = [r for r in table.rows if 0.5 <= r.ratio <= 2.0]
    lines += ["", f"Within a factor of 2 of the paper: {len(within)} of {len(table.rows)} rows."]
    lines += [f"{claim}: {'yes' if held else 'NO'}" for claim, held in order_claims(table)]
    return "\n".join(lines)


def order_claims(table: Table) -> list[tuple[str, bool]]:
    """The paper's orderings that the rerun should keep, as (claim, held) pairs (only
    those whose rows the table holds)."""
    rmse = {(r.setting.dtype, r.setting.model, tuple(sorted(r.setting.options.items()))):
            r.rmse for r in table.rows}
    fa3 = rmse.get(("fp8", "flash", (("incoherent", True), ("quant", "block"))))
    claims = [("FP8 FlashAttention-3 below the FP8 baseline",
               ("fp8", "standard", ())),
              ("FP8 FlashAttention-3 below its run without incoherent processing",
               ("fp8", "flash", (("incoherent", False), ("quant", "block")))),
              ("FP16 flash below FP16 standard", None)]
    out = []
    for claim, other in claims:
        if other is None:
            a, b = rmse.get(("fp16", "flash", ())), rmse.get(("fp16", "standard", ()))
        else:
            a, b = fa3, rmse.get(other)
        if a is not None and b is not None:
            out.append((claim, a < b))
    return out
