"""The inputs of a timed decode call, made from one content seed, the same in any process:
the harness and a user's worker build the pool from the case's parameters as plain data
(:func:`decode_params`), so neither needs the other's modules (a worker imports nothing of
flashbench.measure), and :func:`hand_decode` is the one place a decode case's float64 inputs
become the tensors a backend is handed (check --decode hands them so too)."""

from __future__ import annotations

from flashbench.inputs import precision
from flashbench.inputs.kvcache import make_decode
from flashbench.inputs.precision import get_precision

__all__ = ["decode_params", "decode_arrays", "hand_decode", "decode_maker"]

PARAMS = ("B", "H", "Hkv", "Nq", "d", "dv", "lens", "page_size", "dist", "absorbed")


def decode_params(case) -> dict:
    """A decode case (``flashbench.measure.decode.DecodeCase``) as plain data."""
    out = {name: getattr(case, name) for name in PARAMS}
    out["lens"] = [int(n) for n in out["lens"]]
    return out


def decode_arrays(params: dict, seed: int):
    """float64 ``(q, k_cache, v_cache, cache_seqlens, block_table)`` of the case
    (absorbed MLA form: v_cache a view of k_cache's first dv columns)."""
    p = params
    q, k, v, lens, table = make_decode(p["B"], p["H"], p["Hkv"], p["Nq"], p["d"], p["lens"],
                                       p["page_size"], dist=p["dist"], seed=seed, dv=p["dv"])
    return q, k, k[..., :p["dv"]] if p["absorbed"] else v, lens, table


def hand_decode(dtype, inputs, absorbed: bool) -> list:
    """Fresh torch copies of a case's float64 inputs for one backend call: q, k_cache,
    v_cache in ``dtype``, rounded by NumPy first (torch rounds float64 to fp16 / bf16
    through fp32, twice: docs/decode.md; fp8 dtypes unrounded, their kernels scale them),
    cache_seqlens and block_table (or None) as int32; ``absorbed``: V handed as a view of
    K's first dv columns, as FlashMLA takes it."""
    import torch

    from flashbench.timed.attention import torch_dtype

    prec = get_precision(dtype)
    dt = torch_dtype(prec)
    fp8 = prec.name in tuple(getattr(precision, "FP8_DTYPES", ()))
    q, k, v, lens, table = inputs

    def hand(x):
        return torch.tensor(x if fp8 else prec.store(x).astype("float64"), dtype=dt)

    ints = [None if x is None else torch.tensor(x, dtype=torch.int32) for x in (lens, table)]
    if absorbed:
        tq, tk = hand(q), hand(k)
        return [tq, tk, tk[..., :v.shape[-1]], *ints]
    return [hand(q), hand(k), hand(v), *ints]


def decode_maker(params: dict, dtype: str, device: str = "cpu"):
    """``make(seed)``: the handed tensors of the case on ``device``."""
    def make(seed: int) -> tuple:
        handed = hand_decode(dtype, decode_arrays(params, seed), params["absorbed"])
        return tuple(None if t is None else t.to(device) for t in handed)

    return make
