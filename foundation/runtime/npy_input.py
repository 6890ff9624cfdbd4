"""A user's .npy file, read header first: its shape and dtype are checked against the file's size
before any array is allocated, so a header that claims 10^12 elements is refused, not a MemoryError."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from tokenize import TokenError

import numpy as np
from numpy.lib import format as npy_format

from foundation.errors import BadInput, path_error

FIX = "pass a .npy file written by numpy.save"


@dataclass(frozen=True)
class NpyFile:
    """The header of a .npy file whose data is exactly as long as the header says."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    what: str  # how errors name the file, e.g. "--input x.npy"

    def read(self) -> np.ndarray:
        try:
            return np.load(self.path, allow_pickle=False)
        except OSError as err:
            raise path_error(err, self.path, doing=f"read {self.what}") from None
        except ValueError as err:  # changed since its header was read
            raise BadInput(f"cannot read {self.what}: {_first_line(err)}", FIX) from None


def open_npy(path: Path, what: str) -> NpyFile:
    """The file's header, once it is a .npy file of plain numbers whose size matches it; else BadInput."""
    try:
        with path.open("rb") as file:
            if file.read(len(npy_format.MAGIC_PREFIX)) != npy_format.MAGIC_PREFIX:
                raise BadInput(f"{what} is not a .npy file (it does not start as numpy.save writes one)", FIX)
            file.seek(0)
            version = npy_format.read_magic(file)
            if version == (1, 0):
                shape, _fortran_order, dtype = npy_format.read_array_header_1_0(file)
            elif version == (2, 0):
                shape, _fortran_order, dtype = npy_format.read_array_header_2_0(file)
            else:  # 3.0 is 2.0 with a UTF-8 header, written only for field names that need it
                raise BadInput(f"{what} is a .npy file of format {version[0]}.{version[1]}, which holds "
                               "named fields, not an array of numbers", FIX)
            data_offset = file.tell()
            file_size = path.stat().st_size
    except OSError as err:
        raise path_error(err, path, doing=f"read {what}") from None
    except (ValueError, SyntaxError, TokenError) as err:  # a damaged header: numpy's parser says how
        raise BadInput(f"cannot read {what}: its header is damaged ({_first_line(err)})", FIX) from None
    if dtype.hasobject or dtype.kind not in "biufc":
        raise BadInput(f"{what} holds {dtype} elements, not numbers (an object array would be unpickled, "
                       "which --input never does)", FIX)
    claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    held = file_size - data_offset
    if claimed != held:
        raise BadInput(f"{what} is damaged: its header says {dtype}{list(shape)}, {claimed:,} bytes, "
                       f"but the file holds {held:,} bytes of data", FIX)
    return NpyFile(path, tuple(shape), dtype, what)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
