"""The float64 truth: softmax and attention, one-shot (:mod:`.oneshot`) and streamed.

:mod:`.streaming` holds the forward (m, l) recurrence, :mod:`.streaming_bwd`
FlashAttention-2's backward recurrence, :mod:`.decode` attention over a KV cache (contiguous
or paged, split-KV and :func:`merge_states`), :mod:`.varlen` packed variable-length batches.
Every function computes in float64; attention takes the variants of
:mod:`flashbench.inputs.variant` (window, softcap, sinks).
"""

from flashbench.reference.decode import decode_attention, decode_partials, merge_states
from flashbench.reference.oneshot import (
    attention,
    attention_grad,
    online_attention,
    online_attention_grad,
    online_softmax,
    row_stats,
    softmax,
)
from flashbench.reference.varlen import (
    online_varlen_attention,
    online_varlen_attention_grad,
    varlen_attention,
    varlen_attention_grad,
)

__all__ = ["attention", "attention_grad", "online_attention", "online_attention_grad",
           "online_softmax", "row_stats", "softmax",
           "decode_attention", "decode_partials", "merge_states"]
__all__ += ["varlen_attention", "online_varlen_attention", "varlen_attention_grad",
            "online_varlen_attention_grad"]
