"""An attention variant as data: which keys a query sees, how its scores are modified.

One :class:`Variant` (causal, sliding window, softcap, sinks) is shared by every path: the
float64 reference, the precision models, the Triton kernels and the torch peers read
the same visible-key range per row (:meth:`Variant.key_range`), the same row range per
key block (:meth:`Variant.row_range`) and the same score modifier, as flex_attention's
``mask_mod`` / ``score_mod`` (:meth:`Variant.mask_mod`). FlashAttention's conventions:
``window=(left, right)``, query i sees key j iff ``i + Nk - Nq - left <= j <= i + Nk - Nq +
right`` (-1 unbounded; ``causal=True`` caps ``right`` at 0); ``softcap=c`` (c > 0) makes
scores ``c * tanh(s / c)`` after scaling, before masking; ``sinks`` [H], one logit per
query head, join each row's softmax denominator and are dropped (LSE includes them). Blind
rows, sinks and packed batches in full: docs/variants.md ("The contract"). Packed
variable-length batches (``cu_seqlens``) are checked by :func:`check_cu_seqlens`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from flashbench.inputs.validation import check_causal

__all__ = ["Variant", "variant_of", "no_variant", "variant_kwargs", "check_cu_seqlens",
           "check_cu_pair"]


MAX_WINDOW = 2 ** 31 - 1  # a window side's largest value (an int32, as FlashAttention's)


def _check_window(window) -> tuple[int, int]:
    msg = "window must be (left, right): two ints >= -1 (-1: unbounded on that side)"
    if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
        raise TypeError(f"{msg}, got {window!r}")
    out = []
    for side, x in zip(("left", "right"), window, strict=True):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
            raise TypeError(f"{msg}; {side} is {type(x).__name__} {x!r}")
        if x < -1:
            raise ValueError(f"{msg}; {side} is {x}")
        if x > MAX_WINDOW:  # FlashAttention's window_size is int32; wider is unbounded
            raise ValueError(f"window sides must be at most {MAX_WINDOW} (an int32, as "
                             f"FlashAttention's window_size; -1: unbounded); {side} is {x}")
        out.append(int(x))
    return out[0], out[1]


def _check_softcap(softcap) -> float | None:
    if softcap is None:
        return None
    if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap must be a real number > 0 or None (no cap), got "
                        f"{type(softcap).__name__} {softcap!r}")
    if not np.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap must be finite and > 0 (None: no cap), got {softcap}")
    return float(softcap)


def _check_sinks(sinks) -> tuple[float, ...] | None:
    if sinks is None:
        return None
    if type(sinks).__module__.split(".")[0] == "torch":
        sinks = sinks.detach().cpu().double().numpy() if sinks.is_floating_point() else sinks
    arr = np.asarray(sinks)
    if arr.dtype.kind != "f" and str(arr.dtype) != "bfloat16":
        raise TypeError(f"sinks must be a float array of shape [H] (one logit per query "
                        f"head), got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise ValueError(f"sinks must have shape [H] (one logit per query head), got shape "
                         f"{arr.shape}")
    arr = arr.astype(np.float64)
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError("sinks must be finite or -inf (no sink), got nan or +inf")
    return tuple(float(x) for x in arr)


@dataclass(frozen=True)
class Variant:
    """A mask and score modifier (module docstring); build with :func:`variant_of`.

    ``sinks`` is held as a tuple of floats (hashable); :meth:`sink_logits` gives it as an
    array for a problem's H heads.
    """

    causal: bool = False
    window: tuple[int, int] = (-1, -1)
    softcap: float | None = None
    sinks: tuple[float, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "causal", check_causal(self.causal))
        object.__setattr__(self, "window", _check_window(self.window))
        object.__setattr__(self, "softcap", _check_softcap(self.softcap))
        object.__setattr__(self, "sinks", _check_sinks(self.sinks))

    # -- the mask: bounds of the visible keys --
    @property
    def left(self) -> int | None:
        """Keys visible before the aligned diagonal (None: unbounded)."""
        return None if self.window[0] < 0 else self.window[0]

    @property
    def right(self) -> int | None:
        """Keys visible after the aligned diagonal (None: unbounded); causal caps it at 0."""
        right = None if self.window[1] < 0 else self.window[1]
        return (0 if right is None else min(right, 0)) if self.causal else right

    @property
    def masked(self) -> bool:
        """True where some key may be hidden from some query (causal or a window)."""
        return self.left is not None or self.right is not None

    @property
    def plain(self) -> bool:
        """No window, softcap or sinks (causal or not): plain attention."""
        return self.window == (-1, -1) and self.softcap is None and self.sinks is None

    def key_range(self, nq: int, nk: int, r0: int = 0, r1: int | None = None) -> tuple[int, int]:
        """Keys ``[lo, hi)`` that some query row of ``[r0, r1)`` sees (lo >= hi: none)."""
        r1 = nq if r1 is None else r1
        offset = nk - nq
        lo = 0 if self.left is None else max(0, r0 + offset - self.left)
        hi = nk if self.right is None else min(nk, r1 - 1 + offset + self.right + 1)
        return lo, hi

    def row_range(self, nq: int, nk: int, start: int, stop: int) -> tuple[int, int]:
        """Query rows ``[r0, r1)`` that see some key of ``[start, stop)`` (r0 >= r1: none)."""
        offset = nk - nq
        r0 = 0 if self.right is None else max(0, start - offset - self.right)
        r1 = nq if self.left is None else min(nq, stop - 1 - offset + self.left + 1)
        return r0, r1

    def hidden(self, nq: int, nk: int, start: int = 0, stop: int | None = None,
               r0: int = 0, r1: int | None = None) -> np.ndarray | None:
        """Bool [r1 - r0, stop - start]: keys ``start..stop-1`` hidden from rows ``r0..r1-1``;
        None when every row of the range sees every key of it (no masking work)."""
        stop = nk if stop is None else stop
        r1 = nq if r1 is None else r1
        lo_last, _ = self.key_range(nq, nk, r1 - 1, r1)
        _, hi_first = self.key_range(nq, nk, r0, r0 + 1)
        if lo_last <= start and hi_first >= stop:
            return None
        rows = np.arange(r0, r1)[:, None]
        cols = np.arange(start, stop)[None, :]
        return ~self.mask_mod(0, 0, rows, cols, nq=nq, nk=nk)

    def mask_mod(self, b, h, q_idx, kv_idx, *, nq: int, nk: int):
        """flex_attention's ``mask_mod``: True where query ``q_idx`` sees key ``kv_idx``.
        Written with comparisons and ``&`` only: NumPy arrays and torch tensors alike."""
        offset = nk - nq
        ok = kv_idx >= 0
        if self.left is not None:
            ok = ok & (kv_idx >= q_idx + (offset - self.left))
        if self.right is not None:
            ok = ok & (kv_idx <= q_idx + (offset + self.right))
        return ok

    def visible_pairs(self, nq: int, nk: int) -> int:
        """Number of (query, key) pairs the mask leaves visible (FLOPs count only these)."""
        i = np.arange(nq)
        offset = nk - nq
        lo = np.zeros(nq, dtype=np.int64) if self.left is None else i + offset - self.left
        hi = np.full(nq, nk - 1) if self.right is None else i + offset + self.right
        return int((np.clip(hi, -1, nk - 1) - np.clip(lo, 0, nk) + 1).clip(0).sum())

    # -- the score modifier --
    def cap(self, s: np.ndarray, round_s=None) -> np.ndarray:
        """In place where possible: ``c * tanh(s / c)`` (no-op without a softcap). ``round_s``
        rounds each op's result, as a framework computing in a lower precision does."""
        if self.softcap is None:
            return s
        r = (lambda x: x) if round_s is None else round_s
        c = s.dtype.type(self.softcap)
        s = r(s / c)
        s = r(np.tanh(s, out=s))
        s *= c
        return r(s)

    def cap_grad(self, t: np.ndarray) -> np.ndarray:
        """d(capped)/d(uncapped) from capped scores t: ``1 - (t / c)^2``; 0 where t is -inf."""
        u = t / t.dtype.type(self.softcap)
        u *= u
        np.subtract(1, u, out=u)
        u[np.isneginf(t)] = 0
        return u

    # -- the sinks --
    def sink_logits(self, heads: int) -> np.ndarray | None:
        """The sinks as float64 [H, 1] (broadcasting against LSE [..., H, Nq]); None
        without sinks. ``heads``: the problem's query heads (1 for q without a head dim)."""
        if self.sinks is None:
            return None
        if len(self.sinks) != heads:
            raise ValueError(f"sinks must have shape [H] = ({heads},), one logit per query "
                             f"head, got ({len(self.sinks)},)")
        return np.asarray(self.sinks, dtype=np.float64)[:, None]

    def missing(self, takes) -> list[str]:
        """The features this variant sets ("window", "softcap", "sinks") not in ``takes``."""
        given = {"window": self.window != (-1, -1), "softcap": self.softcap is not None,
                 "sinks": self.sinks is not None}
        return [name for name, on in given.items() if on and name not in takes]

    def label(self) -> str:
        """Short text for tables: ``causal window=(128,0) softcap=30 sinks``; ``full``. A
        causal window's right side reads 0, as it applies (FlashAttention's own: causal sets
        it; a probe read ``causal window=(8,8)`` of a case judged as (8,0))."""
        parts = ["causal"] if self.causal else []
        if self.window != (-1, -1):
            right = -1 if self.right is None else self.right  # causal's cap, as it applies
            parts.append(f"window=({self.window[0]},{right})")
        if self.softcap is not None:
            parts.append(f"softcap={self.softcap:g}")
        if self.sinks is not None:
            parts.append("sinks")
        return " ".join(parts) or "full"


def no_variant(window=(-1, -1), softcap=None, sinks=None) -> bool:
    """True where the keywords ask for no window, softcap or sinks (the defaults)."""
    return softcap is None and sinks is None and isinstance(window, tuple) and window == (-1, -1)


def variant_of(causal=False, window=(-1, -1), softcap=None, sinks=None) -> Variant:
    """The :class:`Variant` of the keywords every path takes; a Variant passed as
    ``causal`` is returned as it is (internal helpers take either)."""
    if isinstance(causal, Variant):
        if not no_variant(window, softcap, sinks):
            raise ValueError("pass either a Variant or window/softcap/sinks, not both")
        return causal
    return Variant(causal=causal, window=window, softcap=softcap, sinks=sinks)


def variant_kwargs(variant: Variant | None) -> dict:
    """The keywords a backend gets for ``variant``: window, softcap, sinks where they differ
    from plain attention's (a backend without variants is called exactly as before)."""
    if variant is None:
        return {}
    kw = {"softcap": variant.softcap, "sinks": variant.sinks}
    kw = {k: x for k, x in kw.items() if x is not None}
    return kw if variant.window == (-1, -1) else {"window": variant.window, **kw}


def check_cu_seqlens(cu, name: str, total: int, max_seqlen=None) -> np.ndarray:
    """A packed batch's cumulative lengths: int [B + 1], 0 first, non-decreasing, ``total``
    last; lengths of 0 are allowed. ``max_seqlen`` (None: taken from the lengths) must be an
    int at least the longest length. Returns int64 cu."""
    if type(cu).__module__.split(".")[0] == "torch":
        cu = cu.detach().cpu().numpy()
    arr = np.asarray(cu)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an int array [B + 1], got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] < 2:
        raise ValueError(f"{name} must have shape [B + 1] with B >= 1, got shape {arr.shape}")
    arr = arr.astype(np.int64)
    if arr[0] != 0:
        raise ValueError(f"{name} must start at 0, got {arr[0]}")
    if (np.diff(arr) < 0).any():
        at = int(np.argmax(np.diff(arr) < 0))
        raise ValueError(f"{name} must be non-decreasing, got {arr[at]} then {arr[at + 1]} "
                         f"at index {at}")
    if arr[-1] != total:
        raise ValueError(f"{name} must end at the packed length {total}, got {arr[-1]}")
    if max_seqlen is not None:
        if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, numbers.Integral):
            raise TypeError(f"max_seqlen for {name} must be an int or None, got "
                            f"{type(max_seqlen).__name__}")
        longest = int(np.diff(arr).max())
        if max_seqlen < longest:
            raise ValueError(f"max_seqlen for {name} is {max_seqlen}, smaller than its "
                             f"longest sequence ({longest})")
    return arr


def check_cu_pair(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int, max_seqlen_q=None,
                  max_seqlen_k=None) -> tuple[np.ndarray, np.ndarray]:
    """Both cumulative lengths of a packed batch (:func:`check_cu_seqlens`), holding the same
    number of sequences; returns them as int64 arrays."""
    cu_q = check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", total_q, max_seqlen_q)
    cu_k = check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", total_k, max_seqlen_k)
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must hold the same number of "
                         f"sequences B + 1: got {cu_q.shape[0]} and {cu_k.shape[0]}")
    return cu_q, cu_k
