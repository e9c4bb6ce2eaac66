"""The head dims the Triton kernels take, and the compiled widths they run them on.

Triton tiles are powers of two (``tl.arange``), so a head dim d that is a multiple of 8 up
to 256 runs on the next compiled width of 16, 32, 64, 128, 256 (32 up for fp8, whose dot
reduces over 32) with the columns past d masked: loads read zeros there, stores skip them,
so the padded columns add exact zeros to every dot product. The value head dim dv is
rounded on its own (d = 192, dv = 128: tiles 256 and 128). The rule, its error words and
the constexprs live here once, in plain Python (the backend registry reads them without
Triton); the jitted masked load is :func:`flashbench.kernels.phases.masked_load`. Why
padding, and what it costs: docs/gpu.md ("Head dims").
"""

from __future__ import annotations

__all__ = ["KERNEL_WIDTHS", "MAX_HEAD_DIM", "HEAD_DIMS", "MAX_ABSORBED_DV", "DECODE_HEAD_DIMS",
           "kernel_width", "config_width", "validate_head_dims", "head_dims_problem",
           "decode_head_dims_problem", "decode_rows_problem", "DECODE_MAX_ROWS",
           "dim_constexprs"]

KERNEL_WIDTHS = (16, 32, 64, 128, 256)
MAX_HEAD_DIM = 256
HEAD_DIMS = tuple(range(8, MAX_HEAD_DIM + 1, 8))  # every d (and dv) the kernels take
MAX_ABSORBED_DV = 512  # the absorbed MLA decode: dv <= 512 and d - dv <= 256 (576 / 512)
# every d the decode kernel takes: plain, or absorbed (d = dv + a tail of at most 256)
DECODE_HEAD_DIMS = tuple(range(8, MAX_ABSORBED_DV + MAX_HEAD_DIM + 1, 8))


def kernel_width(d: int, least: int = 16) -> int:
    """The compiled width a head dim ``d`` runs on: the next power of two >= max(d, least)."""
    return max(least, 1 << (int(d) - 1).bit_length())


def config_width(d: int, dv: int | None = None, least: int = 16) -> int:
    """The width that picks a launch config: the wider of d's and dv's compiled widths
    (the tables in :mod:`flashbench.kernels.configs` are written per compiled width)."""
    return max(kernel_width(d, least), kernel_width(d if dv is None else dv, least))


def head_dims_problem(d: int, dv: int | None = None,
                      kernel: str = "the Triton kernel") -> str | None:
    """The one line saying why ``kernel`` cannot take head dims d, dv, or None when it can:
    both multiples of 8 in 8..256 (the kernels pad them to a compiled width: module
    docstring)."""
    for name, x in (("d", d), ("dv", d if dv is None else dv)):
        if x % 8 or not 8 <= x <= MAX_HEAD_DIM:
            why = (f"exceeds {MAX_HEAD_DIM} (wider heads run only in the absorbed MLA decode, "
                   f"triton_decode with v=None and dv=)" if x > MAX_HEAD_DIM else
                   "is not a multiple of 8" if x % 8 else "is below 8")
            return (f"head dim {name}={x} {why}: {kernel} takes d and dv multiples of 8 "
                    f"from 8 to {MAX_HEAD_DIM}, run padded to a width of "
                    f"{'/'.join(map(str, KERNEL_WIDTHS))}")
    return None


def decode_head_dims_problem(d: int, dv: int, absorbed: bool,
                             kernel: str = "the Triton decode") -> str | None:
    """:func:`head_dims_problem` for the decode kernel: the absorbed MLA form (V is the
    cache's first dv columns) takes dv a multiple of 8 up to :data:`MAX_ABSORBED_DV` and a
    q.k tail d - dv a multiple of 8 up to :data:`MAX_HEAD_DIM`; the plain form the rule."""
    if not absorbed:
        return head_dims_problem(d, dv, kernel)
    tail = d - dv
    if dv % 8 or not 8 <= dv <= MAX_ABSORBED_DV or tail % 8 or not 8 <= tail <= MAX_HEAD_DIM:
        return (f"head dims d={d}, dv={dv}: the absorbed decode takes dv a multiple of 8 up "
                f"to {MAX_ABSORBED_DV} and a q.k tail d - dv a multiple of 8 up to "
                f"{MAX_HEAD_DIM} (DeepSeek: 576, 512)")
    return None


DECODE_MAX_ROWS = 128  # G x Nq query rows one decode program holds (absorbed: in blocks)


def decode_rows_problem(group: int, nq: int, kernel: str = "the Triton decode") -> str | None:
    """Why the decode kernel cannot take (H / Hkv) x Nq query rows per kv head (None: it
    can): one program holds them all, at most :data:`DECODE_MAX_ROWS`."""
    if group * nq <= DECODE_MAX_ROWS:
        return None
    return (f"(H / Hkv) x Nq = {group} x {nq} = {group * nq} query rows per kv head: "
            f"{kernel} holds at most {DECODE_MAX_ROWS} (fewer query heads per kv head or "
            "fewer speculative tokens)")


def decode_block_n(d: int, absorbed: bool = False) -> int:
    """The decode kernel's key block (triton_decode.decode_config): 32 keys in the absorbed
    MLA form and past d=128 (its padded width 256), else 64."""
    return 32 if absorbed or kernel_width(d) == 256 else 64


def decode_page_problem(page: int | None, d: int, absorbed: bool = False,
                        kernel: str = "the Triton decode") -> str | None:
    """Why the decode kernel cannot take pages of ``page`` keys (None: it can): a key
    block lies within one page or covers whole pages (check --decode ran ":p3" and read
    the kernel's own ValueError as a FAIL, a probe of 2026-12-07)."""
    block = decode_block_n(d, absorbed)
    if not page or page % block == 0 or block % page == 0:
        return None
    return (f"page_size={page}: {kernel}'s key block of {block} keys must lie within one "
            f"page or cover whole pages (a page size dividing {block} or a multiple of it)")


def validate_head_dims(d: int, dv: int | None = None, kernel: str = "the Triton kernel") -> None:
    """ValueError with :func:`head_dims_problem`'s line unless ``kernel`` takes d, dv."""
    problem = head_dims_problem(d, dv, kernel)
    if problem is not None:
        raise ValueError(problem)


def dim_constexprs(d: int, dv: int | None = None, least: int = 16) -> dict:
    """The head-dim constexprs of a launch: the compiled widths ``HEAD_DIM`` (q, k) and
    ``HEAD_DIM_V`` (v, o), the true ``D_QK`` and ``D_V``, and ``PAD_QK`` / ``PAD_V``
    (masked columns: False keeps the unpadded kernel's code unchanged)."""
    dv = d if dv is None else dv
    w, wv = kernel_width(d, least), kernel_width(dv, least)
    return dict(HEAD_DIM=w, HEAD_DIM_V=wv, D_QK=d, D_V=dv, PAD_QK=w != d, PAD_V=wv != dv)
