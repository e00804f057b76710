"""examples/ctc_lstm.py: a few plain gradient-descent steps through gc.compile lower the CTC loss."""
import importlib.util
import itertools
import os

import numpy as np

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "examples", "ctc_lstm.py")


def load_example():
    spec = importlib.util.spec_from_file_location("ctc_lstm_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gradient_descent_lowers_the_ctc_loss():
    losses = load_example().main(steps=8)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0]
    assert all(b < a for a, b in itertools.pairwise(losses[:5]))
