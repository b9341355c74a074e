"""The IDX file format of MNIST (LeCun et al.): one reader, gzipped or not.

An IDX file is a big-endian header, ``0 0 TYPE NDIM``, then NDIM 32-bit sizes, then the values in C
order; MNIST's images are ``ubyte`` (n, 28, 28) and its labels ``ubyte`` (n,).

Example
-------
>>> import gzip, io, struct, numpy as np, tempfile, os
>>> raw = struct.pack(">BBBB", 0, 0, 0x08, 2) + struct.pack(">II", 2, 3) + bytes(range(6))
>>> path = os.path.join(tempfile.mkdtemp(), "tiny-idx2-ubyte.gz")
>>> with gzip.open(path, "wb") as f:
...     _ = f.write(raw)
>>> read_idx(path)
array([[0, 1, 2],
       [3, 4, 5]], dtype=uint8)
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

__all__ = ["read_idx"]

#: IDX type codes and the (big-endian) numpy types they hold.
_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"),
          0x0E: np.dtype(">f8")}


def read_idx(path: str | Path) -> np.ndarray:
    """The array an IDX file (``.gz`` or plain) holds, its shape from the header; a clear error for a file
    that is not IDX or is cut short."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _TYPES:
        raise ValueError(f"{path}: not an IDX file (its header is {raw[:4]!r})")
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    dtype = np.dtype(_TYPES[raw[2]])
    start, count = 4 + 4 * ndim, int(np.prod(shape, dtype=np.int64))
    if len(raw) != start + count * dtype.itemsize:
        raise ValueError(f"{path}: the header promises {count} values of shape {shape}; the file holds "
                         f"{(len(raw) - start) // dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype, offset=start).reshape(shape).astype(dtype.newbyteorder("="))
