"""A .npy file is read header first: a header that does not match the file's size, or that names
objects, is refused before any array is allocated."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib import format as npy_format

from foundation.errors import BadInput, NotFound
from foundation.runtime.npy_input import open_npy


def header_only(path, shape, descr="<f4", data=b"", version=(1, 0)):
    """A .npy file whose header claims ``shape`` but holds only ``data``."""
    with path.open("wb") as file:
        header = {"descr": descr, "fortran_order": False, "shape": shape}
        if version == (1, 0):
            npy_format.write_array_header_1_0(file, header)
        else:
            npy_format.write_array_header_2_0(file, header)
        file.write(data)
    return path


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_an_ordinary_file_is_read_as_saved(tmp_path, version):
    x = np.arange(12, dtype="float32").reshape(3, 4)
    path = tmp_path / "x.npy"
    with path.open("wb") as file:
        npy_format.write_array(file, x, version=version)
    opened = open_npy(path, "--input x.npy")
    assert (opened.shape, opened.dtype) == ((3, 4), np.dtype("float32"))
    np.testing.assert_array_equal(opened.read(), x)


def test_a_header_that_claims_a_trillion_elements_is_refused_before_reading(tmp_path):
    path = header_only(tmp_path / "huge.npy", (10**6, 10**6), data=b"\0" * 64)
    with pytest.raises(BadInput) as refused:
        open_npy(path, "--input huge.npy")
    assert refused.value.problem == ("--input huge.npy is damaged: its header says float32[1000000, 1000000], "
                                     "4,000,000,000,000 bytes, but the file holds 64 bytes of data")


def test_a_cut_short_or_padded_file_is_refused(tmp_path):
    x = np.ones((4, 4), dtype="float64")
    path = tmp_path / "x.npy"
    np.save(path, x)
    whole = path.read_bytes()
    path.write_bytes(whole[:-8])
    with pytest.raises(BadInput, match="holds 120 bytes of data"):
        open_npy(path, "--input x.npy")
    path.write_bytes(whole + b"tail")
    with pytest.raises(BadInput, match="holds 132 bytes of data"):
        open_npy(path, "--input x.npy")


def test_objects_and_records_are_refused_without_unpickling(tmp_path):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"run": "code"}], dtype=object), allow_pickle=True)
    with pytest.raises(BadInput) as refused:
        open_npy(path, "--input obj.npy")
    assert refused.value.problem.startswith("--input obj.npy holds object elements, not numbers")
    np.save(path, np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]))
    with pytest.raises(BadInput, match="not numbers"):
        open_npy(path, "--input obj.npy")


def test_a_damaged_header_and_a_missing_file_say_so(tmp_path):
    path = tmp_path / "x.npy"
    path.write_bytes(npy_format.MAGIC_PREFIX + b"\x01\x00\x10\x00{'descr': nonsense")
    with pytest.raises(BadInput, match="cannot read --input x.npy: "):
        open_npy(path, "--input x.npy")
    path.write_bytes(b"no array here")
    with pytest.raises(BadInput, match="is not a .npy file"):
        open_npy(path, "--input x.npy")
    with pytest.raises(NotFound):
        open_npy(tmp_path / "absent.npy", "--input absent.npy")
