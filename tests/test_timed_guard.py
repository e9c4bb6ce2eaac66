"""The guarded timer's own price (issue 35, item 4): what timed_calls keeps of each output.

Before this change it kept every output itself until the checks, so each call's output took
fresh memory inside the clock (a 4 MiB output: up to 1,024 minor page faults a call) and the
kernel's freed buffers stayed out of reach. These failed then: the outputs stayed alive into
the next calls, the structural faults were left to the callers, no copy existed. What must
not change: a buffer the kernel still holds and returns again is STALE, a view of an input
ALIAS, a subclass or a sparse tensor LAZY, and the copies hold the outputs' values."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.multiprocessing.reductions import StorageWeakRef

from flashbench.timed import guard

MIB4 = 1 << 20  # float32 elements: 4 MiB


def _pool(n=MIB4, size=3, seed=5):
    return guard.Pool(lambda s: (torch.randn(n, generator=torch.Generator().manual_seed(s)),),
                      size, seed)


def test_outputs_are_copies_and_the_kernels_buffers_are_released():
    refs, outs = [], []

    def kernel(x):
        o = x * 2
        refs.append(StorageWeakRef(o.untyped_storage()))
        outs.append(o.clone())  # the values, held apart from the kernel's buffer
        return o

    batch = guard.timed_calls(kernel, _pool(), samples=6, warmup=1)
    assert not batch.faults
    assert all(r.expired() for r in refs)  # nothing keeps the kernel's outputs alive
    for kept, want in zip(batch.outputs, outs[1:], strict=True):
        assert type(kept) is torch.Tensor and torch.equal(kept, want)


def test_each_output_is_released_before_the_next_call_starts():
    """Its memory is the allocator's again when the next call allocates (whether the heap
    then reuses it is glibc's affair: scripts/speed_price.py counts the page faults)."""
    refs, alive = [], []

    def kernel(x):
        alive.append(sum(not r.expired() for r in refs))
        o = x * 2
        refs.append(StorageWeakRef(o.untyped_storage()))
        return o

    guard.timed_calls(kernel, _pool(), samples=6, warmup=2)
    assert alive == [0] * 8, alive  # kept until the checks: 2, 2, 3, 4, ... alive


@pytest.mark.parametrize("returned", [lambda c: c, lambda c: c[:-1], lambda c: c.detach()],
                         ids=["itself", "a view", "detached"])
def test_a_buffer_the_kernel_still_holds_is_stale_when_it_comes_back(returned):
    """The harness holds no output: the kernel's cache alone keeps the storage alive."""
    cache = {}

    def memo(x):
        key = x.data_ptr()
        if key not in cache:
            cache[key] = x * 2
        return returned(cache[key])  # the same storage, maybe another tensor object

    batch = guard.timed_calls(memo, _pool(1000), samples=6, warmup=0)
    assert guard.STALE in batch.faults, batch.faults


def test_structural_faults_are_named_and_the_faulty_output_kept_itself():
    class Lazy(torch.Tensor):
        pass

    alias = guard.timed_calls(lambda x: x[1:], _pool(1000), samples=3, warmup=0)
    assert guard.ALIAS in alias.faults and all(o._base is not None for o in alias.outputs)
    lazy = guard.timed_calls(lambda x: (x * 2).as_subclass(Lazy), _pool(1000), 3, warmup=0)
    assert guard.LAZY in lazy.faults and all(type(o) is Lazy for o in lazy.outputs)
    for fn in (lambda x: x.to_sparse(), lambda x: torch.empty(x.shape, device="meta")):
        sparse = guard.timed_calls(fn, _pool(1000), 3, warmup=0)
        assert guard.LAZY in sparse.faults, sparse.faults


def test_tuples_lists_and_none_keep_their_shape():
    batch = guard.timed_calls(lambda x: (x + 1, None), _pool(100), 3, warmup=0)
    assert not batch.faults
    assert all(type(o) is tuple and o[1] is None and o[0].shape == (100,)
               for o in batch.outputs)
    listed = guard.timed_calls(lambda x: [x + 1, x - 1], _pool(100), 3, warmup=0)
    assert not listed.faults and all(type(o) is list and len(o) == 2 for o in listed.outputs)


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn]


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(0, 7), min_size=1, max_size=4),
       dtype=st.sampled_from(DTYPES), transpose=st.booleans(), seed=st.integers(0, 2**31))
def test_a_copy_holds_the_same_bits_in_memory_of_its_own(dims, dtype, transpose, seed):
    x = torch.randn(dims, generator=torch.Generator().manual_seed(seed)).to(dtype)
    if transpose and x.dim() > 1:
        x = x.transpose(0, -1)
    c = guard._tensor(guard._copy(x))
    assert type(c) is torch.Tensor and c.shape == x.shape and c.dtype == x.dtype
    assert torch.equal(c.view(torch.uint8) if dtype.itemsize == 1 else c.float(),
                       x.contiguous().view(torch.uint8) if dtype.itemsize == 1 else x.float())
    if x.numel():
        assert guard._fault(c, (x,), []) is None  # no storage shared with the original


def test_inputs_drawn_on_the_device_are_the_cpu_draws_on_a_cpu_and_repeat():
    """The harness's own rows draw their inputs where they run (on a GPU: its generator,
    hundreds of times faster than the CPU draws that took a quarter of a speed run on an
    H200); a worker's stay CPU draws, rebuilt by the harness. On a CPU both are the same
    bits; on any device a seed gives the same inputs twice."""
    from flashbench.inputs import Shape
    from flashbench.timed.attention import attention_maker, grad_maker

    shape = Shape(1, 4, 8, 12, 16, Hkv=2)
    for maker in (attention_maker, grad_maker):
        here = maker(shape, "bf16", "cpu", "cpu")(7)
        there = maker(shape, "bf16", "cpu", "device")(7)
        assert all(torch.equal(a, b) for a, b in zip(here, there, strict=True))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    make = attention_maker(shape, "bf16", device, "device")
    assert all(torch.equal(a, b) for a, b in zip(make(3), make(3), strict=True))
    assert not torch.equal(make(3)[0], make(4)[0])
    with pytest.raises(ValueError, match="draw must be"):
        attention_maker(shape, "bf16", "cpu", "gpu")



def _set(i, value):
    def write(x):
        x[i] = value(x)
    return write


WRITES = {  # one change to an input, as a kernel could make it (on a float64 copy)
    "one element": _set(1, lambda x: x[1] + 1),
    "sign bit of a zero": _set(0, lambda x: -0.0 if x[0] == 0 else -x[0]),
    "zeroed": lambda x: x.zero_(),
    "scaled": lambda x: x.mul_(2),
    "two elements swapped": lambda x: x[:2].copy_(x[:2].flip(0).clone()),
    "two elements two apart swapped": lambda x: x.index_copy_(0, torch.tensor([0, 2]),
                                                              x[[2, 0]].clone()),
    "reversed (a layout change in place)": lambda x: x.copy_(x.flip(0).clone()),
}


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([torch.float64, torch.float32, torch.float16, torch.bfloat16,
                              torch.float8_e4m3fn, torch.int32]),
       n=st.integers(3, 300), write=st.sampled_from(sorted(WRITES)), arg=st.integers(0, 2),
       seed=st.integers(0, 2**31))
def test_a_kernel_that_writes_into_an_input_is_named_after_the_calls(dtype, n, write, arg,
                                                                     seed):
    """Pool.modified names the argument a kernel changed (any change of its bits, so that
    a zero's sign, a swap or a reordering counts: two plain sums missed every reordering
    that kept each word's index parity); a kernel that only reads leaves it None."""
    def make(s):
        g = torch.Generator().manual_seed(s)
        return tuple((torch.randn(n, generator=g) * 4).to(dtype) for _ in range(3))

    pool = guard.Pool(make, 3, seed)
    guard.timed_calls(lambda q, k, v: (q.float() + k.float() + v.float()), pool, 4, warmup=1)
    assert pool.modified() is None
    before = pool.slots[0][arg].clone()
    pool.used[0] = True
    x = before.double()
    WRITES[write](x)
    pool.slots[0][arg].copy_(x.to(dtype))
    if torch.equal(before.view(torch.uint8), pool.slots[0][arg].view(torch.uint8)):
        return  # the write changed no bit (a swap of equal values, a zero already negative)
    said = pool.modified()
    assert said is not None and said.startswith(f"{'qkv'[arg]} in 1 of"), said


def test_timed_calls_names_an_input_written_into():
    def kernel(q):
        o = q * 2
        q.add_(1)
        return o

    batch = guard.timed_calls(kernel, _pool(n=64, size=4), samples=6, warmup=1)
    assert guard.MODIFIED in batch.faults and batch.faults[guard.MODIFIED].startswith("q in ")


def test_a_non_tensor_output_is_not_called_a_lazy_subclass():
    """A kernel returning a numpy array read "(a subclass can compute when it is read)": a
    probe (2026-12-05) found that misleading; a subclass of torch.Tensor still reads so."""
    import numpy as np

    from flashbench.timed.guard import LAZY, structural

    q = torch.zeros(2, 3)
    name, why = structural(np.zeros((2, 3)), (q,))
    assert name == LAZY and "numpy.ndarray" in why and "subclass" not in why, why

    class Lazy(torch.Tensor):
        pass

    name, why = structural(torch.zeros(2, 3).as_subclass(Lazy), (q,))
    assert name == LAZY and "a subclass can compute when it is read" in why, why
