"""A preamble for a fresh process: torch acts as a CUDA build whose NVML sees one GPU, and
every call that would initialise CUDA is appended to ``calls`` (with no GPU here, this is
how a test shows that a process which later forks workers never initialised CUDA)."""

RECORDER = """
import json, torch, torch.cuda
calls = []
torch.cuda._is_compiled = lambda: True          # act as a CUDA build ...
torch.cuda._device_count_nvml = lambda: 1       # ... whose NVML sees one GPU
torch._C._cuda_getDeviceCount = lambda: calls.append("cudaGetDeviceCount") or 1
torch.cuda._lazy_init = lambda: calls.append("torch.cuda._lazy_init")
torch._C._cuda_init = lambda: calls.append("torch._C._cuda_init")
"""
