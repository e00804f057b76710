"""gc.nn.Module: parameters and buffers as a pytree, names carried into ONNX, state dicts and their
files, training mode, replace/apply, and the containers."""
import json
import struct

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile import nn


class Block(nn.Module):
    def __init__(self, rng=0):
        self.fc = nn.Linear(4, 8, rng=rng)
        self.norm = nn.BatchNorm1d(8)
        self.heads = [nn.Linear(8, 2, rng=rng), nn.Linear(8, 3, rng=rng)]
        self.scale = 2.0                                          # configuration, not a parameter

    def __call__(self, x):                                        # JAX/Equinox style: __call__, not forward
        h = F.relu(self.norm(self.fc(x))) * self.scale
        return [head(h) for head in self.heads]


X = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)


def test_parameters_buffers_and_names():
    b = Block()
    assert list(b.state_dict()) == ["fc.weight", "fc.bias", "norm.weight", "norm.bias", "norm.running_mean",
                                    "norm.running_var", "norm.num_batches_tracked", "heads.0.weight", "heads.0.bias",
                                    "heads.1.weight", "heads.1.bias"]
    assert [n for n, _ in b.named_buffers()] == ["norm.running_mean", "norm.running_var", "norm.num_batches_tracked"]
    assert b.num_parameters() == 4 * 8 + 8 + 8 + 8 + 8 * 2 + 2 + 8 * 3 + 3
    assert len(list(b.modules())) == 5 and "(fc): Linear(" in repr(b)


def test_closed_over_module_names_its_initializers_and_argument_module_its_inputs():
    b = Block().eval()
    cf = gc.compile(lambda x: b(x), X, provider="cpu")
    names = {i.name for i in cf.model.graph.initializer}
    assert {"fc.weight", "fc.bias", "heads.0.weight", "heads.1.bias"} <= names
    cf2 = gc.compile(lambda m, x: m(x), b, X, provider="cpu")
    assert cf2.input_names[:2] == ["m.fc.weight", "m.fc.bias"] and cf2.input_names[-1] == "x"
    for a, c in zip(cf(X), cf2(b, X)):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_training_mode_is_configuration_and_part_of_the_jit_key():
    b = Block()
    run = gc.jit(lambda m, x: m(x))
    train_out = run(b, X)
    b.eval()
    eval_out = run(b, X)
    assert run.cache_size == 2 and not np.allclose(train_out[0], eval_out[0])
    assert not b.norm.training and b.train().norm.training


def test_gradient_has_the_module_structure_and_buffers_update_in_a_traced_copy():
    b = Block()

    def loss(m, x):
        out = m(x)
        return F.sum(out[0]) + F.sum(out[1] ** 2), m.norm.running_mean

    (value, new_mean), g = gc.jit(gc.value_and_grad(loss, has_aux=True))(b, X)
    assert isinstance(g, Block) and g.fc.weight.shape == (8, 4) and g.norm.num_batches_tracked is None
    assert g.norm.running_mean is None                              # a buffer: not differentiated
    h = X @ b.fc.weight.T + b.fc.bias
    np.testing.assert_allclose(new_mean, 0.1 * h.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(b.norm.running_mean, 0)           # the caller's module is untouched


def test_replace_and_apply_call_with_other_parameters():
    b = Block().eval()
    zero = {"heads.0.weight": np.zeros((2, 8), np.float32), "heads.0.bias": np.ones(2, np.float32)}
    out = gc.jit(lambda m, x: m.apply(zero, x))(b, X)
    np.testing.assert_array_equal(out[0], 1.0)
    with pytest.raises(gc.GcompileError, match="has no parameter or buffer named 'nope'"):
        b.replace({"nope": 1})


def test_state_dict_round_trips_through_npz_and_safetensors(tmp_path):
    a, b = Block(rng=1), Block(rng=2)
    for suffix in ("npz", "safetensors"):
        a.save(tmp_path / f"s.{suffix}")
        b.load_state_dict(tmp_path / f"s.{suffix}")
        for x, y in zip(a.state_dict().values(), b.state_dict().values()):
            np.testing.assert_array_equal(x, y)
    fc = b.fc
    b.load_state_dict({**a.state_dict(), "fc.bias": np.arange(8)})   # cast to the entry's dtype, in place
    assert b.fc is fc and b.fc.bias.dtype == np.float32 and b.fc.bias[3] == 3


def test_state_dict_mismatches_are_named(tmp_path):
    b = Block()
    sd = b.state_dict()
    with pytest.raises(gc.InputError, match="missing 'fc.bias'; unexpected 'fc.b'"):
        b.load_state_dict({**{k: v for k, v in sd.items() if k != "fc.bias"}, "fc.b": sd["fc.bias"]})
    with pytest.raises(gc.InputError, match=r"'fc.weight' has shape \(8, 4\) in Block, got \(4, 8\)"):
        b.load_state_dict({**sd, "fc.weight": sd["fc.weight"].T})
    b.load_state_dict({"fc.bias": np.ones(8)}, strict=False)
    with pytest.raises(gc.GcompileError, match="is .npz or .safetensors"):
        b.save(tmp_path / "s.pt")


def _safetensors(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("header, data, message", [
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "do not lie inside"),
    ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "takes 12 bytes"),
    ({"w": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unsupported or missing dtype"),
    ({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "non-negative ints"),
])
def test_hostile_safetensors_are_refused(tmp_path, header, data, message):
    path = tmp_path / "s.safetensors"
    path.write_bytes(_safetensors(header, data))
    with pytest.raises(gc.GcompileError, match=message):
        nn.Linear(1, 2).load_state_dict(path, strict=False)
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(gc.GcompileError, match="header claims"):
        nn.Linear(1, 2).load_state_dict(path)


def test_sequential_and_module_list():
    seq = nn.Sequential(nn.Linear(4, 3, rng=0), nn.Tanh(), nn.Linear(3, 2, rng=1))
    assert len(seq) == 3 and isinstance(seq[1], nn.Tanh) and list(seq.state_dict())[0] == "0.weight"
    w0, b0, w1, b1 = (seq.state_dict()[k] for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
    np.testing.assert_allclose(gc.jit(lambda m, x: m(x))(seq, X), np.tanh(X @ w0.T + b0) @ w1.T + b1, rtol=1e-5)
    layers = nn.ModuleList([nn.Linear(2, 2)]).append(nn.Linear(2, 2))
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    with pytest.raises(gc.GcompileError, match="not callable"):
        layers(X)


def _npy_header(shape, dtype="<f4") -> bytes:
    text = repr({"descr": dtype, "fortran_order": False, "shape": tuple(shape)}).encode()
    text += b" " * (63 - (10 + len(text)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


@pytest.mark.parametrize("entries, message", [
    ({"weight.npy": _npy_header((1 << 20, 1 << 20)), "bias.npy": _npy_header((2,)) + b"\0" * 8},
     r"module expects shape \(2, 1\)"),                             # a header declaring 4 TiB of floats
    ({"weight.npy": _npy_header((2, 1), "|O") + b"\0" * 16, "bias.npy": _npy_header((2,)) + b"\0" * 8},
     "numeric arrays only"),                                        # Python objects
    ({"weight.npy": _npy_header((2, 1)) + b"\0" * 8 + b"\0" * 50_000_000, "bias.npy": _npy_header((2,)) + b"\0" * 8},
     "more than its array takes"),                                  # a deflate bomb: 50 MB behind a tiny entry
])
def test_hostile_npz_state_dicts_are_refused_before_reading(tmp_path, entries, message):
    """The .npz reader of Trainer checkpoints checks names, headers and declared sizes before any
    array is read, for gc.nn state dicts too (numpy's own loader would allocate first)."""
    import tracemalloc
    import zipfile
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    try:
        for strict in (True, False):
            with pytest.raises(gc.GcompileError, match=message):
                nn.Linear(1, 2).load_state_dict(path, strict=strict)
        assert tracemalloc.get_traced_memory()[1] < 20_000_000
    finally:
        tracemalloc.stop()


class _OwnConv(nn.Conv2d):
    def forward(self, x):                                           # its own forward: not fused
        return super().forward(x) * 2.0


def _conv_bn(conv_class=nn.Conv2d, affine=True, bias=True):
    rng = np.random.default_rng(5)
    seq = nn.Sequential(conv_class(3, 4, 3, padding=1, bias=bias, rng=0), nn.BatchNorm2d(4, eps=1e-3, affine=affine),
                        nn.ReLU())
    stats = {"1.running_mean": rng.standard_normal(4), "1.running_var": rng.random(4) + 0.5}
    if affine:
        stats.update({"1.weight": rng.standard_normal(4), "1.bias": rng.standard_normal(4)})
    return seq.replace({k: v.astype(np.float32) for k, v in stats.items()})


def _by_layers(m, x):
    for layer in m:
        x = layer(x)
    return x


def _ops(seq, x):
    from gcompile.frontend.trace import trace
    return [n.op for n in trace(lambda m, x: m(x), [seq, x.astype(np.float32)]).graph.nodes.values()]


@pytest.mark.parametrize("affine, bias", [(True, True), (False, False)])
def test_sequential_fuses_a_conv_and_the_inference_batch_norm_after_it(affine, bias):
    """In eval mode a Sequential's Conv2d and the BatchNorm2d after it are one convolution
    (Module.followed_by): the layers' values and gradients (parameters and buffers alike), from
    the float64 graph, and first- and second-order gradient checks on ONNX Runtime."""
    from gcompile.frontend import pytree
    from gcompile.frontend.trace import trace
    from gcompile.ir.evaluate import evaluate
    seq = _conv_bn(affine=affine, bias=bias).eval()
    x = np.random.default_rng(6).standard_normal((2, 3, 5, 5))
    v = np.random.default_rng(7).standard_normal((2, 4, 5, 5))
    ops = _ops(seq, x)
    assert "batch_norm_inference" not in ops and ops.count("conv") == 1
    seq64 = seq.replace({k: a.astype(np.float64) for k, a in seq.state_dict().items() if a.dtype == np.float32})
    arrays = [*pytree.flatten(seq64)[0], x]
    fused, layered = (evaluate(trace(gc.value_and_grad(lambda m, x, f=f: F.sum(f(m, x) * v), argnums=(0, 1)),
                                     [seq64, x]).graph, arrays) for f in (lambda m, x: m(x), _by_layers))
    assert len(fused) == len(layered) == (6 if affine else 3)      # the value, the parameters', x's
    for a, b in zip(fused, layered):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    names = ["0.weight", "1.running_mean", "1.running_var"] + (["1.weight"] if affine else [])
    params = [seq.state_dict()[n].astype(np.float64) for n in names]
    for order in (1, 2):
        gc.testing.check_grad(lambda x, *ps: seq.replace(dict(zip(names, ps)))(x), [x, *params], order=order)


def test_a_conv_with_its_own_forward_or_a_training_batch_norm_is_not_fused():
    x = np.random.default_rng(6).standard_normal((2, 3, 5, 5)).astype(np.float32)
    for seq in (_conv_bn(_OwnConv).eval(), _conv_bn()):
        ops = _ops(seq, x)
        assert ops.count("conv") == 1 and {"batch_norm_inference", "batch_norm"} & set(ops)
        np.testing.assert_allclose(gc.jit(lambda m, x: m(x))(seq, x), gc.jit(_by_layers)(seq, x), rtol=1e-6)
