"""Peak memory (bytes) of one-shot vs streamed float64 attention, each call measured in a
fresh process.

B = H = 1, d = 64, float64. One-shot holds the [N, N] score matrix: O(N^2), 2 GiB
at N = 16384. Streamed holds one [N, 64] tile: O(N * block).

The number is the peak resident memory (VmHWM) of a fresh child process
(common.peak_memory: ``sys.executable``, the same environment) that imports numpy,
flashbench's reference and inputs (benchmarks/calls.py, no torch), makes the inputs
and makes the call once: it includes that baseline (interpreter + numpy + the
flashbench modules, about 35 MB here) and the inputs (q, k, v: 3 * N * 64 * 8 bytes,
25 MB at N = 16384), as asv's spawn-mode ``peakmem_`` did. Not a ``peakmem_``
benchmark: under asv's forkserver (asv.conf.json) a benchmark process is forked from a
server that imported every suite (about 240 MB) and its peak would include that.
"""

from . import calls
from .common import Benchmark, need, peak_memory, require_peak_memory


class PeakmemAttention(Benchmark):
    params = (["1x1x1024x1024x64", "1x1x4096x4096x64", "1x1x16384x16384x64"], ["fp64"],
              ["one-shot", "streamed"])
    param_names = ["shape", "dtype", "impl"]
    timeout = 600

    def setup(self, shape, dtype, impl):
        require_peak_memory()
        need("reference", "attention" if impl == "one-shot" else "online_attention")
        need("inputs", "make_qkv")

    def track_peak_memory(self, shape, dtype, impl):
        return peak_memory(calls.__name__, "attention_call", [shape, impl], self.timeout - 60)

    track_peak_memory.unit = "bytes"
