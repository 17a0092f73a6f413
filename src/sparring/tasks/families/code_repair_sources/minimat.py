"""Base ``minimat``: a tiny immutable matrix class."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""A tiny immutable matrix of numbers."""
from minimat.matrix import Matrix

__all__ = ["Matrix"]
'''

_SHAPE = r'''"""Shape checks for row-major lists of lists."""


def shape_of(rows):
    """(rows, cols) of a rectangular list of lists; ValueError if ragged or empty."""
    if not rows:
        raise ValueError("a matrix needs at least one row")
    width = len(rows[0])
    if width == 0:
        raise ValueError("a matrix needs at least one column")
    for row in rows:
        if len(row) != width:
            raise ValueError(f"ragged rows: expected {width} columns, got {len(row)}")
    return (len(rows), width)


def require_same_shape(a, b):
    """ValueError unless matrices a and b have the same shape."""
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
'''

_MATRIX = r'''"""An immutable row-major matrix with the usual arithmetic."""
from minimat._shape import require_same_shape, shape_of


class Matrix:
    """A matrix of numbers; rows are stored as tuples."""

    def __init__(self, rows):
        self.shape = shape_of(rows)
        self.rows = tuple(tuple(row) for row in rows)

    @classmethod
    def identity(cls, n):
        """The n x n identity matrix."""
        if n < 1:
            raise ValueError(f"identity size must be at least 1, got {n}")
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def zeros(cls, n_rows, n_cols):
        """An n_rows x n_cols matrix of zeros."""
        return cls([[0] * n_cols for _ in range(n_rows)])

    def __eq__(self, other):
        return isinstance(other, Matrix) and self.rows == other.rows

    def __repr__(self):
        return f"Matrix({[list(r) for r in self.rows]!r})"

    def __getitem__(self, index):
        i, j = index
        return self.rows[i][j]

    def __add__(self, other):
        require_same_shape(self, other)
        return Matrix([[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(self.rows, other.rows)])

    def __sub__(self, other):
        require_same_shape(self, other)
        return Matrix([[a - b for a, b in zip(r1, r2)] for r1, r2 in zip(self.rows, other.rows)])

    def scale(self, k):
        """Every entry multiplied by k."""
        return Matrix([[k * x for x in row] for row in self.rows])

    def transpose(self):
        """Rows become columns."""
        n_rows, n_cols = self.shape
        return Matrix([[self.rows[i][j] for i in range(n_rows)] for j in range(n_cols)])

    def __matmul__(self, other):
        n, m = self.shape
        m2, p = other.shape
        if m != m2:
            raise ValueError(f"cannot multiply {self.shape} by {other.shape}")
        return Matrix(
            [[sum(self.rows[i][k] * other.rows[k][j] for k in range(m)) for j in range(p)] for i in range(n)]
        )

    def trace(self):
        """Sum of the diagonal of a square matrix."""
        n, m = self.shape
        if n != m:
            raise ValueError("trace needs a square matrix")
        return sum(self.rows[i][i] for i in range(n))

    def determinant(self):
        """Determinant by cofactor expansion along the first row."""
        n, m = self.shape
        if n != m:
            raise ValueError("determinant needs a square matrix")
        if n == 1:
            return self.rows[0][0]
        if n == 2:
            (a, b), (c, d) = self.rows
            return a * d - b * c
        total = 0
        for j in range(n):
            minor = Matrix([row[:j] + row[j + 1:] for row in self.rows[1:]])
            sign = -1 if j % 2 else 1
            total += sign * self.rows[0][j] * minor.determinant()
        return total
'''

_TESTS = r"""import pytest

from minimat import Matrix
from minimat._shape import shape_of

A = Matrix([[1, 2], [3, 4]])
B = Matrix([[5, 6], [7, 8]])


def test_shape():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).shape == (2, 3)
    assert shape_of([[1]]) == (1, 1)


def test_invalid_shapes_rejected():
    for rows in ([], [[]], [[1, 2], [3]]):
        with pytest.raises(ValueError):
            Matrix(rows)


def test_identity_and_zeros():
    assert Matrix.identity(3).rows == ((1, 0, 0), (0, 1, 0), (0, 0, 1))
    assert Matrix.identity(1).rows == ((1,),)
    assert Matrix.zeros(2, 3).rows == ((0, 0, 0), (0, 0, 0))
    with pytest.raises(ValueError):
        Matrix.identity(0)


def test_add_and_sub():
    assert (A + B).rows == ((6, 8), (10, 12))
    assert (B - A).rows == ((4, 4), (4, 4))


def test_add_shape_mismatch():
    with pytest.raises(ValueError):
        A + Matrix([[1, 2, 3], [4, 5, 6]])


def test_scale():
    assert A.scale(3).rows == ((3, 6), (9, 12))
    assert A.scale(0) == Matrix.zeros(2, 2)


def test_transpose():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).transpose().rows == ((1, 4), (2, 5), (3, 6))
    assert A.transpose().transpose() == A


def test_matmul_square():
    assert (A @ B).rows == ((19, 22), (43, 50))
    assert (B @ A).rows == ((23, 34), (31, 46))


def test_matmul_rectangular():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    v = Matrix([[1], [0], [2]])
    assert (m @ v).rows == ((7,), (16,))
    assert (m @ m.transpose()).rows == ((14, 32), (32, 77))


def test_matmul_identity():
    m = Matrix([[2, -1, 0], [1, 4, 2]])
    assert m @ Matrix.identity(3) == m
    assert Matrix.identity(2) @ m == m


def test_matmul_mismatch():
    with pytest.raises(ValueError):
        A @ Matrix([[1, 2, 3]])


def test_trace():
    assert A.trace() == 5
    assert Matrix.identity(4).trace() == 4
    with pytest.raises(ValueError):
        Matrix([[1, 2]]).trace()


def test_determinant_small():
    assert Matrix([[5]]).determinant() == 5
    assert A.determinant() == -2
    assert Matrix([[2, 0], [0, 3]]).determinant() == 6


def test_determinant_3x3():
    assert Matrix([[6, 1, 1], [4, -2, 5], [2, 8, 7]]).determinant() == -306
    assert Matrix.identity(3).scale(2).determinant() == 8


def test_determinant_4x4():
    assert Matrix([[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]]).determinant() == 30
    assert Matrix([[2, -1, 0, 3], [1, 4, 2, 0], [0, 3, -2, 1], [5, 0, 1, 2]]).determinant() == 142


def test_determinant_non_square():
    with pytest.raises(ValueError):
        Matrix([[1, 2, 3], [4, 5, 6]]).determinant()


def test_getitem_eq_repr():
    assert A[1, 0] == 3
    assert A == Matrix([[1, 2], [3, 4]])
    assert A != B
    assert repr(A) == "Matrix([[1, 2], [3, 4]])"
"""

BASE = BaseSource(
    name="minimat",
    module="matrix",
    summary="a tiny immutable matrix class: arithmetic, transpose, products, trace and determinant",
    files={"minimat/__init__.py": _INIT, "minimat/_shape.py": _SHAPE, "minimat/matrix.py": _MATRIX},
    tests=_TESTS,
)
