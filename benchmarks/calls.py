"""The float64 calls whose peak memory is measured, importable without torch.

common.peak_memory's child process imports this module (and, through it, common and
flashbench's reference and inputs) and nothing else: the suites that build their
skip_params from the backend registry import torch when they load (~200 MB more).
Each factory makes its inputs and returns the call as a zero-argument callable;
TimeBackward times the same backward on fresh inputs (bench_grad).
"""

import numpy as np

from .common import need, qkv, shape_of


def attention_call(shape, impl):
    """The float64 forward of ``impl`` ("one-shot": reference.attention, [N, N] scores;
    "streamed": reference.online_attention, block 64) on inputs of ``shape``."""
    fn = need("reference", "attention" if impl == "one-shot" else "online_attention")
    q, k, v = qkv(shape)
    return lambda: fn(q, k, v)


def backward_call(shape, causal, impl):
    """The float64 backward of ``impl`` on inputs of ``shape``: one-shot
    (reference.attention_grad: [N, N] S, P, dS) or streamed (online_attention_grad,
    block 64, given the forward's o and lse as a training step has them). q, k, v,
    dO (seed 1) and, for streamed, the forward's o and lse are made here."""
    if impl == "one-shot":
        grad = need("reference", "attention_grad")
    else:
        online, grad = need("reference", "online_attention", "online_attention_grad")
    q, k, v = qkv(shape)
    s = shape_of(shape)
    do = np.random.default_rng(1).standard_normal((s.B, s.H, s.Nq, s.head_dim_v))
    if impl == "one-shot":
        return lambda: grad(q, k, v, do, causal=causal)
    o, lse = online(q, k, v, causal=causal)
    return lambda: grad(q, k, v, o, lse, do, causal=causal)
