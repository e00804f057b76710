"""DistributedTrainer on a local Ray: N workers equal one worker (to float tolerance) and their
own in-process simulation (bit for bit), parameters stay bit-identical across workers,
checkpoints move between worker counts and to and from gcompile.training.Trainer, a worker that
dies or hangs mid-step is replaced and the step rerun bit-identically, and bad input is a clear
error within seconds."""
import socket
import threading
import time

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.distributed import DistributedTrainer, WorkerError, export_split_step
from gcompile.distributed.reduce import FlatPlan, weighted_sum
from gcompile.distributed.worker import Worker
from gcompile.errors import GcompileError, InputError
from gcompile.runtime.providers import make_session
from gcompile.training import Trainer

from ..train.mlp import loss_fn
from .conftest import mlp_split

pytestmark = pytest.mark.usefixtures("ray_session")


def simulate(split, params, batches, workers):
    """What `workers` data-parallel workers compute, in this process: the same shards, models,
    thread count and reduction order. Returns the carried values after all batches."""
    layout = split.layout
    grad = make_session(split.gradient.SerializeToString(), "cpu", threads=1)
    update = make_session(split.update.SerializeToString(), "cpu", threads=1)
    names = [f"{p}.grad" for p in layout.params]
    plan = FlatPlan([(f"{p}.grad", v.dtype, v.shape) for p, v in params.items()])
    state, count = split.layout.initial_state(params)
    carried = {**params, **state, "step": count}
    for batch in batches:
        total = len(batch[0])
        bounds = np.linspace(0, total, workers + 1).round().astype(int)
        chunks = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            _, *grads = grad.run(None, {**{p: carried[p] for p in layout.params},
                                        **{n: b[lo:hi] for n, b in zip(layout.batch, batch)}})
            chunks.append(plan.split(plan.flatten(dict(zip(names, grads))), workers))
        weights = [(hi - lo) / total for lo, hi in zip(bounds[:-1], bounds[1:])]
        reduced = [weighted_sum([c[j] for c in chunks], weights) for j in range(workers)]
        averaged = plan.unflatten(plan.join(reduced))
        carried = dict(zip(layout.carried, update.run(None, {**carried, **averaged})))
    return carried


def carried_of_every_worker(ray, trainer):
    return ray.get([w.carried.remote() for w in trainer._workers])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_n_workers_equal_one_worker_sgd_float64(ray_session, workers):
    split, fused, params, x, y = mlp_split(gc.optim.SGD(0.1))       # 16 rows: shards 16, 8/8 and 5/6/5
    one = Trainer(fused)
    with DistributedTrainer(split, workers=workers) as trainer:
        for _ in range(4):
            assert trainer.step(x, y) == pytest.approx(one.step(x, y), rel=1e-13)
        assert trainer.step_count == 4
        every = carried_of_every_worker(ray_session, trainer)
        for other in every[1:]:                                      # bit-identical on every worker
            for name, value in every[0].items():
                np.testing.assert_array_equal(other[name], value)
        trainer.verify()
        exact = simulate(split, params, [(x, y)] * 4, workers)
        for name in params:
            np.testing.assert_array_equal(every[0][name], exact[name])   # the transport adds no rounding
            np.testing.assert_allclose(every[0][name], one.params[name], rtol=1e-12, atol=1e-15)
            assert not np.array_equal(every[0][name], params[name])


def test_two_workers_adam_float32_and_unequal_shards(ray_session):
    split, fused, params, x, y = mlp_split(gc.optim.Adam(0.01), dtype=np.float32, n=15)   # shards of 8 and 7
    one = Trainer(fused)
    with DistributedTrainer(split, workers=2) as trainer:
        for i in range(5):
            rows = slice(0, 15 - i)                                   # batches of 15, 14, ... rows
            assert trainer.step(x[rows], y[rows]) == pytest.approx(one.step(x[rows], y[rows]), rel=1e-5)
        for name in params:
            np.testing.assert_allclose(trainer.params[name], one.params[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(trainer.state[f"{name}.v"], one.state[f"{name}.v"], rtol=1e-4, atol=1e-9)
        timings = trainer.timings()
        assert set(timings) == {"wall", "gradients", "reduce", "apply", "communication"}
        assert all(v >= 0 for v in timings.values())


def test_checkpoints_move_between_worker_counts_and_trainer(tmp_path):
    split, fused, params, x, y = mlp_split(gc.optim.SGD(0.05, momentum=0.9))
    one = Trainer(fused)
    for _ in range(4):
        one.step(x, y)
    first = Trainer(fused)                                            # Trainer -> 2 workers -> 3 workers -> Trainer
    first.step(x, y)
    first.save(tmp_path / "1.npz")
    with DistributedTrainer(split, workers=2) as two:
        two.load(tmp_path / "1.npz")
        assert two.step_count == 1
        two.step(x, y)
        two.save(tmp_path / "2.npz")
    with DistributedTrainer(split, workers=3) as three:
        three.load(tmp_path / "2.npz")
        three.step(x, y)
        three.save(tmp_path / "3.npz")
    last = Trainer(fused)
    last.load(tmp_path / "3.npz")
    assert last.step_count == 3
    last.step(x, y)
    for name in params:
        np.testing.assert_allclose(last.params[name], one.params[name], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(last.state[f"{name}.momentum"], one.state[f"{name}.momentum"],
                                   rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("phase", ["gradients", "apply"])
def test_a_worker_that_dies_mid_step_is_replaced_and_the_step_rerun(ray_session, phase):
    split, _, params, x, y = mlp_split(gc.optim.Adam(0.01))
    with DistributedTrainer(split, workers=2, restarts=1, timeout=60) as trainer:
        trainer.step(x, y)
        old = trainer._workers[1]
        trainer._workers[1].fail_at.remote(1, phase)                 # dies in step 2 (in apply: after worker 0's)
        trainer.step(x, y)
        trainer.step(x, y)
        assert trainer._workers[1] != old and trainer.restarts_left == 0 and trainer.step_count == 3
        trainer.verify()
        exact = simulate(split, params, [(x, y)] * 3, 2)
        for name, value in carried_of_every_worker(ray_session, trainer)[0].items():
            np.testing.assert_array_equal(value, exact[name])       # as if nothing had happened


def test_without_restarts_a_dead_worker_is_a_clear_error():
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    trainer = DistributedTrainer(split, workers=2, restarts=0, timeout=60)
    trainer.step(x, y)
    trainer._workers[0].fail_at.remote(1, "gradients")
    with pytest.raises(WorkerError, match=r"step 2 failed on 1 of 2 worker\(s\).*no restarts left.*after 1 steps"):
        trainer.step(x, y)
    with pytest.raises(GcompileError, match="closed"):
        trainer.step(x, y)


def test_a_hung_worker_is_found_within_seconds_by_default_and_replaced():
    """A hung worker was found only after `timeout` (300 s by default); here the timeout is 120 s
    and the worker is found by its peers' progress (stall, 10 s by default), then replaced."""
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    with DistributedTrainer(split, workers=2, restarts=2, timeout=120) as trainer:
        trainer.step(x, y)
        trainer._workers[1].fail_at.remote(1, "reduce", "hang")
        start = time.perf_counter()
        trainer.step(x, y)
        assert time.perf_counter() - start < 60                      # the stall, a new worker's start, the step
        assert trainer.step_count == 2 and trainer.restarts_left <= 1   # a busy CI machine may need a spare restart
        trainer.verify()
        exact = simulate(split, params, [(x, y)] * 2, 2)
        for name, value in trainer.params.items():
            np.testing.assert_array_equal(value, exact[name])


def test_an_error_in_a_worker_leaves_every_worker_before_the_step():
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    with DistributedTrainer(split, workers=2, restarts=0) as trainer:
        trainer.step(x, y)
        before = trainer.params
        trainer._workers[0].fail_at.remote(1, "apply", "raise")      # worker 1 applies, worker 0 raises
        with pytest.raises(WorkerError, match="fault injected in apply at step 2"):
            trainer.step(x, y)
        assert trainer.step_count == 1
        trainer.verify()                                              # worker 1 was rolled back
        for name, value in before.items():
            np.testing.assert_array_equal(trainer.params[name], value)
        trainer.step(x, y)                                            # still usable
        assert trainer.step_count == 2


# -- bad input ---------------------------------------------------------------------------------------
def _listener(reply: bytes | None):
    """A local TCP server that never answers (reply None) or answers `reply`; returns its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        while True:
            conn, _ = server.accept()
            if reply is not None:
                conn.sendall(reply)
                conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_unreachable_addresses_are_clear_errors_within_seconds():
    split, *_ = mlp_split(gc.optim.SGD(0.1))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()                                                    # nothing listens there now
    cases = [(f"127.0.0.1:{port}", "cannot reach a Ray cluster at"),
             (f"127.0.0.1:{_listener(None)}", "no Ray cluster answers at .*no reply within 1 s"),
             (f"127.0.0.1:{_listener(b'HTTP/1.1 400 Bad Request' + bytes(20))}", "is not a Ray cluster"),
             ("not-an-address", "is not HOST:PORT")]
    for address, message in cases:
        start = time.perf_counter()
        with pytest.raises(GcompileError, match=message):
            DistributedTrainer(split, workers=2, address=address, connect_timeout=1)
        assert time.perf_counter() - start < 5


def test_the_running_cluster_answers_the_probe(ray_session):
    from gcompile.distributed.cluster import connect, probe
    address = ray_session.get_runtime_context().gcs_address
    probe(address, timeout=5)
    assert connect(address) is ray_session
    assert connect(f"127.0.0.1:{address.rpartition(':')[2]}") is ray_session
    other = f"127.0.0.1:{_listener(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))}"   # answers like an HTTP/2 server
    with pytest.raises(GcompileError, match=f"already connected to the Ray cluster at {address}, not {other}"):
        connect(other)


def test_what_is_not_a_split_step_is_refused(tmp_path):
    split, fused, params, x, y = mlp_split(gc.optim.SGD(0.1))
    fused.save(tmp_path / "fused.onnx")
    for step in (fused, fused.model, str(tmp_path / "fused.onnx")):
        with pytest.raises(GcompileError, match="needs a split training step.*export_split_step"):
            DistributedTrainer(step, params=params)
    other, *_ = mlp_split(gc.optim.Adam(0.1))
    with pytest.raises(GcompileError, match="come from different exports"):
        DistributedTrainer((split.gradient, other.update), params=params)
    split.save(tmp_path / "split")
    with pytest.raises(GcompileError, match="give the initial parameters"):
        DistributedTrainer(tmp_path / "split")
    with pytest.raises(InputError, match="missing 'b2'"):
        DistributedTrainer(tmp_path / "split", params={k: v for k, v in params.items() if k != "b2"})
    with pytest.raises(InputError, match=r"'w1': the training step expects float64\(3, 6\), got float32"):
        DistributedTrainer(tmp_path / "split", params={**params, "w1": params["w1"].astype(np.float32)})


def test_workers_with_mismatched_models_are_refused(ray_session):
    split, *_ = mlp_split(gc.optim.SGD(0.1))
    other, *_ = mlp_split(gc.optim.SGD(0.2))
    with DistributedTrainer(split, workers=1) as trainer:
        models = (other.gradient.SerializeToString(), other.update.SerializeToString())
        odd = ray_session.remote(Worker).options(num_cpus=1).remote(models, "cpu", 1)
        start = time.perf_counter()
        with pytest.raises(WorkerError, match=r"workers run different models: .*worker 1 on .*\(pid \d+\)"):
            trainer.handshake([trainer._workers[0], odd])
        assert time.perf_counter() - start < 30
        ray_session.kill(odd)


def test_batches_that_cannot_be_sharded_are_refused():
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    with DistributedTrainer(split, workers=3) as trainer:
        with pytest.raises(InputError, match="a batch of 2 row"):
            trainer.step(x[:2], y[:2])
        with pytest.raises(InputError, match="symbolic dim 'batch' is 16 in batch input 'x' but 15 in batch input 'y'"):
            trainer.step(x, y[:15])
        with pytest.raises(InputError, match=r"batch input 'x': expected float64\(batch, 3\), got float32"):
            trainer.step(x.astype(np.float32), y)
        with pytest.raises(InputError, match="takes 2 batch input"):
            trainer.step(x)
        assert trainer.step_count == 0
    fixed = export_split_step(loss_fn, params, gc.optim.SGD(0.1), x, y, provider="cpu")   # batch fixed at 16
    with pytest.raises(GcompileError, match="fixed leading size .*cannot be cut into 2 shards"):
        DistributedTrainer(fixed, workers=2)
    with pytest.raises(GcompileError, match="need 40 CPUs, but the Ray cluster"):
        DistributedTrainer(split, workers=40)
    with pytest.raises(GcompileError, match="workers must be a positive integer"):
        DistributedTrainer(split, workers=0)


def test_batch_inputs_that_disagree_on_a_symbolic_dim_are_refused_naming_it():
    """Only the leading (shard) axis was compared: other symbolic dims reached a worker's ONNX
    Runtime, whose raw failure came back as 'step 1 failed'."""
    def loss(p, x, y):
        return F.mean(((x - y) * p["w"]) ** 2)
    split = export_split_step(loss, {"w": np.float32(0.5)}, gc.optim.SGD(0.1), gc.spec(("batch", "n")),
                              gc.spec(("batch", "n")), provider="cpu")
    ones = np.ones((4, 5), np.float32)
    with DistributedTrainer(split, workers=2) as trainer:
        with pytest.raises(InputError, match=r"symbolic dim 'n' is 3 in batch input 'x' but 5 in batch input 'y'"):
            trainer.step(ones[:, :3], ones)
        assert trainer.step_count == 0
        assert np.isfinite(trainer.step(ones, ones * 0))


def test_steps_from_two_threads_all_count_and_equal_a_serial_run():
    """Two threads stepping one trainer sent two steps of the same number to the workers at once
    ('the workers are out of step'); its calls now run one at a time."""
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    errors = []

    def steps():
        try:
            for _ in range(12):
                trainer.step(x, y)
        except Exception as err:   # noqa: BLE001 - reported below
            errors.append(err)
    with DistributedTrainer(split, workers=2) as trainer:
        threads = [threading.Thread(target=steps) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and trainer.step_count == 24
        expected = simulate(split, params, [(x, y)] * 24, 2)
        for name, value in trainer.params.items():
            np.testing.assert_array_equal(value, expected[name])


def test_a_step_with_a_non_finite_loss_or_gradient_is_skipped_on_every_worker():
    """One NaN in one shard made every parameter NaN while the step counter advanced; the step is
    now skipped on every worker (parameters and optimizer state unchanged) and counted."""
    split, _, params, x, y = mlp_split(gc.optim.Adam(0.01))
    bad = x.copy()
    bad[3, 0] = np.nan                       # in the first worker's shard only
    with DistributedTrainer(split, workers=2) as trainer:
        trainer.step(x, y)
        before = {**trainer.params, **trainer.state}
        with pytest.warns(RuntimeWarning, match="a step was skipped"):
            assert np.isnan(trainer.step(bad, y))
        assert trainer.step_count == 1 and trainer.skipped_steps == 1
        for name, value in {**trainer.params, **trainer.state}.items():
            np.testing.assert_array_equal(value, before[name])
        trainer.verify()
        trainer.step(x, y)
        assert trainer.step_count == 2
        expected = simulate(split, params, [(x, y)] * 2, 2)
        for name, value in trainer.params.items():
            np.testing.assert_array_equal(value, expected[name])


def test_a_trainer_without_ray_says_how_to_install_it(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    from gcompile.distributed.cluster import require_ray
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(GcompileError, match=r"pip install 'gcompile\[distributed\]'"):
        require_ray()

