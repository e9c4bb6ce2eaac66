"""Peak memory (bytes, whole process max RSS) of one-shot vs streamed attention.

B = H = 1, d = 64, float64. One-shot holds the [N, N] score matrix: O(N^2), 2 GiB
at N = 16384. Streamed holds one [N, 64] tile: O(N * block).
"""

from .common import need, qkv


class PeakmemAttention:
    params = ([1024, 4096, 16384], ["one-shot", "streamed"])
    param_names = ["N", "impl"]
    timeout = 300

    def setup(self, N, impl):
        self.q, self.k, self.v = qkv((1, 1, N, N, 64))
        self.fn = need("reference", "attention" if impl == "one-shot" else "online_attention")

    def peakmem_attention(self, N, impl):
        self.fn(self.q, self.k, self.v)
