"""What gcompile promises about the files it writes: a build changes its folder as one set (a
failure or a kill while writing changes nothing), a model and its external data change together,
a second build into a locked folder is refused, and temporary files never look like artifacts and
are removed by the next write into their folder.

Failures are simulated deterministically: a full disk with RLIMIT_FSIZE in a subprocess, a kill
with os._exit from a patched os.fsync / os.replace at a chosen call."""
import errno
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import gcompile as gc
from gcompile.cli import main
from gcompile.runtime.files import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACT_SUFFIXES = (".onnx", ".npz", ".json", ".npy", ".data")


def model_text(scale: float, big: bool = True) -> str:
    """Two artifacts: `small` (a few hundred bytes) and `big` (a 64 KiB weight) whose values
    depend on `scale`, so two builds differ in every file."""
    return textwrap.dedent(f"""
        import numpy as np
        import gcompile as gc
        import gcompile.functions as F

        SCALE = {scale}
        W = SCALE * np.ones((128, 128), np.float32)

        @gc.export(x=gc.spec((2, 128)))
        def small(x):
            return x * SCALE

        @gc.export(x=gc.spec((2, 128)))
        def {"big" if big else "other"}(x):
            return x @ W
    """)


def snapshot(folder) -> dict:
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def run_script(script: str, cwd, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """Run `script` in a fresh Python, optionally with files limited to `limit_bytes`
    (RLIMIT_FSIZE: a write past it fails with EFBIG, as on a full disk)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, capture_output=True, text=True,
                          env=env, preexec_fn=limit if limit_bytes else None, timeout=120)


KILL_ON = textwrap.dedent("""
    import os
    def kill_on(name, n):
        # the n-th call of os.<name> ends the process at once, as a kill -9 would
        real, calls = getattr(os, name), [0]
        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                os._exit(9)
            return real(*args, **kwargs)
        setattr(os, name, wrapper)
""")


def build_in_subprocess(tmp_path, kill: tuple[str, int]) -> subprocess.CompletedProcess:
    return run_script(KILL_ON + textwrap.dedent(f"""
        from gcompile.artifacts.build import build
        kill_on{kill!r}
        build("model.py", "out")
    """), tmp_path)


@pytest.fixture
def built(tmp_path):
    (tmp_path / "model.py").write_text(model_text(1.0))
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    (tmp_path / "out" / "notes.txt").write_text("the user's own file")
    (tmp_path / "model.py").write_text(model_text(2.0))      # the next build changes every artifact
    return tmp_path / "out"


def no_temporary_files(folder):
    assert not [n for n in os.listdir(folder) if "gcompile-tmp" in n or n.startswith(".")], os.listdir(folder)


# -- item 5: a build changes its folder as one set ---------------------------------------------------------------
def test_a_build_failing_on_its_second_file_changes_nothing(built, tmp_path):
    before = snapshot(built)
    proc = run_script("""
        import sys
        from gcompile.cli import main
        sys.argv = ["gcompile", "build", "model.py", "-o", "out"]
        main()
    """, tmp_path, limit_bytes=32 * 1024)        # `small` fits, `big` (64 KiB) does not: a full disk
    assert proc.returncode == 2, proc.stderr
    assert "cannot write the build to 'out'" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(built) == before                              # no new file, no temporary file


def test_a_build_killed_while_writing_changes_nothing_and_the_next_build_cleans_up(built, tmp_path):
    before = snapshot(built)
    proc = build_in_subprocess(tmp_path, ("fsync", 2))          # killed while writing its second file
    assert proc.returncode == 9, proc.stderr
    after = snapshot(built)
    leftovers = [n for n in after if n not in before]
    assert {n: after[n] for n in before} == before                # every file as it was
    assert leftovers and not [n for n in leftovers if n.endswith(ARTIFACT_SUFFIXES)], leftovers
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
    assert result.exit_code == 0, result.output
    no_temporary_files(built)
    assert (built / "notes.txt").read_text() == "the user's own file"


def test_a_build_killed_between_renames_is_refused_by_loaders_until_rebuilt(built, tmp_path):
    proc = build_in_subprocess(tmp_path, ("replace", 2))        # `small` renamed in, `big` and the manifest not
    assert proc.returncode == 9, proc.stderr
    manifest = json.loads((built / "manifest.json").read_text())
    small = next(e for e in manifest["artifacts"] if e["name"] == "small")
    assert hashlib.sha256((built / "small.onnx").read_bytes()).hexdigest() != small["sha256"]
    result = CliRunner().invoke(main, ["inspect", str(built / "small.onnx")])
    assert result.exit_code == 2 and "manifest" in result.stderr and "refused" in result.stderr, result.output
    assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)]).exit_code == 0
    assert CliRunner().invoke(main, ["inspect", str(built / "small.onnx")]).exit_code == 0
    no_temporary_files(built)


def test_a_build_replaces_only_its_own_files(built, tmp_path):
    (built / "mine.onnx").write_bytes(b"a file no manifest lists")
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["artifacts"].append({"name": "x", "file": "../model.py"})          # never removed: not a build file
    manifest["artifacts"].append({"name": "y", "file": "notes.txt"})
    manifest["artifacts"].append({"name": "z", "file": "small.onnx", "external_data": "not an object"})
    (built / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "model.py").write_text(model_text(2.0, big=False))              # `big` is gone, `other` is new
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(built)) == ["manifest.json", "mine.onnx", "notes.txt", "other.onnx", "small.onnx"]
    assert (tmp_path / "model.py").exists()


def test_a_build_killed_before_removing_a_dropped_artifact_is_finished_by_the_next_build(built, tmp_path):
    (tmp_path / "model.py").write_text(model_text(2.0, big=False))              # `big` is dropped, `other` is new
    proc = build_in_subprocess(tmp_path, ("unlink", 1))     # killed after the manifest, at the first removal
    assert proc.returncode == 9, proc.stderr
    manifest = json.loads((built / "manifest.json").read_text())
    assert {e["name"] for e in manifest["artifacts"]} == {"small", "other"} and (built / "big.onnx").exists()
    with pytest.raises(gc.GcompileError, match="big.onnx was dropped from the build"):
        gc.load_onnx(built / "big.onnx")
    refused = CliRunner().invoke(main, ["inspect", str(built / "big.onnx")])
    assert refused.exit_code == 2 and "dropped from the build" in refused.stderr, refused.output
    assert CliRunner().invoke(main, ["inspect", str(built / "other.onnx")]).exit_code == 0
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(built)) == ["manifest.json", "notes.txt", "other.onnx", "small.onnx"]


def test_a_file_put_where_a_dropped_artifact_was_is_the_users(built, tmp_path):
    (tmp_path / "model.py").write_text(model_text(2.0, big=False))
    assert build_in_subprocess(tmp_path, ("unlink", 1)).returncode == 9
    (built / "big.onnx").write_bytes(b"the user's own big.onnx, put there after the interrupted build")
    assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)]).exit_code == 0
    assert (built / "big.onnx").read_bytes().startswith(b"the user's own")
    no_temporary_files(built)


def test_a_hostile_removal_list_never_reaches_other_files(built, tmp_path):
    (tmp_path / "mine.txt").write_text("outside the build folder")
    listed = {name: hashlib.sha256(data).hexdigest() for name, data in
              [("../mine.txt", b"outside the build folder"), ("notes.txt", b"the user's own file")]}
    (built / ".gcompile-removing.json").write_text(json.dumps({**listed, "small.onnx": "not a sha256", "x": 5}))
    assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)]).exit_code == 0
    assert (tmp_path / "mine.txt").exists() and (built / "notes.txt").exists() and (built / "small.onnx").exists()
    no_temporary_files(built)
    (built / ".gcompile-removing.json").write_bytes(b"[not json")
    assert CliRunner().invoke(main, ["inspect", str(built / "small.onnx")]).exit_code == 0


def test_loading_a_file_a_build_folder_does_not_list_warns_unless_it_is_sealed(built, tmp_path):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    (built / "theirs.onnx").write_bytes(model.SerializeToString())
    with pytest.warns(UserWarning, match="theirs.onnx is in the build folder .* does not list it"):
        gc.load_onnx(built / "theirs.onnx")
    gc.compile(lambda x: -x, gc.spec((2,)), provider="cpu").save(built / "mine.onnx")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gc.load_onnx(built / "mine.onnx")                                         # its seal checks it


def test_a_nested_lock_of_one_folder_is_refused(tmp_path):
    from gcompile.runtime.files import folder_lock
    nested = "already being written by this process"
    with folder_lock(tmp_path), pytest.raises(gc.GcompileError, match=nested), folder_lock(tmp_path, wait=True):
        pass
    assert os.listdir(tmp_path) == []                                   # the lock file goes with the lock


def test_two_concurrent_builds_one_wins_and_the_folder_is_one_set(built, tmp_path):
    # the first build stops inside its write phase (holding the lock) until told to go on
    first = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys
        real = os.fsync
        def pause(fd):
            print("writing", flush=True)
            sys.stdin.readline()
            os.fsync = real
            return real(fd)
        os.fsync = pause
        from gcompile.cli import main
        sys.argv = ["gcompile", "build", "model.py", "-o", "out"]
        main()
    """)], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "writing\n"
        (tmp_path / "model.py").write_text(model_text(3.0))
        second = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
        assert second.exit_code == 2, second.output
        assert f"process {first.pid}" in second.stderr and str(built) in second.stderr
        out, err = first.communicate("go\n", timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    manifest = json.loads((built / "manifest.json").read_text())
    for entry in manifest["artifacts"]:                                     # every file is the first build's
        assert hashlib.sha256((built / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]


def test_a_build_into_a_locked_folder_is_refused_until_the_holder_dies(built, tmp_path):
    before = snapshot(built)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys
        from gcompile.runtime.files import folder_lock
        with folder_lock(sys.argv[1]):
            print("locked", flush=True)
            sys.stdin.readline()
    """), str(built)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        blocked = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
        assert blocked.exit_code == 2, blocked.output
        assert "another gcompile" in blocked.stderr and str(built) in blocked.stderr
        assert f"process {holder.pid}" in blocked.stderr
        assert {n: v for n, v in snapshot(built).items() if n != ".gcompile-lock"} == before
    finally:
        holder.send_signal(signal.SIGKILL)                              # killed: its lock must not block
        holder.wait()
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built)])
    assert result.exit_code == 0, result.output
    no_temporary_files(built)


# -- item 6: a model and its external data change together -------------------------------------------------------
def saved_model_script(scale: float, kill: tuple[str, int] | None) -> str:
    return KILL_ON + textwrap.dedent(f"""
        import numpy as np
        import gcompile as gc
        W = {scale} * np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
        cf = gc.compile(lambda x: x @ W, gc.spec((1, 64)), provider="cpu")
        {f"kill_on{kill!r}" if kill else ""}
        cf.save("m.onnx", external_data_threshold=0)
    """)


def run_saved(folder) -> np.ndarray:
    session = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones((1, 64), np.float32)})[0]


@pytest.mark.parametrize("kill", [("fsync", 2), ("replace", 2)], ids=["while-writing", "between-renames"])
def test_a_save_killed_midway_keeps_the_old_model_and_data_pair(tmp_path, kill):
    assert run_script(saved_model_script(1.0, None), tmp_path).returncode == 0
    old = run_saved(tmp_path)
    proc = run_script(saved_model_script(2.0, kill), tmp_path)
    assert proc.returncode == 9, proc.stderr
    np.testing.assert_array_equal(run_saved(tmp_path), old)                 # the old .onnx with its own data
    assert run_script(saved_model_script(2.0, None), tmp_path).returncode == 0
    np.testing.assert_array_equal(run_saved(tmp_path), 2 * old)
    names = sorted(os.listdir(tmp_path))                                    # the old data file and temps removed
    assert len(names) == 2 and names[0] == "m.onnx", names
    data = (tmp_path / names[1]).read_bytes()
    assert names[1] == f"m.onnx.{hashlib.sha256(data).hexdigest()[:16]}.data"


def test_a_build_killed_between_renames_keeps_each_model_with_its_data(built, tmp_path):
    (tmp_path / "model.py").write_text(model_text(1.0))
    assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(built),
                                     "--external-data-threshold", "1024"]).exit_code == 0
    x = np.ones((2, 128), np.float32)
    old = ort.InferenceSession(str(built / "big.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (tmp_path / "model.py").write_text(model_text(2.0))
    proc = run_script(KILL_ON + textwrap.dedent("""
        from gcompile.artifacts.build import build
        kill_on("replace", 3)
        build("model.py", "out", external_data_threshold=1024)
    """), tmp_path)                     # killed after the new data of `big` is renamed in, before big.onnx is
    assert proc.returncode == 9, proc.stderr
    now = ort.InferenceSession(str(built / "big.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(now, old)
    assert CliRunner().invoke(main, ["inspect", str(built / "big.onnx")]).exit_code == 0    # the manifest agrees


# -- item 7: temporary files ---------------------------------------------------------------------------------
def test_temporary_files_of_a_killed_writer_match_no_artifact_glob_and_are_removed(tmp_path):
    proc = run_script(KILL_ON + textwrap.dedent("""
        from gcompile.runtime.files import atomic_write
        kill_on("fsync", 1)
        atomic_write("ckpt.npz", b"x" * 100)
    """), tmp_path)
    assert proc.returncode == 9, proc.stderr
    left = os.listdir(tmp_path)
    assert len(left) == 1 and not left[0].endswith(ARTIFACT_SUFFIXES) and left[0].startswith(".ckpt.npz."), left
    live = tmp_path / f".other.onnx.gcompile-tmp-{os.getppid()}-0123abcd"   # a live process's: kept
    live.write_bytes(b"")
    atomic_write(tmp_path / "other.npz", b"y")
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, "other.npz"])


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(gc.GcompileError, match="cannot write .*a.npz: No space left on device; the file there"):
        atomic_write(tmp_path / "a.npz", b"data")
    assert os.listdir(tmp_path) == []


def test_saved_files_have_the_umask_permissions(tmp_path):
    mask = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.npz", b"data")
    finally:
        os.umask(mask)
    assert os.stat(tmp_path / "a.npz").st_mode & 0o777 == 0o640


def test_the_trainer_checkpoint_temporary_is_cleaned_by_the_next_save(tmp_path):
    (tmp_path / ".ckpt.npz.gcompile-tmp-999999999-deadbeef").write_bytes(b"left by a killed save")
    step = gc.export_train_step(lambda p, x: gc.functions.sum(p["w"] * x), {"w": np.ones(3, np.float32)},
                                gc.optim.SGD(0.1), gc.spec((3,)), provider="cpu")
    gc.runtime.Trainer(step).save(tmp_path / "ckpt.npz")
    assert os.listdir(tmp_path) == ["ckpt.npz"]


# -- a full disk: a clear error (exit 2), the old files kept, the lock never left held ----------------------------
class FullDisk:
    """`os` as runtime/files.py sees it, on a disk that fills up: the n-th call that needs space
    (creating a file or folder, writing, flushing, syncing, renaming) fails with ENOSPC."""
    SPACE = {"makedirs", "write", "ftruncate", "fsync", "replace"}

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def tick(self) -> None:
        self.calls += 1
        if self.calls == self.n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        real = getattr(os, name)
        if name == "fdopen":
            return lambda *args, **kwargs: FullFile(self, real(*args, **kwargs))
        if name not in self.SPACE and name != "open":
            return real

        def call(*args, **kwargs):
            if name != "open" or args[1] & os.O_CREAT:
                self.tick()
            return real(*args, **kwargs)
        return call


class FullFile:
    def __init__(self, disk: FullDisk, f) -> None:
        self.disk, self.f = disk, f

    def write(self, data):
        self.disk.tick()
        return self.f.write(data)

    def flush(self):
        self.disk.tick()
        return self.f.flush()

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def lock_is_free(folder) -> bool:
    from gcompile.runtime.files import folder_lock
    try:
        with folder_lock(folder):
            return True
    except gc.GcompileError:
        return False


def each_disk_full_moment(monkeypatch, command, check) -> int:
    """Run `command()` with the disk filling up at each call that needs space in turn (the first,
    the second, ...) until it runs without reaching that call, and after each run, on a disk with
    space again, `check(disk, result)`; returns how many moments were tried."""
    import gcompile.runtime.files as files
    n = 0
    while True:
        n += 1
        disk = FullDisk(n)
        monkeypatch.setattr(files, "os", disk)
        try:
            result = command()
        finally:
            monkeypatch.setattr(files, "os", os)
        check(disk, result)
        if disk.calls < n:
            return n - 1


@pytest.mark.parametrize("check", [[], ["--check", "--external-data-threshold", "1024"]], ids=["build", "check-data"])
def test_a_full_disk_at_any_moment_of_a_build_is_exit_2_and_keeps_a_usable_folder(built, tmp_path, monkeypatch,
                                                                                   check):
    before = snapshot(built)
    (tmp_path / "new").mkdir()
    clean = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(tmp_path / "new"), *check])
    assert clean.exit_code == 0, clean.output
    after = snapshot(tmp_path / "new")

    def check_build(disk, result):
        now = {n: v for n, v in snapshot(built).items() if n != "notes.txt"}
        if disk.calls >= disk.n and result.exit_code != 0:   # the disk filled up and the build failed
            assert result.exit_code == 2 and "No space left on device" in result.stderr, (disk.n, result.output)
            assert all(v in (before.get(n), after.get(n)) for n, v in now.items()), (disk.n, sorted(now))
        else:
            assert result.exit_code == 0 and now == after, (disk.n, result.output)
        assert (built / "notes.txt").read_text() == "the user's own file"
        assert lock_is_free(built), disk.n
        no_temporary_files(built)
        for name, data in before.items():    # the next try starts from the old build again
            (built / name).write_bytes(data)
        for name in set(os.listdir(built)) - set(before):
            os.unlink(built / name)
    build = CliRunner().invoke
    args = ["build", str(tmp_path / "model.py"), "-o", str(built), *check]
    assert each_disk_full_moment(monkeypatch, lambda: build(main, args), check_build) >= 8


def test_a_full_disk_while_saving_keeps_the_old_file_and_never_leaves_the_lock(tmp_path, monkeypatch):
    old = gc.compile(lambda x: x * 2.0, gc.spec((2,)), provider="cpu")
    new = gc.compile(lambda x: x @ np.ones((300, 2), np.float32), gc.spec((1, 300)), provider="cpu")
    old.save(tmp_path / "m.onnx")
    before = (tmp_path / "m.onnx").read_bytes()

    def save():
        try:
            new.save(tmp_path / "m.onnx", external_data_threshold=1024)
        except gc.GcompileError as err:
            return err
        return None

    def check_save(disk, err):
        if err is not None:
            assert disk.calls >= disk.n and "No space left on device" in str(err) and "m.onnx" in str(err)
        assert gc.load_onnx(tmp_path / "m.onnx") is not None    # the old file, or the new one once renamed
        assert lock_is_free(tmp_path), disk.n
        for name in os.listdir(tmp_path):
            os.unlink(tmp_path / name)
        (tmp_path / "m.onnx").write_bytes(before)
    assert each_disk_full_moment(monkeypatch, save, check_save) >= 6


def test_a_save_on_a_full_disk_does_not_keep_the_folder_locked_once_space_is_back(tmp_path):
    """The regression: a full disk while the lock recorded its holder left the lock's descriptor
    open, so the next save in the same process waited for it forever and other processes were
    refused. Here the disk is full (RLIMIT_FSIZE 0: every write fails) for one save only."""
    saver = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import resource, sys
        import numpy as np
        import gcompile as gc
        cf = gc.compile(lambda x: x * 2.0, gc.spec((2,)), provider="cpu")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
        try:
            cf.save("m.onnx")
        except Exception as err:
            print("refused:", type(err).__name__, err, flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        print("space is back", flush=True)
        sys.stdin.readline()
        cf.save("m.onnx")
        print("saved", flush=True)
    """)], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert saver.stdout.readline().startswith("refused: GcompileError cannot save m.onnx: File too large")
        assert saver.stdout.readline() == "space is back\n"
        assert lock_is_free(tmp_path)                     # another process may write there while the saver lives
        out, err = saver.communicate("go\n", timeout=60)  # and the saver's own next save does not hang
    finally:
        if saver.poll() is None:
            saver.kill()
    assert out == "saved\n" and saver.returncode == 0, err
    assert gc.load_onnx(tmp_path / "m.onnx") is not None


@pytest.mark.parametrize("command", ["run-out", "viz", "grad"])
def test_a_full_disk_at_any_moment_of_a_writing_command_is_exit_2(tmp_path, monkeypatch, command):
    gc.compile(lambda x: x * 2.0, gc.spec((2,)), provider="cpu").save(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    target = tmp_path / "target"
    args = {"run-out": ["run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", target],
            "viz": ["viz", tmp_path / "m.onnx", "-o", target / "d.svg"],
            "grad": ["grad", tmp_path / "m.onnx", "--wrt", "x", "-o", target / "g.onnx"]}[command]

    def check(disk, result):
        if result.exit_code != 0:
            assert result.exit_code == 2 and "No space left on device" in result.stderr, (disk.n, result.output)
        if target.exists():
            assert lock_is_free(target), disk.n
            no_temporary_files(target)
    invoke = CliRunner().invoke
    assert each_disk_full_moment(monkeypatch, lambda: invoke(main, [str(a) for a in args]), check) >= 3
