"""map_model and `gcompile map` on a local Ray: a forward model over Parquet shards in batches, and
gradient / Hessian-vector-product models over .npy shards row by row, each equal to the same
model run in this process; rows keep their order; bad datasets are clear errors."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main
from gcompile.distributed import map_model, read_shards
from gcompile.errors import GcompileError, InputError

pytestmark = pytest.mark.usefixtures("ray_session")

RNG = np.random.default_rng(7)
W = RNG.standard_normal((3, 2))
X = RNG.standard_normal((300, 3))


def forward():
    return gc.compile(lambda x, w: F.tanh(x @ w), gc.spec(("batch", 3), "float64"), W, provider="cpu")


def per_example(x):
    return F.sum(F.sin(x) * x)


def write_parquet(folder, parts):
    folder.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(X)), parts)):
        pq.write_table(pa.table({"x": pa.FixedShapeTensorArray.from_numpy_ndarray(X[rows]), "id": rows}),
                       folder / f"in-{i}.parquet")
    return folder


def test_a_forward_model_over_parquet_shards_equals_one_process(tmp_path):
    f = forward()
    f.save(tmp_path / "f.onnx")
    data = write_parquet(tmp_path / "data", 3)
    result = map_model(tmp_path / "f.onnx", data, tmp_path / "out", constants={"w": W}, batch_size=64,
                       progress=False)
    assert result["rows"] == len(X) and result["batched"]
    got = read_shards(tmp_path / "out")
    assert list(got) == ["output"] and got["output"].shape == (len(X), 2)
    np.testing.assert_allclose(got["output"], f(X, W), rtol=1e-13, atol=1e-15)
    with pytest.raises(GcompileError, match="already holds shards"):
        map_model(tmp_path / "f.onnx", data, tmp_path / "out", constants={"w": W}, progress=False)


def test_gradient_and_hvp_models_over_npy_shards_row_by_row(tmp_path):
    both = gc.compile(lambda x, v: {"grad": gc.grad(per_example(x), [x])[0], "hvp": gc.hvp(per_example, (x,), (v,))[0]},
                      gc.spec((3,), "float64"), gc.spec((3,), "float64"), provider="cpu")
    v = np.array([1.0, -2.0, 0.5])
    for i, rows in enumerate(np.array_split(np.arange(len(X)), 4)):
        np.save(tmp_path / f"x-{i}.npy", X[rows])
    # 2 workers x 2 CPUs hold all 4 CPUs of the test cluster: reading and writing must still run
    result = map_model(both, {"x": str(tmp_path / "x-*.npy")}, tmp_path / "out", constants={"v": v},
                       format="npy", batch_size=50, cpus_per_worker=2, progress=False)
    assert result["rows"] == len(X) and not result["batched"]
    got = read_shards(tmp_path / "out")
    want = [both(row, v) for row in X]
    np.testing.assert_array_equal(got["grad"], np.stack([w["grad"] for w in want]))
    np.testing.assert_array_equal(got["hvp"], np.stack([w["hvp"] for w in want]))
    np.testing.assert_allclose(got["grad"], np.sin(X) + X * np.cos(X), rtol=1e-12)


def test_gcompile_map_command(tmp_path):
    f = forward()
    f.save(tmp_path / "f.onnx")
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", W)
    runner = CliRunner()
    result = runner.invoke(main, ["map", str(tmp_path / "f.onnx"), f"x={tmp_path / 'x.npy'}", "-c",
                                  f"w={tmp_path / 'w.npy'}", "-o", str(tmp_path / "out"), "--format", "npy",
                                  "--batch-size", "100"])
    assert result.exit_code == 0, result.output
    assert f"over {len(X)} rows (in batches)" in result.output
    np.testing.assert_allclose(read_shards(tmp_path / "out")["output"], f(X, W), rtol=1e-13, atol=1e-15)
    result = runner.invoke(main, ["map", str(tmp_path / "f.onnx"), f"y={tmp_path / 'x.npy'}", "-o",
                                  str(tmp_path / "out2")])
    assert result.exit_code == 2 and "data for 'y', which the model does not take" in result.output


def test_datasets_that_do_not_fit_the_model_are_refused(tmp_path):
    f = forward()
    data = write_parquet(tmp_path / "data", 1)
    with pytest.raises(InputError, match="no column for model input.*'w'.*its columns: x, id"):
        map_model(f, data, tmp_path / "out", progress=False)
    f32 = gc.compile(lambda x, w: x @ w, gc.spec(("batch", 3), "float32"), W.astype(np.float32), provider="cpu")
    with pytest.raises(InputError, match=r"column 'x' holds rows of float64\(3,\), but the model's input 'x' takes "
                                         r"float32\(3,\) per row"):
        map_model(f32, data, tmp_path / "out", constants={"w": W.astype(np.float32)}, progress=False)
    with pytest.raises(InputError, match="constants 'z' are not inputs of the model"):
        map_model(f, data, tmp_path / "out", constants={"z": W}, progress=False)
    with pytest.raises(GcompileError, match="5 workers of 1 CPU.* need 5 CPUs, but the Ray cluster has 4"):
        map_model(f, data, tmp_path / "out", constants={"w": W}, workers=5, progress=False)
    with pytest.raises(GcompileError, match="no .npy files at"):
        map_model(f, {"x": str(tmp_path / "none-*.npy")}, tmp_path / "out", constants={"w": W}, progress=False)


def test_gcompile_map_of_a_npy_file_given_as_parquet_says_name_equals_path(tmp_path):
    """`gcompile map m.onnx xs.npy` exited 1 ("no files found ... this is a gcompile bug")."""
    forward().save(tmp_path / "f.onnx")
    np.save(tmp_path / "xs.npy", X)
    result = CliRunner().invoke(main, ["map", str(tmp_path / "f.onnx"), str(tmp_path / "xs.npy"), "-o",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2 and "gcompile bug" not in result.output, result.output
    assert "no Parquet file at" in result.stderr and f"NAME=PATH: x={tmp_path / 'xs.npy'}" in result.stderr
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "folder" / "part.npy", X)
    with pytest.raises(GcompileError, match="no Parquet file at .*folder.*{'x': "):
        map_model(tmp_path / "f.onnx", tmp_path / "folder", tmp_path / "out", constants={"w": W}, progress=False)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(GcompileError, match="cannot read .*bad.parquet.* as Parquet"):
        map_model(tmp_path / "f.onnx", tmp_path / "bad.parquet", tmp_path / "out", constants={"w": W},
                  progress=False)


def test_gcompile_map_quiet_prints_nothing(tmp_path):
    """`gcompile map -q` printed Ray Data's INFO lines (and its own summary)."""
    forward().save(tmp_path / "f.onnx")
    np.save(tmp_path / "x.npy", X[:20])
    np.save(tmp_path / "w.npy", W)
    result = CliRunner().invoke(main, ["map", "-q", str(tmp_path / "f.onnx"), f"x={tmp_path / 'x.npy'}", "-c",
                                       f"w={tmp_path / 'w.npy'}", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0 and result.output == "", result.output
    assert read_shards(tmp_path / "out")["output"].shape == (20, 2)
