"""tools/mutations.py's list of past bugs stays true to the code: each patch applies once to the
current source and changes it, and each bug's own regression tests exist (running the mutations
themselves takes the generic checks once per bug: that is the tool's job, not the suite's)."""
import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    spec = importlib.util.spec_from_file_location("mutations_tool", os.path.join(ROOT, "tools", "mutations.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module        # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


def test_the_mutations_have_distinct_names_and_at_least_five_bugs():
    names = [m.name for m in TOOL.MUTATIONS]
    assert len(set(names)) == len(names) >= 5


@pytest.mark.parametrize("mutation", TOOL.MUTATIONS, ids=lambda m: m.name)
def test_a_mutation_applies_to_the_current_code_and_names_existing_tests(mutation, tmp_path):
    for rel, old, new in mutation.edits:
        assert old != new
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(os.path.join(ROOT, rel)) as f:
            target.write_text(f.read())
    TOOL.apply(mutation, tmp_path)       # raises PatchError unless each text is there once
    assert mutation.own_tests
    for test in mutation.own_tests:
        path, _, name = test.partition("::")
        with open(os.path.join(ROOT, path)) as f:
            assert re.search(rf"^def {re.escape(name)}\(", f.read(), re.M), f"{test} is not in {path}"
