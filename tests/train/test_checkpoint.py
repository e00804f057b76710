"""Trainer checkpoints are checked against the training step's layout before any array is read:
a crafted .npz (a header declaring a huge array, thousands of entries, a deflate bomb, objects,
wrong dtypes or shapes) is a clear error and allocates nothing."""
import io
import zipfile

import numpy as np
import numpy.lib.format
import pytest

import gcompile as gc
from gcompile.errors import GcompileError, InputError

from .mlp import loss_fn, problem


@pytest.fixture(scope="module")
def trainer():
    params, x, y = problem(np.float32)
    return gc.runtime.Trainer(gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1, momentum=0.9), x, y,
                                                   provider="cpu"))


@pytest.fixture
def no_reads(monkeypatch):
    """Reading array data with numpy fails the test: a bad checkpoint is refused from its headers."""
    def read_array(*args, **kwargs):
        raise AssertionError("array data was read before the checkpoint was checked")
    monkeypatch.setattr(numpy.lib.format, "read_array", read_array)


def entries(trainer) -> dict:
    """A valid checkpoint's arrays for `trainer`."""
    return {**{f"params/{n}": v for n, v in trainer.params.items()},
            **{f"state/{n}": v for n, v in trainer.state.items()}, "step": np.array(0, np.int64)}


def npy_bytes(array=None, header: dict | None = None, data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    if header is None:
        np.save(buffer, array, allow_pickle=True)
    else:
        numpy.lib.format.write_array_header_1_0(buffer, header)
        buffer.write(data)
    return buffer.getvalue()


def write_zip(path, members: dict, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, blob in members.items():
            archive.writestr(name + ".npy", blob)


def valid_members(trainer) -> dict:
    return {name: npy_bytes(value) for name, value in entries(trainer).items()}


def test_a_header_declaring_a_huge_array_is_refused_before_allocating(trainer, tmp_path, no_reads):
    members = valid_members(trainer)
    members["params/w1"] = npy_bytes(header={"descr": "<f8", "fortran_order": False, "shape": (2 ** 20, 2 ** 20)},
                                     data=b"\0" * 64)
    write_zip(tmp_path / "bomb.npz", members)
    with pytest.raises(InputError, match=r"'params/w1': the training step expects float32\(3, 6\), "
                                         r"got float64\(1048576, 1048576\)"):
        trainer.load(tmp_path / "bomb.npz")


def test_many_entries_are_refused_before_reading(trainer, tmp_path, no_reads):
    members = {**valid_members(trainer), **{f"junk{i}": b"" for i in range(3000)}}
    write_zip(tmp_path / "many.npz", members)
    with pytest.raises(InputError, match="more than a checkpoint of this training step can be"):
        trainer.load(tmp_path / "many.npz")
    write_zip(tmp_path / "few.npz", {**valid_members(trainer), "junk": npy_bytes(np.zeros(1))})
    with pytest.raises(InputError, match="unexpected 'junk'"):
        trainer.load(tmp_path / "few.npz")


def test_a_deflate_bomb_entry_is_refused_by_its_declared_size(trainer, tmp_path, no_reads):
    members = valid_members(trainer)
    members["step"] += b"\0" * (8 << 20)       # 8 MiB of zeros after the array: a few KiB once deflated
    write_zip(tmp_path / "deflated.npz", members, zipfile.ZIP_DEFLATED)
    assert (tmp_path / "deflated.npz").stat().st_size < 64 * 1024
    with pytest.raises(InputError, match=r"entry 'step' is \d+ bytes, more than its array takes \(8 bytes\)"):
        trainer.load(tmp_path / "deflated.npz")


@pytest.mark.parametrize("name, value, message", [
    ("params/w1", np.zeros((3, 6), np.float64), r"expects float32\(3, 6\), got float64\(3, 6\)"),
    ("params/w1", np.zeros((6, 3), np.float32), r"expects float32\(3, 6\), got float32\(6, 3\)"),
    ("step", np.array([0], np.int64), r"expects int64\(\), got int64\(1,\)"),
    ("params/b1", np.array([None] * 6, object), "holds Python objects"),
])
def test_wrong_entries_are_refused_from_their_headers(trainer, tmp_path, no_reads, name, value, message):
    members = valid_members(trainer)
    members[name] = npy_bytes(value)
    write_zip(tmp_path / "bad.npz", members)
    with pytest.raises(InputError, match=message):
        trainer.load(tmp_path / "bad.npz")


def test_truncated_and_duplicated_entries(trainer, tmp_path):
    members = valid_members(trainer)
    members["params/w1"] = members["params/w1"][:-4]
    write_zip(tmp_path / "short.npz", members)
    with pytest.raises(InputError, match="'params/w1' is .* bytes, but its header and array take"):
        trainer.load(tmp_path / "short.npz")
    with zipfile.ZipFile(tmp_path / "twice.npz", "w") as archive, pytest.warns(UserWarning, match="Duplicate"):
        for name, blob in [*valid_members(trainer).items(), ("step", npy_bytes(np.array(1, np.int64)))]:
            archive.writestr(name + ".npy", blob)
    with pytest.raises(InputError, match="'step' twice"):
        trainer.load(tmp_path / "twice.npz")


def test_compressed_and_fortran_order_checkpoints_load(trainer, tmp_path):
    values = entries(trainer)
    values["params/w1"] = np.asfortranarray(np.arange(18, dtype=np.float32).reshape(3, 6))
    values["step"] = np.array(7, np.int64)
    np.savez_compressed(tmp_path / "c.npz", **values)
    trainer.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(trainer.params["w1"], values["params/w1"])
    assert trainer.step_count == 7
    trainer.save(tmp_path / "again.npz")
    with np.load(tmp_path / "again.npz") as saved:
        assert sorted(saved.files) == sorted(values)


def test_an_unreadable_checkpoint(trainer, tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(GcompileError, match="cannot read checkpoint"):
        trainer.load(tmp_path / "junk.npz")
