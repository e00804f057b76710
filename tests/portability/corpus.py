"""The portability corpus: small versions of the models users deploy, as a `gcompile build` model file.

Each `@gc.export` / `@gc.export_train` function here is built exactly as `gcompile build` builds it
(the `portable` target, the default for artifacts) and run on every runtime of
tests/portability/runtimes.py. They are chosen for the constructs they lower to: second-order
gradients of an MLP, a conv net (convolution, relu, max pooling) and a pair potential, loops (an
LSTM's forward and reverse Scans; counted loops with nothing to scan over; a scan RNN's Hessian-
vector product, over a symbolic number of steps, so its Scans sit in Ifs), batch norm and Adam in
one training step, dropout's keyed masks in a training step (in a loop too), attention with layer
norm and gelu, an imported ONNX model, grouped and depthwise convolutions' gradients (grouped
transposed convolutions), cumprod, sorting and pooling with ceil_mode, and imported sampling,
pooling and Fourier ops with integer bit operations. Sizes are small: the whole corpus runs on
every runtime in seconds.

Outputs that differ between runtimes by design (cnn_bn_adam's conv1 bias) are listed in
harness.LOOSE.
"""
import os

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile import nn

rng = np.random.default_rng(36)


def _normal(*shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# -- WGAN-GP: the gradient of a penalty on the critic's input gradient (second order) -------------------------
CRITIC = {"w1": _normal(12, 32, scale=0.3), "b1": _normal(32, scale=0.1), "w2": _normal(32, 1, scale=0.2)}


@gc.export(real=gc.spec(("batch", 12)), fake=gc.spec(("batch", 12)), mix=gc.spec(("batch", 1)), params=CRITIC)
def gradient_penalty(real, fake, mix, params):
    """WGAN-GP: the critic at points between real and fake samples, the penalty on the norm of its
    input gradient, and the penalty's gradient w.r.t. the critic's parameters."""
    x = mix * real + (1 - mix) * fake
    critic = F.softplus(x @ params["w1"] + params["b1"]) @ params["w2"]
    gx, = gc.grad(F.sum(critic), [x])
    penalty = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
    return {"penalty": penalty, "grads": gc.grad(penalty, params)}


# -- an LSTM's gradient (F.lstm: a forward Scan, its VJP a reverse one) ----------------------------------------
HIDDEN = 6
LSTM = {"w_ih": _normal(4 * HIDDEN, 5, scale=0.4), "w_hh": _normal(4 * HIDDEN, HIDDEN, scale=0.4),
        "b_ih": _normal(4 * HIDDEN, scale=0.1), "b_hh": _normal(4 * HIDDEN, scale=0.1), "out": _normal(HIDDEN, 3)}


@gc.export(xs=gc.spec((7, "batch", 5)), target=gc.spec(("batch", 3)), params=LSTM)
def lstm_grad(xs, target, params):
    """Mean squared error of a linear read-out of an LSTM's last state; gradients w.r.t. every weight."""
    h0 = F.full((1, xs.shape[1], HIDDEN), 0.0)
    weights = [(params["w_ih"], params["w_hh"], params["b_ih"], params["b_hh"])]
    _, h, _ = F.lstm(xs, h0, h0, weights)
    loss = F.mean((h[0] @ params["out"] - target) ** 2)
    return {"loss": loss, "grads": gc.grad(loss, params)}


# -- a scan RNN's Hessian-vector product (the backward of a backward through loops) ---------------------------
RNN = {"w": _normal(4, 8, scale=0.5), "u": _normal(8, 8, scale=0.3), "v": _normal(8, 1, scale=0.5)}


def _rnn_loss(params, xs):
    def step(h, x):
        h = F.tanh(x @ params["w"] + h @ params["u"])
        return h, h @ params["v"]
    _, ys = gc.scan(step, F.full((xs.shape[1], 8), 0.0), xs)
    return F.mean(ys ** 2)


@gc.export(xs=gc.spec(("steps", "batch", 4)), params=RNN, vectors=RNN)
def scan_rnn_hvp(xs, params, vectors):
    """H·v of a tanh RNN's loss (written with gc.scan) w.r.t. its weights."""
    names = list(params)
    hv = gc.hvp(lambda *p: _rnn_loss(dict(zip(names, p)), xs), [params[n] for n in names],
                [vectors[n] for n in names])
    return dict(zip(names, hv))


# -- counted loops: fixed-step integration with gc.fori_loop, its gradient and ys of a scan given only a length ------
FLOW = {"a": _normal(3, 3, scale=0.4), "b": _normal(3, scale=0.1)}


@gc.export(y0=gc.spec(("batch", 3)), params=FLOW)
def euler_flow(y0, params):
    """Ten explicit Euler steps of dy/dt = tanh(y A + b) (a loop with nothing to scan over), the
    trajectory's per-step norms in reverse (a reverse scan given only its length), and the gradient
    of a loss on the end point w.r.t. the parameters and y0."""
    def field(y):
        return F.tanh(y @ params["a"] + params["b"])
    y = gc.fori_loop(0, 10, lambda i, y: y + 0.1 * field(y), y0)
    _, norms = gc.scan(lambda y, _: (y + 0.1 * field(y), F.sum(y * y, axis=1)), y, length=4, reverse=True)
    loss = F.mean(y ** 2) + F.mean(norms)
    return {"y": y, "norms": norms, "loss": loss, "grads": gc.grad(loss, [params["a"], params["b"], y0])}


# -- a CNN with batch norm, one Adam training step ----------------------------------------------------------------
class ConvBN(nn.Module):
    def __init__(self):
        self.conv1, self.bn1 = nn.Conv2d(2, 4, 3, padding=1, rng=rng), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 6, 3, padding=1, bias=False, rng=rng), nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 2 * 2, 3, rng=rng)

    def forward(self, x):
        x = F.max_pool(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(F.flatten(x))


@gc.export_train(params=ConvBN(), optimizer=gc.optim.Adam(1e-2), x=gc.spec(("batch", 2, 8, 8)),
                 labels=gc.spec(("batch",), "int64"))
def cnn_bn_adam(model, x, labels):
    """Cross-entropy of a conv / batch norm / max-pool net; the step updates the parameters with
    Adam and carries batch norm's running statistics."""
    return F.softmax_cross_entropy(model(x), labels)


# -- dropout in a training step: masks hashed from the step counter, the same on every runtime -------------------
class DropoutRNN(nn.Module):
    def __init__(self):
        self.fc, self.mix = nn.Linear(6, 12, rng=rng), nn.Linear(12, 12, rng=rng)
        self.drop, self.out = nn.Dropout(0.3), nn.Linear(12, 3, rng=rng)

    def forward(self, x):
        h = self.drop(F.relu(self.fc(x)))
        h, _ = gc.scan(lambda h, _: (F.tanh(self.mix(self.drop(h))), None), h, None, length=3)
        return self.out(h)


@gc.export_train(params=DropoutRNN(), optimizer=gc.optim.SGD(0.1), x=gc.spec(("batch", 6)),
                 labels=gc.spec(("batch",), "int64"))
def dropout_train(model, x, labels):
    """Cross-entropy of a net with dropout before and inside a three-step loop (keyed masks: a hash of
    the step counter, the loop's step and the position in integer ops); one SGD step."""
    return F.softmax_cross_entropy(model(x), labels)


# -- a transformer block's gradient ------------------------------------------------------------------------------
D, HEADS = 8, 2
BLOCK = {"ln1.w": 1 + _normal(D, scale=0.1), "ln1.b": _normal(D, scale=0.1), "qkv": _normal(D, 3 * D, scale=0.3),
         "proj": _normal(D, D, scale=0.3), "ln2.w": 1 + _normal(D, scale=0.1), "ln2.b": _normal(D, scale=0.1),
         "fc1": _normal(D, 2 * D, scale=0.3), "fc2": _normal(2 * D, D, scale=0.3)}


def _heads(t):
    return F.transpose(F.reshape(t, (t.shape[0], t.shape[1], HEADS, D // HEADS)), (0, 2, 1, 3))


@gc.export(x=gc.spec(("batch", 5, D)), params=BLOCK)
def transformer_grad(x, params):
    """A pre-norm block (causal multi-head attention, layer norm, gelu MLP); the mean square of
    its output and its gradient w.r.t. every parameter."""
    h = F.layer_norm(x, params["ln1.w"], params["ln1.b"])
    q, k, v = F.split(h @ params["qkv"], 3, axis=-1)
    a = F.scaled_dot_product_attention(_heads(q), _heads(k), _heads(v), is_causal=True)
    x = x + F.reshape(F.transpose(a, (0, 2, 1, 3)), x.shape) @ params["proj"]
    x = x + F.gelu(F.layer_norm(x, params["ln2.w"], params["ln2.b"]) @ params["fc1"]) @ params["fc2"]
    loss = F.mean(x ** 2)
    return {"loss": loss, "grads": gc.grad(loss, params)}


# -- a second-order penalty on a conv net ---------------------------------------------------------------------------
CONV = {"k1": _normal(4, 1, 3, 3, scale=0.4), "k2": _normal(5, 4, 3, 3, scale=0.3),
        "w": _normal(5 * 2 * 2, 1, scale=0.3)}


@gc.export(x=gc.spec(("batch", 1, 8, 8)), params=CONV)
def conv_penalty(x, params):
    """A conv / relu / max-pool critic's input-gradient penalty and its gradient w.r.t. the kernels."""
    h = F.max_pool(F.relu(F.conv(x, params["k1"], pad=1)), 2)
    h = F.max_pool(F.relu(F.conv(h, params["k2"], pad=1)), 2)
    score = F.sum(F.flatten(h) @ params["w"])
    gx, = gc.grad(score, [x])
    penalty = F.mean(F.sum(F.flatten(gx) ** 2, axis=1))
    return {"penalty": penalty, "grads": gc.grad(penalty, params)}


# -- an imported ONNX model (a PyTorch export), differentiated ------------------------------------------------------
IMPORTED = gc.load_onnx(os.path.join(os.path.dirname(__file__), os.pardir, "data", "torch_cnn.onnx"))
TRAINED = {name: IMPORTED.params[name] for name in ("0.weight", "4.weight", "8.weight", "8.bias")}


@gc.export(x=gc.spec(("batch", 3, 8, 8)), labels=gc.spec(("batch",), "int64"), params=TRAINED)
def imported_grad(x, labels, params):
    """Cross-entropy of tests/data/torch_cnn.onnx (inlined by gc.load_onnx) with some weights traced:
    gradients w.r.t. them and w.r.t. the input."""
    loss = F.softmax_cross_entropy(IMPORTED(x, params=params), labels)
    grads = gc.grad(loss, [x, *params.values()])
    return {"loss": loss, "x": grads[0], "params": dict(zip(params, grads[1:]))}


# -- force matching: a loss on forces (-dE/dx of a pair potential), its gradient w.r.t. the potential ---------------
MORSE = {"depth": np.float32(0.8), "width": np.float32(1.3), "r0": np.float32(1.1)}
ATOMS = 6


@gc.export(positions=gc.spec(("batch", ATOMS, 3)), forces=gc.spec(("batch", ATOMS, 3)), params=MORSE)
def force_matching(positions, forces, params):
    """A Morse pair potential's energy, its forces -dE/dx, and the gradient of the mean squared force
    error w.r.t. the potential's parameters (second order: through the forces)."""
    diff = positions[:, :, None, :] - positions[:, None, :, :]
    off_diagonal = 1 - np.eye(ATOMS, dtype=np.float32)
    r = F.sqrt(F.sum(diff ** 2, axis=-1) + np.eye(ATOMS, dtype=np.float32))   # 1 on the diagonal, masked below
    e = params["depth"] * (1 - F.exp(-params["width"] * (r - params["r0"]))) ** 2
    energy = 0.5 * F.sum(e * off_diagonal)
    gx, = gc.grad(energy, [positions])
    loss = F.mean((-gx - forces) ** 2)
    return {"energy": energy, "loss": loss, "grads": gc.grad(loss, params)}



# -- grouped and depthwise convolutions' gradients -------------------------------------------------------------------
GROUPED = {"depthwise": _normal(4, 1, 3, 3, scale=0.5), "grouped": _normal(6, 2, 2, 2, scale=0.5),
           "bias": _normal(6, scale=0.1)}


@gc.export(x=gc.spec((2, 4, 9, 9)), params=GROUPED)
def grouped_conv_grad(x, params):
    """A depthwise convolution (stride 2, dilation 2, taps in the padding) and a grouped one (4 -> 6
    channels in 2 groups): gradients w.r.t. the input and the kernels (the input gradients are
    grouped transposed convolutions)."""
    h = F.tanh(F.conv(x, params["depthwise"], stride=2, pad=2, dilation=2, groups=4))
    h = F.conv(h, params["grouped"], params["bias"], stride=(2, 1), pad=(1, 2), groups=2)
    loss = F.sum(h ** 2)
    return {"loss": loss, "grads": gc.grad(loss, [x, *params.values()])}


SALIENCY = {"k": _normal(3, 1, 3, 3, scale=0.5)}


@gc.export(x=gc.spec(("batch", 3, 6, 6)), params=SALIENCY)
def depthwise_saliency(x, params):
    """The input gradient alone (a saliency map) of a depthwise convolution's squared output, at a
    symbolic batch: the convolution's output is read only by the gradient's product with 2."""
    return gc.grad(F.sum(F.conv(x, params["k"], groups=3) ** 2), [x])[0]


# -- scans, sorting and pooling with ceil_mode, their gradient -------------------------------------------------------
@gc.export(x=gc.spec(("batch", 2, 7, 7)))
def scans_and_pools_grad(x):
    """cumprod and a reverse cumsum, sort and top-k, and max and average pooling with ceil_mode and
    padding (average pooling counting the padding and not), with their gradient."""
    rows = F.reshape(x, (x.shape[0], -1))[:, :6]
    scans = F.cumprod(rows * 0.5 + 1, axis=1, exclusive=True) * F.cumsum(rows, axis=1, reverse=True)
    top, index = F.topk(rows, 3, axis=1)
    a = F.max_pool(x, 3, stride=2, pad=1, ceil_mode=True)
    b = F.avg_pool(x, 3, stride=2, pad=1, ceil_mode=True, count_include_pad=True)
    c = F.avg_pool(x, 2, stride=2, pad=1, ceil_mode=True)
    loss = F.sum(scans) + F.sum(F.sort(rows, axis=1)[:, :2] ** 2) + F.sum(top ** 2) + F.sum(a ** 2) \
        + F.sum(b ** 3) + F.sum(c * c)
    return {"loss": loss, "index": index, "x": gc.grad(loss, [x])[0]}


# -- imported ops written as many gcompile ops, with integer bit operations ---------------------------------------
def _sampling_and_spectra():
    """An ONNX model (opset 20) of GridSample (border padding), a dilated LpPool and a one-sided DFT, as
    gcompile imports them: gathers and their scatter gradients, a ones-kernel Conv, products with cos/sin."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["g"], padding_mode="border"),
             helper.make_node("LpPool", ["x"], ["p"], kernel_shape=[2, 2], dilations=[2, 2], p=2),
             helper.make_node("Add", ["g", "p"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "last"], ["signal"]),
             helper.make_node("DFT", ["signal", "", "axis"], ["y"], onesided=1)]
    graph = helper.make_graph(nodes, "sampling_and_spectra",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 6, 6]),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, ["batch", 4, 4, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("last", TensorProto.INT64, [1], [-1]),
                               helper.make_tensor("axis", TensorProto.INT64, [], [3])])
    return gc.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))


SAMPLING = _sampling_and_spectra()


@gc.export(x=gc.spec(("batch", 2, 6, 6)), grid=gc.spec(("batch", 4, 4, 2)), ids=gc.spec(("batch", 5), "int32"))
def sampling_and_spectra_grad(x, grid, ids):
    """The imported model's spectrum, the gradient of its power w.r.t. the image and the sampling grid,
    and bit operations on integer ids (BitwiseAnd, BitwiseXor, BitwiseNot, shifts)."""
    y = SAMPLING(x, grid)
    loss = F.sum(y * y)
    gx, ggrid = gc.grad(loss, [x, grid])
    bits = F.bitwise_xor(ids << 3, ~(ids >> 1)) & 0x5A5A
    return {"loss": loss, "x": gx, "grid": ggrid, "bits": bits}


# -- spectral decompositions (Jacobi sweeps and scaling and squaring in while loops), their gradient --------------
@gc.export(x=gc.spec(("batch", 3, 3)))
def spectral_grad(x):
    """eigh of a symmetric matrix, svd, pinv and matrix_exp, each an ONNX Loop with a condition (the
    iterations stop per batch at run time), and the gradient through their closed-form VJPs."""
    w, v = F.eigh(x + F.swapaxes(x, -1, -2))
    u, s, vh = F.svd(x[:, :, :2], full_matrices=False)
    p = F.pinv(x)
    e = F.matrix_exp(x * 2.0)
    loss = F.sum(w * w) + F.sum(v * v * w[:, None, :]) + F.sum(s) + F.sum(u * u * s[:, None, :]) + F.sum(p * p) \
        + F.sum(e)
    return {"w": w, "s": s, "pinv": p, "exp": e, "x": gc.grad(loss, [x])[0]}
