"""Symbolic dims: exact products and quotients of ints and symbol monomials ("784*batch")."""
import pytest

from gcompile.ir import dims


@pytest.mark.parametrize("factors, expected", [
    ([], 1), ([2, 3, 4], 24), (["batch"], "batch"), ([2, "batch", 3], "6*batch"), (["batch", 1], "batch"),
    (["batch", "batch"], "batch*batch"), (["784*batch", "n"], "784*batch*n"), (["n", "batch"], "batch*n"),
    (["2*batch", 3], "6*batch"), ([0, "batch"], 0),
])
def test_product(factors, expected):
    assert dims.product(factors) == expected


def test_product_is_order_independent():
    assert dims.product(["seq", 4, "batch"]) == dims.product(["batch", "seq", 4]) == "4*batch*seq"


@pytest.mark.parametrize("num, den, expected", [
    (12, 4, 3), (12, 5, None), ("784*batch", 784, "batch"), ("784*batch", "batch", 784),
    ("784*batch", 16, "49*batch"), ("784*batch", 5, None), ("batch", "n", None), ("batch*batch", "batch", "batch"),
    ("6*batch*seq", "2*seq", "3*batch"), (7, 0, None), ("batch", 1, "batch"), ("batch", "batch", 1),
])
def test_divide(num, den, expected):
    assert dims.divide(num, den) == expected


def test_divide_undoes_product():
    for a, b in [("batch", 784), ("2*n", "m"), (6, "batch")]:
        assert dims.divide(dims.product([a, b]), b) == a


@pytest.mark.parametrize("dim, bindings, expected", [
    (5, {}, 5), ("batch", {"batch": 3}, 3), ("784*batch", {"batch": 3}, 2352),
    ("batch*batch*n", {"batch": 2, "n": 5}, 20),
])
def test_resolve(dim, bindings, expected):
    assert dims.resolve(dim, bindings) == expected


def test_resolve_shape_symbols_and_static():
    assert dims.resolve_shape(("batch", 3, "6*batch"), {"batch": 2}) == (2, 3, 12)
    assert dims.symbols("2*batch*n") == ["batch", "n"] and dims.symbols(4) == []
    assert dims.is_static((1, 2)) and not dims.is_static((1, "batch"))
    assert dims.format_shape(("batch", 3)) == "(batch, 3)" and dims.format_shape((4,)) == "(4,)"
    assert dims.format_shape(()) == "()"


def test_resolve_needs_every_symbol():
    with pytest.raises(KeyError):
        dims.resolve("batch*n", {"batch": 2})
