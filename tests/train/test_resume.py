"""What docs/guide/training.md promises of resuming: a Trainer that loads a checkpoint computes bit
for bit the steps the uninterrupted run computed, from the compiled step or from the file
`step.save` wrote, dropout included (its masks are a function of the step counter), with the
session's thread count fixed (ONNX Runtime's products round differently with another)."""
import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile import nn
from gcompile.runtime.adaptive import AdaptiveSession


class Net(nn.Module):
    """Convolution, batch norm and max pooling (the ort-cpu target has strategies for their
    gradients: the portable file computes them otherwise), then dropout in a linear head."""

    def __init__(self):
        rng = np.random.default_rng(4)
        self.conv, self.bn = nn.Conv2d(1, 4, 3, padding=1, rng=rng), nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 3 * 3, 3, rng=rng)

    def forward(self, x):
        h = F.max_pool(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(F.flatten(h)))


def batches(n):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((8, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 8)) for _ in range(n)]


def export():
    model = Net().train()

    def loss(m, x, labels):
        return F.softmax_cross_entropy(m(x), labels)
    step = gc.export_train_step(loss, model, gc.optim.Adam(1e-2), gc.spec(("batch", 1, 6, 6)),
                                gc.spec(("batch",), "int64"), provider="cpu")
    return step, model


def state(trainer):
    return {**trainer.state_dict(), **trainer.state, "step": np.asarray(trainer.step_count)}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.asarray(a[name]).tobytes() == np.asarray(b[name]).tobytes(), name


def test_resuming_from_the_saved_file_repeats_the_uninterrupted_steps(tmp_path):
    """The guide's flow: train with Trainer(step), checkpoint, and resume in another Trainer of the
    file step.save wrote. Dropout drew new masks after a resume (the runtime's generator started
    again), and the file, lowered for the portable target, computed the convolution's gradients
    otherwise than the in-process step: both now give the same bits."""
    step, model = export()
    data = batches(8)
    uninterrupted = gc.runtime.Trainer(step)
    expected = [uninterrupted.step(*b) for b in data]

    first = gc.runtime.Trainer(step)
    assert [first.step(*b) for b in data[:4]] == expected[:4]
    first.save(tmp_path / "ckpt.npz")
    step.save(tmp_path / "train_step.onnx")
    resumed = gc.runtime.Trainer(tmp_path / "train_step.onnx", params=model)
    resumed.load(tmp_path / "ckpt.npz")
    assert [resumed.step(*b) for b in data[4:]] == expected[4:]
    assert_same(state(resumed), state(uninterrupted))

    again = gc.runtime.Trainer(step)               # and in the same process, from the compiled step
    again.load(tmp_path / "ckpt.npz")
    assert [again.step(*b) for b in data[4:]] == expected[4:]


def test_dropout_masks_follow_the_step_counter():
    """The same parameters and batch at another step count: other masks, so another loss; at the
    same count: the same loss (the mask is no generator's state)."""
    step, _ = export()
    x, labels = batches(1)[0]
    params, (slots, _) = {**step.params, **step.buffers}, step.initial_state()
    losses = [float(step(params, slots, np.int64(count), x, labels)[0]) for count in (0, 1, 0, 7)]
    assert losses[0] == losses[2] and len({losses[0], losses[1], losses[3]}) == 3
    onnx_ops = {n.op_type for n in step.model.graph.node}
    assert "Dropout" not in onnx_ops and "RandomUniformLike" not in onnx_ops


def test_the_portable_file_draws_the_same_masks(tmp_path):
    """A step saved for the portable target (for other runtimes) draws the masks the in-process step
    draws: its losses differ by rounding only (the convolutions' gradients are computed otherwise),
    never by a mask."""
    step, model = export()
    data = batches(3)
    step.save(tmp_path / "portable.onnx", target="portable")
    ours = gc.runtime.Trainer(step)
    portable = gc.runtime.Trainer(tmp_path / "portable.onnx", params=model)
    np.testing.assert_allclose([portable.step(*b) for b in data], [ours.step(*b) for b in data], rtol=1e-5)


def test_a_trainer_keeps_one_thread_count():
    """Its session may choose whether idle workers spin, never another thread count: ONNX Runtime's
    matrix products split their sums by thread count, so a run's numbers would depend on timing."""
    step, model = export()
    trainer = gc.runtime.Trainer(step)
    session = trainer._session
    if isinstance(session, AdaptiveSession):
        assert len({v.threads for v in session._variants}) == 1
