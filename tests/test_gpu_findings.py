"""tools/gpu/findings.py's yardstick: errors in units of the fp32 result's ulp."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tools.gpu import findings

ARGS = st.floats(-40.0, 0.0, width=32)


@given(ARGS)
def test_a_correctly_rounded_exp2_is_within_half_an_ulp(x):
    x32 = np.array([x], dtype=np.float32)
    y32 = np.exp2(x32.astype(np.float64)).astype(np.float32)  # nearest fp32
    assert findings.ulp_errors(y32, x32)[0] <= 0.5


@given(ARGS, st.sampled_from([-1, 1]))
def test_one_ulp_off_reads_as_one_ulp(x, direction):
    x32 = np.array([x], dtype=np.float32)
    y32 = np.exp2(x32.astype(np.float64)).astype(np.float32)
    off = np.nextafter(y32, np.float32(np.inf * direction))
    assert 0.5 <= findings.ulp_errors(off, x32)[0] <= 1.5
