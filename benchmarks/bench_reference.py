"""CPU time of the float64 reference: one-shot vs streamed attention and softmax.

Inputs are made in setup (not timed). Units: seconds per call.
"""

import numpy as np

from .common import need, qkv


class TimeAttention:
    """One-shot (materialises [N, N] scores) vs streamed (block = 64) attention, B = H = 1."""

    params = ([1024, 4096], [64, 128], [False, True], ["one-shot", "streamed"])
    param_names = ["N", "d", "causal", "impl"]
    rounds = 1
    repeat = (3, 5, 4.0)
    number = 1

    def setup(self, N, d, causal, impl):
        self.q, self.k, self.v = qkv((1, 1, N, N, d))
        self.fn = need("reference", "attention" if impl == "one-shot" else "online_attention")

    def time_attention(self, N, d, causal, impl):
        self.fn(self.q, self.k, self.v, causal=causal)


class TimeStreamBlock:
    """Streamed attention at N = 4096, d = 64 across block sizes (keys per block)."""

    params = [16, 64, 256, 1024]
    param_names = ["block"]
    rounds = 1
    repeat = (3, 5, 4.0)
    number = 1

    def setup(self, block):
        self.q, self.k, self.v = qkv((1, 1, 4096, 4096, 64))
        self.fn = need("reference", "online_attention")

    def time_online_attention(self, block):
        self.fn(self.q, self.k, self.v, block=block)


class TimeSoftmax:
    """One-shot vs online (block = 64) softmax of a [256, N] float64 array."""

    params = ([1024, 16384], ["one-shot", "online"])
    param_names = ["N", "impl"]
    rounds = 1
    repeat = (3, 5, 4.0)

    def setup(self, N, impl):
        self.x = np.random.default_rng(0).standard_normal((256, N))
        if impl == "one-shot":
            self.fn = need("reference", "softmax")
        else:
            online = need("reference", "online_softmax")
            self.fn = lambda x: online(x, 64)

    def time_softmax(self, N, impl):
        self.fn(self.x)


class TimeModels:
    """Precision models at H = 8, N = 4096, d = 128 (the size the issue promises in seconds)."""

    params = (["flash_model", "standard_model"], ["fp32", "bf16"])
    param_names = ["model", "dtype"]
    rounds = 1
    repeat = (2, 2, 30.0)
    number = 1
    timeout = 300

    def setup(self, model, dtype):
        self.q, self.k, self.v = qkv((1, 8, 4096, 4096, 128))
        self.fn = need("numerics", model)

    def time_model(self, model, dtype):
        self.fn(self.q, self.k, self.v, dtype)
