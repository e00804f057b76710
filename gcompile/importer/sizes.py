"""Integer arithmetic on sizes for the importer: what exporters compute from a model's shapes.

A value known at import time up to symbolic dims (SymInts, in table.py) holds one entry per element:
an int, a dim (an int or a product of dim names, `ir.dims`' monomials such as "batch" or "2*batch"),
or a `Size`, an expression over the dims that is not itself a dim (batch + 1, max(batch, 1),
batch // 3). The dynamo exporter writes a model's sizes through long chains of such arithmetic
(Shape -> Squeeze -> CastLike -> Range, Min/Max and Where on sizes, Div and Mod of sizes): keeping
every step symbolic, instead of computing the first one that leaves the monomials at run time, lets
a chain come back to a dim later ((batch + 1) - 1, max(batch, 0), 6*batch // 6) and be a shape again,
and keeps the refusals for what truly depends on the data.

A Size is a polynomial with integer coefficients over atoms: dim names, and the operations the
polynomials cannot express (min, max, truncating division, remainders, abs) kept as opaque atoms of
their simplified operands. Comparisons, min and max are decided by interval arithmetic (every dim is
at least 0); what cannot be decided (is batch equal to 1?) raises NotSymbolic, and the importer
computes that node at run time instead, as it does for any value that leaves this algebra.

Only ints, dims and Sizes appear as entries: every result is normalised by `entry`, so a Size never
stands for something a plain int or dim can say.
"""
from __future__ import annotations

import math
from collections import Counter

from ..ir import dims

INF = math.inf


class NotSymbolic(Exception):
    """A computation on sizes that this algebra does not decide (batch == 1), or on a value only known
    at run time: the importer then computes the node at run time instead."""


class Size:
    """A polynomial over atoms (dim names, and (op, *Size operands) tuples for min, max, div, mod,
    fmod and abs that do not simplify), as a sorted tuple of (monomial, coefficient) with the monomial
    a sorted tuple of atoms; hashable and compared by value, so equal expressions cancel."""
    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        self.terms = tuple(sorted(((m, c) for m, c in terms.items() if c), key=lambda t: _key(t[0])))

    def __eq__(self, other) -> bool:
        return isinstance(other, Size) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(self.terms)

    def __str__(self) -> str:
        text = ""
        for monomial, coef in sorted(self.terms, key=lambda t: (not t[0], _key(t[0]))):   # the constant last
            body = "*".join(_atom_str(a) for a in monomial)
            magnitude = abs(coef)
            part = body if monomial and magnitude == 1 else (f"{magnitude}*{body}" if monomial else str(magnitude))
            text += (" - " if coef < 0 else " + ") + part if text else ("-" if coef < 0 else "") + part
        return text or "0"

    __repr__ = __str__

    def constant(self) -> int | None:
        """Its value when it has no atoms, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and not self.terms[0][0]:
            return self.terms[0][1]
        return None


def _key(monomial: tuple) -> str:
    return "*".join(_atom_str(a) for a in monomial)


def _atom_str(atom) -> str:
    if isinstance(atom, str):
        return atom
    op, *args = atom
    names = {"div": "//", "mod": "%"}
    if op in names:
        a, b = (f"({x})" if len(x.terms) > 1 else str(x) for x in args)
        return f"({a} {names[op]} {b})"
    return f"{op}({', '.join(str(a) for a in args)})"


def as_size(value) -> Size:
    """An entry (int, bool, dim or Size) as a Size."""
    if isinstance(value, Size):
        return value
    if isinstance(value, (int, bool)):
        return Size({(): int(value)})
    names = dims.symbols(value)
    coef = dims.divide(value, dims.product(names))
    return Size({tuple(names): coef})


def _atom(op: str, *args: Size) -> Size:
    return Size({((op, *args),): 1})


def entry(size: Size):
    """The simplest entry for `size`: an int, a dim (a positive multiple of a product of dim names),
    or the Size itself."""
    c = size.constant()
    if c is not None:
        return c
    if len(size.terms) == 1:
        monomial, coef = size.terms[0]
        if coef > 0 and all(isinstance(a, str) for a in monomial):
            return dims.product((coef, *monomial))
    return size


def is_dim(value) -> bool:
    return not isinstance(value, Size)


# -- the ring: exact -----------------------------------------------------------------------------------------
def _add(a: Size, b: Size, sign: int = 1) -> Size:
    terms = dict(a.terms)
    for m, c in b.terms:
        terms[m] = terms.get(m, 0) + sign * c
    return Size(terms)


def _mul(a: Size, b: Size) -> Size:
    terms: dict = {}
    for ma, ca in a.terms:
        for mb, cb in b.terms:
            m = tuple(sorted(ma + mb, key=_atom_str))
            terms[m] = terms.get(m, 0) + ca * cb
    return Size(terms)


def add(a, b):
    return entry(_add(as_size(a), as_size(b)))


def sub(a, b):
    return entry(_add(as_size(a), as_size(b), -1))


def mul(a, b):
    return entry(_mul(as_size(a), as_size(b)))


def neg(a):
    return entry(_add(Size({}), as_size(a), -1))


# -- bounds: every dim is at least 0 ---------------------------------------------------------------------------
def _times(x: float, y: float) -> float:
    """x * y for interval bounds: 0 times an unbounded end is 0 (the value is finite)."""
    return 0.0 if x == 0 or y == 0 else x * y


def _interval_mul(a: tuple, b: tuple) -> tuple:
    products = [_times(x, y) for x in a for y in b]
    return min(products), max(products)


def interval(size: Size) -> tuple:
    """(lowest, highest) value `size` can take, with -inf/inf where unbounded."""
    lo = hi = 0.0
    for monomial, coef in size.terms:
        span: tuple = (1.0, 1.0)
        for atom in monomial:
            span = _interval_mul(span, _atom_interval(atom))
        low, high = _interval_mul(span, (coef, coef))
        lo, hi = lo + low, hi + high
    return lo, hi


def _atom_interval(atom) -> tuple:
    if isinstance(atom, str):
        return 0.0, INF
    op, *args = atom
    spans = [interval(a) for a in args]
    if op == "max":
        return max(spans[0][0], spans[1][0]), max(spans[0][1], spans[1][1])
    if op == "min":
        return min(spans[0][0], spans[1][0]), min(spans[0][1], spans[1][1])
    if op == "abs":
        lo, hi = spans[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    (a_lo, a_hi), (b_lo, b_hi) = spans
    if op == "div" and a_lo >= 0 and b_lo > 0:
        return (0.0 if b_hi == INF else float(a_lo // b_hi)), (a_hi if a_hi == INF else float(a_hi // b_lo))
    if op in ("mod", "fmod") and b_lo > 0 and (op == "mod" or a_lo >= 0):
        return 0.0, (b_hi - 1 if a_lo < 0 else min(a_hi, b_hi - 1))
    return -INF, INF


def _difference(a, b) -> tuple:
    """The interval of a - b."""
    return interval(_add(as_size(a), as_size(b), -1))


def compare(op: str, a, b) -> bool:
    """Equal, Less, LessOrEqual, Greater or GreaterOrEqual of two entries; NotSymbolic where the dims'
    values decide it."""
    lo, hi = _difference(a, b)
    decided = {"Equal": (lo == hi == 0, lo > 0 or hi < 0), "Less": (hi < 0, lo >= 0),
               "LessOrEqual": (hi <= 0, lo > 0), "Greater": (lo > 0, hi <= 0),
               "GreaterOrEqual": (lo >= 0, hi < 0)}[op]
    if decided[0]:
        return True
    if decided[1]:
        return False
    raise NotSymbolic()


def maximum(a, b):
    lo, hi = _difference(a, b)
    if lo >= 0:
        return a
    if hi <= 0:
        return b
    return entry(_atom("max", *sorted((as_size(a), as_size(b)), key=str)))


def minimum(a, b):
    lo, hi = _difference(a, b)
    if lo >= 0:
        return b
    if hi <= 0:
        return a
    return entry(_atom("min", *sorted((as_size(a), as_size(b)), key=str)))


def absolute(a):
    lo, hi = interval(as_size(a))
    if lo >= 0:
        return a
    if hi <= 0:
        return neg(a)
    return entry(_atom("abs", as_size(a)))


# -- division ------------------------------------------------------------------------------------------------
def _exact_quotient(a: Size, b: Size) -> Size | None:
    """a / b when b is one term dividing every term of a (coefficient and atoms), or a == b, else None
    (a divisor that is 0 at run time has no quotient, as in ONNX: the model is wrong there)."""
    if a == b:
        return Size({(): 1})
    if len(b.terms) != 1:
        return None
    (mb, cb), = b.terms
    need = Counter(mb)
    terms = {}
    for m, c in a.terms:
        have = Counter(m)
        if c % cb or any(have[k] < v for k, v in need.items()):
            return None
        terms[tuple(sorted((have - need).elements(), key=_atom_str))] = c // cb
    return Size(terms)


def div(a, b):
    """ONNX's integer Div (truncating toward zero) of two entries; NotSymbolic for a division by 0."""
    sa, sb = as_size(a), as_size(b)
    ca, cb = sa.constant(), sb.constant()
    if cb == 0:
        raise NotSymbolic()
    if ca is not None and cb is not None:
        q = abs(ca) // abs(cb)
        return -q if (ca < 0) != (cb < 0) else q
    exact = _exact_quotient(sa, sb)
    return entry(exact) if exact is not None else entry(_atom("div", sa, sb))


def exact_div(a, b):
    """Division of whole numbers held as floats (a size cast to float): only where it leaves no
    remainder, else NotSymbolic (the quotient is no longer a whole number)."""
    sa, sb = as_size(a), as_size(b)
    ca, cb = sa.constant(), sb.constant()
    if ca is not None and cb is not None:
        if not cb or ca % cb:
            raise NotSymbolic()
        return ca // cb
    exact = _exact_quotient(sa, sb)
    if exact is None:
        raise NotSymbolic()
    return entry(exact)


def mod(a, b, fmod: bool = False):
    """ONNX's Mod of two integer entries: the sign of the divisor (fmod=0, as Python's %) or of the
    dividend (fmod=1, as C's fmod); NotSymbolic for a remainder by 0."""
    sa, sb = as_size(a), as_size(b)
    ca, cb = sa.constant(), sb.constant()
    if cb == 0:
        raise NotSymbolic()
    if ca is not None and cb is not None:
        return int(math.fmod(ca, cb)) if fmod else ca % cb
    if _exact_quotient(sa, sb) is not None:
        return 0
    if interval(sa)[0] >= 0 and _difference(sb, sa)[0] > 0:     # 0 <= a < b: a itself
        return a
    return entry(_atom("fmod" if fmod else "mod", sa, sb))
