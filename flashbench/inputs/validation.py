"""Argument checks shared by the NumPy reference and the precision models.

Every check raises TypeError (wrong kind of thing) or ValueError (right kind, wrong
value or shape) with a message that names the argument and what was expected.

Grouped-query attention (GQA; MQA with one kv head): k and v may have Hkv heads in
dimension -3 where Hkv divides q's H heads; query head h reads kv head
``h // (H // Hkv)``. :func:`kv_group` finds the group size G = H // Hkv and
:func:`grouped_query` runs a NumPy attention function on the grouped layout
q [..., Hkv, G, Nq, d] against k [..., Hkv, 1, Nk, d], which broadcasts over the
group without an expanded copy of k and v. The head-count rule itself,
:func:`head_group`, works on plain ints: the torch side
(:func:`flashbench.kernels.validate.kv_group`) applies the same rule.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np


@functools.cache
def _extra_floats() -> frozenset:
    """Real formats numpy knows only through ml_dtypes (kind "V"); ml_dtypes is imported
    only when such an array is seen (it costs about 0.6 s a process)."""
    import ml_dtypes

    return frozenset(np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn))


def as_float_array(x, name: str, dtype=np.float64) -> np.ndarray:
    """Convert a real numeric array-like to ``dtype``; TypeError for anything else.

    A torch tensor is refused by name (without importing torch): the NumPy side
    takes NumPy arrays, and a tensor on a GPU or one that requires grad would fail
    deep inside numpy.
    """
    if type(x).__module__.split(".")[0] == "torch":
        raise TypeError(f"{name} is a {type(x).__module__}.{type(x).__name__}; the NumPy "
                        f"reference and models take NumPy arrays: pass "
                        f"{name}.detach().cpu().numpy()")
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if not (kind in "fiu" or (kind == "V" and arr.dtype in _extra_floats())):
        raise TypeError(
            f"{name} must be a real numeric array (float, int or bfloat16), got dtype {arr.dtype}"
        )
    return arr.astype(dtype, copy=False)


MAX_BLOCK = 2 ** 31 - 1  # a streaming block's largest size


def check_block(block) -> int:
    """A streaming block size: an int >= 1."""
    if isinstance(block, bool) or not isinstance(block, numbers.Integral):
        raise TypeError(f"block must be an int >= 1, got {type(block).__name__} {block!r}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    if block > MAX_BLOCK:  # past any sequence a block is the whole sequence
        raise ValueError(f"block must be at most {MAX_BLOCK} (an int32), got {block}")
    return int(block)


def check_scale(scale, d: int) -> float:
    """The softmax scale: None means 1/sqrt(d); otherwise a finite real number."""
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def check_causal(causal) -> bool:
    """The causal flag: True or False (a bool or a NumPy bool); TypeError for anything
    else (``"False"`` is a non-empty string, which ``if causal:`` would take as True)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False (a bool), got "
                        f"{type(causal).__name__} {causal!r}")
    return bool(causal)


DEFAULT_TIME_LIMIT = 300.0  # seconds per call of a user's kernel (an import, a forward, ...)


def check_time_limit(seconds) -> float:
    """A per-call time limit (``flashbench check --timeout``): seconds > 0."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not seconds > 0:
        raise ValueError(f"time limit must be > 0 seconds, got {seconds!r}")
    return float(seconds)


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} has {bad} non-finite value(s) (inf or nan)")


def check_rows(x, name: str = "x", dtype=np.float64, finite: bool = False) -> np.ndarray:
    """A softmax input: at least 1-D with a non-empty last axis."""
    arr = as_float_array(x, name, dtype)
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"{name} must have shape [..., N] with N >= 1, got shape {arr.shape}")
    if finite:
        check_finite(arr, name)
    return arr


def check_qkv(q, k, v, dtype=np.float64, finite: bool = False):
    """Validate q [..., Nq, d], k [..., Nk, d], v [..., Nk, dv] and return them as ``dtype``.

    Leading dims must broadcast against each other like numpy matmul, except that k
    and v may have Hkv heads (dim -3) where Hkv divides q's H (grouped-query
    attention, :func:`kv_group`). With ``finite=True`` any inf or nan in the inputs
    is a ValueError.
    """
    q = as_float_array(q, "q", dtype)
    k = as_float_array(k, "k", dtype)
    v = as_float_array(v, "v", dtype)
    for name, arr, want in (("q", q, "[..., Nq, d]"), ("k", k, "[..., Nk, d]"),
                            ("v", v, "[..., Nk, dv]")):
        if arr.ndim < 2:
            raise ValueError(f"{name} must have shape {want} (at least 2-D), got shape {arr.shape}")
        if 0 in arr.shape[-2:]:
            raise ValueError(f"{name} must have non-empty last two dims {want}, got {arr.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the head dim d: q has d={q.shape[-1]} (shape {q.shape}), "
            f"k has d={k.shape[-1]} (shape {k.shape})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must share the key count Nk: k has Nk={k.shape[-2]} (shape {k.shape}), "
            f"v has Nk={v.shape[-2]} (shape {v.shape})"
        )
    lead = 3 if kv_group(q.shape, k.shape, v.shape) > 1 else 2  # heads checked by kv_group
    try:
        np.broadcast_shapes(q.shape[:-lead], k.shape[:-lead], v.shape[:-lead])
    except ValueError:
        raise ValueError(
            f"leading (batch) dims of q {q.shape[:-lead]}, k {k.shape[:-lead]} and v "
            f"{v.shape[:-lead]} do not broadcast"
        ) from None
    if finite:
        for name, arr in (("q", q), ("k", k), ("v", v)):
            check_finite(arr, name)
    return q, k, v


def _heads(shape: tuple[int, ...]) -> int | None:
    return shape[-3] if len(shape) >= 3 else None


def head_group(h: int, hk: int, hv: int, *, broadcast: bool = False, where: str = "") -> int:
    """The grouped-query rule on head counts, shared by the NumPy and the torch side: k and
    v have one head count Hkv, and Hkv divides q's H. Returns G = H // Hkv.

    ``broadcast``: a count of 1 on either side is plain broadcasting (G = 1), as NumPy's
    matmul treats it. ``where`` says which dim holds the heads (" (dim -3)"). ValueError
    naming both counts otherwise.
    """
    if hk != hv:
        raise ValueError(f"k and v must have the same number of heads{where}: k has {hk}, "
                         f"v has {hv}")
    if broadcast and 1 in (h, hk):
        return 1
    if hk < 1 or h % hk:
        raise ValueError(f"k and v have Hkv={hk} heads{where}, which must divide q's H={h} "
                         f"heads (grouped-query attention: query head h reads kv head "
                         f"h // (H // Hkv))")
    return h // hk


def kv_group(q_shape, k_shape, v_shape) -> int:
    """Query heads per kv head, G = H // Hkv, from the shapes of q, k and v (dim -3).

    1 where no grouping is needed: equal head counts, or a count of 1 that plain
    broadcasting handles (Hkv == 1 is multi-query attention; a 2-D array has no head
    dim). ValueError naming both counts (:func:`head_group`) when k and v have different
    head counts or Hkv does not divide H.
    """
    h, hk, hv = _heads(tuple(q_shape)), _heads(tuple(k_shape)), _heads(tuple(v_shape))
    if hk is None or hv is None:  # a 2-D k or v broadcasts against the other's heads
        hk = hv = hk if hk is not None else hv
    if hk is None:
        return 1
    try:
        return head_group(hk if h is None else h, hk, hv, broadcast=True, where=" (dim -3)")
    except ValueError as err:
        raise ValueError(f"{err}; shapes q {tuple(q_shape)}, k {tuple(k_shape)}, "
                         f"v {tuple(v_shape)}") from None


def split_heads(x: np.ndarray, group: int, axis: int) -> np.ndarray:
    """[..., H, *tail] -> [..., H // group, group, *tail], the head axis at ``axis`` (< 0)."""
    axis = x.ndim + axis
    return x.reshape(x.shape[:axis] + (x.shape[axis] // group, group) + x.shape[axis + 1:])


def merge_heads(x: np.ndarray, axis: int) -> np.ndarray:
    """Inverse of :func:`split_heads`: the two axes ``axis - 1`` and ``axis`` (< 0) become one."""
    axis = x.ndim + axis
    return x.reshape(x.shape[:axis - 1] + (x.shape[axis - 1] * x.shape[axis],)
                     + x.shape[axis + 1:])


def grouped_query(fn):
    """Let ``fn(q, k, v, ...) -> (o [..., Nq, dv], lse [..., Nq])`` take grouped-query k, v.

    Where k and v have fewer heads than q (:func:`kv_group`), ``fn`` runs on q
    [..., Hkv, G, Nq, d] and k, v [..., Hkv, 1, Nk, *] (views where the arrays allow)
    and o, lse are merged back to H heads: equal to the expanded computation, without
    expanding k and v; a ``sink`` keyword (per-head logits [H, 1]) is split with q's heads.
    Arguments are validated (:func:`check_qkv`) before anything
    else, so errors read as they do without grouping.
    """

    @functools.wraps(fn)
    def wrapper(q, k, v, *args, **kwargs):
        q, k, v = check_qkv(q, k, v)
        group = kv_group(q.shape, k.shape, v.shape)
        if group == 1:
            return fn(q, k, v, *args, **kwargs)
        if kwargs.get("sink") is not None:  # per-head sink logits [H, 1]
            kwargs["sink"] = split_heads(kwargs["sink"], group, -2)
        o, lse = fn(split_heads(q, group, -3), k[..., None, :, :], v[..., None, :, :],
                    *args, **kwargs)
        return merge_heads(o, -3), merge_heads(lse, -2)

    return wrapper


def sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``x`` over the axes along which an array of ``shape`` was broadcast to x's shape.

    The gradient of a broadcast input: leading axes ``shape`` lacks, and axes where
    ``shape`` has 1 and x does not, are summed; the result has exactly ``shape``.
    """
    extra = x.ndim - len(shape)
    if extra:
        x = x.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def attention_shape(q_shape, k_shape, v_shape) -> tuple[int, ...]:
    """Shape of attention's output o for validated q, k, v shapes: [..., (H,) Nq, dv]."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    lead = 3 if kv_group(q_shape, k_shape, v_shape) > 1 else 2
    batch = np.broadcast_shapes(q_shape[:-lead], k_shape[:-lead], v_shape[:-lead])
    return batch + q_shape[-lead:-2] + (q_shape[-2], v_shape[-1])


def check_shaped(x, name: str, shape: tuple[int, ...], what: str, dtype=np.float64,
                 finite: bool = False) -> np.ndarray:
    """A real array of exactly ``shape`` (``what`` says whose shape that is), as ``dtype``."""
    arr = as_float_array(x, name, dtype)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have {what} {tuple(shape)}, got shape {arr.shape}")
    if finite:
        check_finite(arr, name)
    return arr


def grouped_grad(fn, q, k, v, rows, **kwargs):
    """Run a backward ``fn(q, k, v, *rows, **kwargs) -> (dq, dk, dv)`` on validated arrays,
    grouping query heads where k and v have fewer (:func:`kv_group`).

    ``rows``: per-query-row arrays with their head axis, ``((o, -3), (lse, -2), (do, -3))``
    (None passes through).
    Grouped, ``fn`` sees q and rows split to [..., Hkv, G, ...] and k, v as
    [..., Hkv, 1, Nk, *]; it must return dk, dv with those k, v shapes (summed over the
    group, as :func:`sum_to` does), and the inserted axis is dropped again.
    """
    group = kv_group(q.shape, k.shape, v.shape)
    if group == 1:
        return fn(q, k, v, *(x for x, _ in rows), **kwargs)
    dq, dk, dv = fn(split_heads(q, group, -3), k[..., None, :, :], v[..., None, :, :],
                    *(None if x is None else split_heads(x, group, axis) for x, axis in rows),
                    **kwargs)
    return merge_heads(dq, -3), dk[..., 0, :, :], dv[..., 0, :, :]
