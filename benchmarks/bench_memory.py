"""Peak memory (bytes, whole process max RSS) of one-shot vs streamed attention.

B = H = 1, d = 64, float64. One-shot holds the [N, N] score matrix: O(N^2), 2 GiB
at N = 16384. Streamed holds one [N, 64] tile: O(N * block).
"""

from .common import Benchmark, need, qkv


class PeakmemAttention(Benchmark):
    params = (["1x1x1024x1024x64", "1x1x4096x4096x64", "1x1x16384x16384x64"], ["fp64"],
              ["one-shot", "streamed"])
    param_names = ["shape", "dtype", "impl"]
    timeout = 300

    def setup(self, shape, dtype, impl):
        self.q, self.k, self.v = qkv(shape)
        self.fn = need("reference", "attention" if impl == "one-shot" else "online_attention")

    def peakmem_attention(self, shape, dtype, impl):
        self.fn(self.q, self.k, self.v)
