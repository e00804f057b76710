"""lstm_cell, gru_cell, lstm, gru: forward through onnxruntime against numpy written here
(cells and a masked, bidirectional, multi-layer driver), numeric gradient checks to second
order with variable lengths, and shape errors. Layers are checked both unrolled and as scans."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

N, IN, H = 2, 3, 2


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale)


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


# numpy expectations, written independently of the traced code
def np_lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    gates = x @ w_ih.T + h @ w_hh.T + (0 if b_ih is None else b_ih) + (0 if b_hh is None else b_hh)
    i, f, g, o = (gates[:, k * h.shape[1]:(k + 1) * h.shape[1]] for k in range(4))
    c2 = np_sigmoid(f) * c + np_sigmoid(i) * np.tanh(g)
    return np_sigmoid(o) * np.tanh(c2), c2


def np_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    gi = x @ w_ih.T + (0 if b_ih is None else b_ih)
    gh = h @ w_hh.T + (0 if b_hh is None else b_hh)
    k = h.shape[1]
    r = np_sigmoid(gi[:, :k] + gh[:, :k])
    z = np_sigmoid(gi[:, k:2 * k] + gh[:, k:2 * k])
    n = np.tanh(gi[:, 2 * k:] + r * gh[:, 2 * k:])
    return (1 - z) * n + z * h


def np_layers(cell, xs, states, weights, lengths, directions, layers):
    """Per sequence, per layer and direction: run the cell over its own valid steps only."""
    steps, batch = xs.shape[:2]
    lengths = np.full(batch, steps) if lengths is None else lengths
    hidden = states[0].shape[2]
    finals = [np.zeros_like(s) for s in states]
    inp = xs
    for layer in range(layers):
        out = np.zeros((steps, batch, directions * hidden))
        for d in range(directions):
            k = layer * directions + d
            for n in range(batch):
                st = [s[k, n:n + 1] for s in states]
                order = range(lengths[n]) if d == 0 else reversed(range(lengths[n]))
                for t in order:
                    res = cell(inp[t, n:n + 1], *st, *weights[k])
                    st = list(res) if isinstance(res, tuple) else [res]
                    out[t, n, d * hidden:(d + 1) * hidden] = st[0][0]
                for f, s in zip(finals, st):
                    f[k, n] = s[0]
        inp = out
    return [inp] + finals


def make_weights(gates, layers, directions, biases=True, seed=1):
    rng = np.random.default_rng(seed)
    weights = []
    for layer in range(layers):
        in_size = IN if layer == 0 else directions * H
        for _ in range(directions):
            w = [rng.standard_normal((gates * H, in_size)) * 0.7, rng.standard_normal((gates * H, H)) * 0.7]
            bias = [rng.standard_normal(gates * H) * 0.3, rng.standard_normal(gates * H) * 0.3]
            w += bias if biases else [None, None]
            weights.append(w)
    return weights


def flat(weights):
    return [w for ws in weights for w in ws if w is not None]


def unflat(arrays, biases=True):
    step = 4 if biases else 2
    return [list(arrays[i:i + step]) + ([] if biases else [None, None]) for i in range(0, len(arrays), step)]


# -- cells ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("biases", [True, False])
def test_lstm_cell_forward(dtype, biases):
    x, h, c = rand(N, IN), rand(N, H, seed=1), rand(N, H, seed=2)
    w = make_weights(4, 1, 1, biases)[0]
    arrays = [a.astype(dtype) for a in [x, h, c] + [v for v in w if v is not None]]
    expected = np_lstm_cell(x, h, c, *w)

    def fn(x, h, c, *ws):
        return F.lstm_cell(x, h, c, *ws)
    check_forward(fn, arrays, [e.astype(dtype) for e in expected], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("biases", [True, False])
def test_gru_cell_forward(dtype, biases):
    x, h = rand(N, IN), rand(N, H, seed=1)
    w = make_weights(3, 1, 1, biases)[0]
    arrays = [a.astype(dtype) for a in [x, h] + [v for v in w if v is not None]]
    check_forward(lambda x, h, *ws: F.gru_cell(x, h, *ws), arrays,
                  np_gru_cell(x, h, *w).astype(dtype), rtol=1e-5, atol=1e-6)


def test_cells_symbolic_batch():
    w4, w3 = make_weights(4, 1, 1)[0], make_weights(3, 1, 1)[0]
    x, h, c = rand(5, IN), rand(5, H, seed=1), rand(5, H, seed=2)
    w4, w3 = [a.astype(np.float32) for a in w4], [a.astype(np.float32) for a in w3]
    x, h, c = (a.astype(np.float32) for a in (x, h, c))
    expected = [*np_lstm_cell(x, h, c, *w4), np_gru_cell(x, h, *w3)]
    check_forward(lambda x, h, c: (*F.lstm_cell(x, h, c, *w4), F.gru_cell(x, h, *w3)), [x, h, c],
                  [e.astype(np.float32) for e in expected],
                  specs=[gc.spec(("batch", IN)), gc.spec(("batch", H)), gc.spec(("batch", H))])


def test_cells_grads():
    x, h, c = rand(N, IN), rand(N, H, seed=1), rand(N, H, seed=2)
    check_grads(lambda x, h, c, *ws: F.lstm_cell(x, h, c, *ws), [x, h, c, *make_weights(4, 1, 1)[0]])
    check_grads(lambda x, h, *ws: F.gru_cell(x, h, *ws), [x, h, *make_weights(3, 1, 1)[0]])


def test_cell_shape_errors():
    w = make_weights(4, 1, 1)[0]
    with pytest.raises(gc.ShapeError, match=r"w_ih must be \(8, 3\)"):
        gc.compile(lambda x, h, c: F.lstm_cell(x, h, c, w[0][:, :2], w[1]), rand(N, IN), rand(N, H), rand(N, H))
    with pytest.raises(gc.ShapeError, match="expected 4 weight tuples"):
        gc.compile(lambda xs, h: F.gru(xs, h, make_weights(3, 1, 2), num_layers=2, bidirectional=True),
                   rand(3, N, IN), rand(4, N, H))


# -- layers ---------------------------------------------------------------------------------------
LAYER_CASES = [  # (bidirectional, layers, lengths, biases)
    (False, 1, None, True),
    (True, 1, [3, 1], False),
    (False, 2, [2, 3], True),
    (True, 2, [3, 2], True),
]


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional,layers,lengths,biases", LAYER_CASES)
def test_layers_forward(kind, bidirectional, layers, lengths, biases):
    directions = 2 if bidirectional else 1
    gates, cell = (4, np_lstm_cell) if kind == "lstm" else (3, np_gru_cell)
    weights = make_weights(gates, layers, directions, biases)
    xs = rand(3, N, IN)
    states = [rand(layers * directions, N, H, seed=s) for s in range(2 if kind == "lstm" else 1)]
    lens = None if lengths is None else np.array(lengths, np.int64)
    expected = np_layers(cell, xs, states, weights, lens, directions, layers)

    def fn(xs, *rest):
        n_states = len(states)
        sts, ws = rest[:n_states], unflat(rest[n_states + (lens is not None):], biases)
        ln = rest[n_states] if lens is not None else None
        layer_fn = F.lstm if kind == "lstm" else F.gru
        return layer_fn(xs, *sts, ws, lengths=ln, bidirectional=bidirectional, num_layers=layers)
    arrays = [a.astype(np.float32) for a in [xs, *states]] + ([lens] if lens is not None else []) \
        + [a.astype(np.float32) for a in flat(weights)]
    check_forward(fn, arrays, [e.astype(np.float32) for e in expected], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_layers_grads_bidirectional_two_layers_variable_lengths(kind):
    gates = 4 if kind == "lstm" else 3
    weights = flat(make_weights(gates, 2, 2))
    xs, lens = rand(3, N, IN), np.array([3, 2], np.int64)
    states = [rand(4, N, H, seed=s) for s in range(2 if kind == "lstm" else 1)]

    def fn(xs, lens, *rest):
        sts, ws = rest[:len(states)], unflat(rest[len(states):])
        layer_fn = F.lstm if kind == "lstm" else F.gru
        return layer_fn(xs, *sts, ws, lengths=lens, bidirectional=True, num_layers=2)
    check_grads(fn, [xs, lens, *states, *weights])


def test_lstm_symbolic_batch_with_lengths():
    weights = make_weights(4, 1, 2)
    w32 = [[a.astype(np.float32) for a in w] for w in weights]
    xs, h0, c0 = (rand(*s, seed=k).astype(np.float32) for k, s in enumerate([(4, 3, IN), (2, 3, H), (2, 3, H)]))
    lens = np.array([4, 1, 3], np.int64)
    expected = np_layers(np_lstm_cell, xs.astype(np.float64), [h0, c0], weights, lens, 2, 1)
    check_forward(lambda xs, h0, c0, lens: F.lstm(xs, h0, c0, w32, lens, bidirectional=True), [xs, h0, c0, lens],
                  [e.astype(np.float32) for e in expected],
                  specs=[gc.spec((4, "batch", IN)), gc.spec((2, "batch", H)), gc.spec((2, "batch", H)),
                         gc.spec(("batch",), "int64")])


def test_a_layer_loops_in_one_scan_per_direction_on_every_target():
    weights = [[a.astype(np.float32) for a in w] for w in make_weights(4, 2, 2)]
    steps = 9
    xs, h0 = rand(steps, N, IN).astype(np.float32), rand(4, N, H).astype(np.float32)
    fn = lambda xs, h0: F.lstm(xs, h0, h0, weights, bidirectional=True, num_layers=2)   # noqa: E731
    for target, length, scans in (("portable", steps, 4), ("ort-cpu", steps, 4), ("ort-cpu", 3, 4)):
        cf = gc.compile(fn, xs[:length], h0, target=target)
        assert sum(n.op_type == "Scan" for n in cf.model.graph.node) == scans, (target, length)
        expected = np_layers(np_lstm_cell, xs[:length].astype(np.float64), [h0, h0], weights, None, 2, 2)
        for got, want in zip(cf(xs[:length], h0), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
