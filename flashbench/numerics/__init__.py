"""Precision models: where a flash kernel, and a plain framework implementation, round.

- :mod:`flashbench.numerics.forward`: :func:`flash_model` and :func:`standard_model`,
  the forward pass in every dtype of :mod:`flashbench.inputs.precision` (rounding points
  documented there).
- :mod:`flashbench.numerics.backward`: :func:`flash_model_grad` and
  :func:`standard_model_grad`, the backward pass (rounding points documented there).
- :mod:`flashbench.numerics.decode`: :func:`split_decode_model` (split-KV decode with
  partial states stored in fp32, bf16 or fp16) and :func:`standard_decode_model`.
- :mod:`flashbench.numerics.fp8`: FlashAttention-3's baseline FP8 attention and FP8
  forward (scales, incoherent processing), which ``flash_model`` / ``standard_model``
  run for the fp8 dtypes (forward only).

Public names are importable from here: ``flashbench.numerics.flash_model``.
"""

from flashbench.inputs.precision import DTYPES
from flashbench.numerics.backward import GRAD_DTYPES, flash_model_grad, standard_model_grad
from flashbench.numerics.decode import split_decode_model, standard_decode_model
from flashbench.numerics.forward import flash_model, standard_model

__all__ = ["flash_model", "standard_model", "DTYPES", "flash_model_grad",
           "standard_model_grad", "GRAD_DTYPES", "split_decode_model", "standard_decode_model"]
