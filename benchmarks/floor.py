"""The least time a CPU suite's timed call can take on this machine: faster fails.

A timed call of an attention suite (:class:`common.FreshCalls`) is clocked here around the
call alone, on ``time.perf_counter`` as it was when the suites loaded (before any commit's
code ran). Its work is at least the forward's FLOPs (2 x rows x (d + dv) x the visible
(query, key) pairs: a backward does more) and reading q, k and v once (every key is
visible to the last query row, causal or not); its floor is that work over the fastest
matmul of this process (numpy float64 and float32, torch float32, and torch in the
arguments' own dtype where they are 16-bit: this Xeon's AMX makes bf16 8x fp32) or the
copy bandwidth of a cache-resident 4 MiB array, whichever is longer. A call under
:data:`MARGIN` x the floor is confirmed against 1024^3 matmuls measured then (a 512^3 one
may read low), and fails its grid point (``KernelFailed`` in teardown): no honest kernel
beats the machine's own matmul, a cached or lazy answer does. On a GPU (the bench_gpu
suites) the call is clocked from an idle device to the device synchronised again, and the
floor is the device's: its bf16 and fp16 4096^3 matmuls (8192^3 to confirm) and a 256 MiB
device copy, host-clocked around a synchronisation, x 2 for fp8 arguments (Hopper's and
Blackwell's dense fp8 rate). Not judged: a window (which skips keys), decode and merge
calls, V laid out key-major (the fp8 suite). docs/speed.md.
"""

import re
import sys
import time

import numpy as np

clock = time.perf_counter  # the suites' own reference, taken when they load
MARGIN = 0.5  # as flashbench speed's FLOOR_MARGIN: a peak read on a busy machine is low
JUDGED_KEYWORDS = {"causal", "block", "softcap", "sinks"}  # none of these skips work
_SPEC = re.compile(r"^(\d+)x(\d+)(?:/(\d+))?x(\d+)(?:x(\d+))?x(\d+)(?:/(\d+))?$")
_ROOFS: dict = {}  # (matmul size, 16-bit torch dtype or None, device) -> (FLOP/s, B/s)


def _best(fn, repeats: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def roofline(n: int, half=None, device: str = "cpu") -> tuple[float, float]:
    """(the fastest n^3 matmul's FLOP/s, a copy's bytes/s), measured once a process."""
    key = (n, half, device)
    if key not in _ROOFS:
        _ROOFS[key] = _measure(n, half, device)
    return _ROOFS[key]


def _measure(n: int, half, device: str) -> tuple[float, float]:
    return _host_roofline(n, half) if device == "cpu" else _device_roofline(n, device)


def _host_roofline(n: int, half) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    mats = [rng.standard_normal((n, n)).astype(t) for t in (np.float64, np.float32)]
    torch = sys.modules.get("torch")  # measured where the suite loaded it, never imported
    if torch is not None:
        mats += [torch.from_numpy(mats[1]).to(t) for t in (torch.float32, half) if t]
    peak = max(2.0 * n**3 / _best(lambda a=a: a @ a) for a in mats)
    src = np.ones(2**19)  # 4 MiB: cache-resident, the faster (the looser floor)
    dst = np.empty_like(src)
    return peak, 2.0 * src.nbytes / _best(lambda: np.copyto(dst, src))


def _device_roofline(n: int, device: str) -> tuple[float, float]:
    torch = sys.modules["torch"]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def synced(fn):
        def run():
            fn()
            sync()
        sync()
        return run

    g = torch.Generator(device=device).manual_seed(0)
    peaks = []
    for dt in (torch.bfloat16, torch.float16):
        a = torch.randn(n, n, device=device, generator=g).to(dt)
        peaks.append(2.0 * n**3 / _best(synced(lambda a=a: a @ a)))
    src = torch.empty(2**26, device=device)  # 256 MiB
    dst = torch.empty_like(src)
    return max(peaks), 2.0 * src.numel() * 4 / _best(synced(lambda: dst.copy_(src)))


def work(spec: str, args, kwargs: dict):
    """(FLOPs, bytes) a call must at least do, or None where it is not judged (the module
    docstring). ``args[:3]`` are q, k and v as the suites pass them, or arrays of their
    sizes (a backward's dO in q's place): the bytes count three such arrays read once."""
    m = _SPEC.match(spec or "")
    if m is None or not set(kwargs) <= JUDGED_KEYWORDS or len(args) < 3:
        return None
    q, k, v = args[:3]
    b, h = int(m[1]), int(m[2])
    nq = int(m[4])
    nk, d = (int(m[5]), int(m[6])) if m[5] else (nq, int(m[6]))
    dv = int(m[7]) if m[7] else d
    if tuple(q.shape[-2:]) != (nq, d) or v.shape[-1] != dv:
        return None  # not laid out as the shape says: not judged rather than misjudged
    rows = np.arange(nq)
    pairs = int(np.clip(rows + nk - nq + 1, 0, nk).sum()) if kwargs.get("causal") else nq * nk
    nbytes = sum(x.nbytes if hasattr(x, "nbytes") else x.numel() * x.element_size()
                 for x in (q, k, v))
    return 2.0 * b * h * (d + dv) * pairs, float(nbytes)


def too_fast(seconds: float, flops: float, nbytes: float, dtype=None,
             device: str = "cpu") -> str | None:
    """Why a call of ``seconds`` is faster than this machine can go, else None."""
    torch = sys.modules.get("torch")
    half = dtype if torch is not None and dtype in (torch.float16, torch.bfloat16) else None
    fp8 = torch is not None and "float8" in str(dtype)
    small, large = (512, 1024) if device == "cpu" else (4096, 8192)
    for n in (small, large):  # the second only to confirm, measured anew (never a cached
        # peak read low on a busy machine)
        peak, bandwidth = roofline(n, half, device) if n == small else _measure(n, half, device)
        peak *= 2.0 if fp8 else 1.0
        floor = max(flops / peak, nbytes / bandwidth)
        if seconds >= MARGIN * floor:
            return None
    return (f"its fastest call took {seconds:.3g} s, under {MARGIN:g} x {floor:.3g} s, the "
            f"least this machine can do ({flops:.3g} FLOPs at {peak:.3g} FLOP/s, its fastest "
            f"{n}^3 matmul{' x 2 for fp8' if fp8 else ''}; {nbytes:.3g} bytes at "
            f"{bandwidth:.3g} B/s): a cached or lazy answer")
