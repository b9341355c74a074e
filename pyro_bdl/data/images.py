"""Images as data: IDX and NPZ files, the digits on [0, 1], and the MNIST benchmark split.

Every loader gives a :class:`~pyro_bdl.data.table.Dataset` with ``X`` of shape (n, H * W) (images flattened row by
row, float32; 8-bit pixels scaled to [0, 1] by / 255) and ``y`` the labels (float32) or None, feature names
``pixel_R_C``.

* :func:`load_images`: an IDX file (``*-idx3-ubyte``, gzipped or plain: the MNIST format; the labels are read
  from the ``*-labels-idx1-ubyte`` file beside it, if there is one) or an NPZ file (images under ``x``,
  ``images`` or ``X``, or its only array; labels under ``y`` or ``labels``).
* :func:`mnist_split`: the official MNIST test images (``shared/data/mnist-t10k``) split 8,000 / 2,000 with a
  fixed seed, for benchmarks (the 60k training images are not there: numbers are not comparable to results
  trained on them).

Example
-------
>>> import tempfile, pathlib, numpy as np
>>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.npz"
>>> np.savez(path, x=np.full((3, 4, 4), 255, dtype=np.uint8), y=np.array([0, 1, 2]))
>>> ds = load_images(path)
>>> ds.X.shape, float(ds.X.max()), ds.y.tolist(), ds.feature_names[:2]
(torch.Size([3, 16]), 1.0, [0.0, 1.0, 2.0], ['pixel_0_0', 'pixel_0_1'])
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.table import DataError, Dataset

__all__ = ["load_images", "is_image_file", "read_idx", "mnist_split", "images_dataset"]

#: IDX element types (the third byte of the magic number) -> numpy dtype (big-endian)
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def is_image_file(path) -> bool:
    """An IDX or NPZ file, by its name."""
    name = Path(path).name.lower()
    return name.endswith(".npz") or "idx" in name and ("ubyte" in name or name.endswith((".idx", ".idx.gz")))


def read_idx(path) -> np.ndarray:
    """The array in an IDX file (gzipped when its name ends in .gz); errors name the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: not readable ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise DataError(f"{path}: not an IDX file (bad magic number)")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - offset != expected:
        raise DataError(f"{path}: holds {len(raw) - offset} bytes of data; its header promises {expected} {shape}")
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(shape)


def images_dataset(images: np.ndarray, labels, name: str) -> Dataset:
    """A Dataset of (n, H, W) or (n, D) images: 8-bit ones scaled by / 255, NaN and infinities refused."""
    images = np.asarray(images)
    if images.ndim < 2 or images.shape[0] == 0:
        raise DataError(f"{name}: expected images of shape (n, H, W) or (n, D), got {images.shape}")
    flat = images.reshape(images.shape[0], -1)
    if flat.dtype == np.uint8:
        flat = flat.astype(np.float32) / 255.0
    elif not np.issubdtype(flat.dtype, np.number):
        raise DataError(f"{name}: pixels must be numbers, got {flat.dtype}")
    flat = flat.astype(np.float32)
    bad = ~np.isfinite(flat)
    if bad.any():
        raise DataError(f"{name}: {int(bad.sum())} NaN or infinite pixel value(s), first in image {int(np.argwhere(bad)[0, 0])}")
    width = images.shape[2] if images.ndim == 3 else None
    names = ([f"pixel_{i // width}_{i % width}" for i in range(flat.shape[1])] if width
             else [f"pixel_{i}" for i in range(flat.shape[1])])
    y = None
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != len(flat):
            raise DataError(f"{name}: {len(labels)} labels for {len(flat)} images")
        y = torch.tensor(labels.astype(np.float32))
    return Dataset(name, torch.from_numpy(flat), y, names, "label" if y is not None else None)


def load_images(path) -> Dataset:
    """An IDX or NPZ image file as a Dataset (see the module's description)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.name.lower().endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: not a readable NPZ file ({exc})") from None
        key = next((k for k in ("x", "images", "X") if k in arrays), None)
        if key is None and len(arrays) == 1:
            key = next(iter(arrays))
        if key is None:
            raise DataError(f"{path}: no image array (named x, images or X) among {', '.join(arrays) or 'none'}")
        labels = next((arrays[k] for k in ("y", "labels") if k in arrays), None)
        return images_dataset(arrays[key], labels, str(path))
    images = read_idx(path)
    partner = path.with_name(path.name.replace("images-idx3", "labels-idx1"))
    labels = read_idx(partner) if partner != path and partner.is_file() else None
    return images_dataset(images, labels, str(path))


def mnist_split(folder, train: int = 8000, test: int = 2000, seed: int = 0) -> tuple[Dataset, Dataset]:
    """``(train, test)`` from ``folder``'s ``t10k-images-idx3-ubyte.gz`` (and labels): a random permutation from
    ``seed``, its first ``train`` rows and the next ``test``."""
    data = load_images(Path(folder) / "t10k-images-idx3-ubyte.gz")
    if train + test > len(data):
        raise DataError(f"{folder}: {len(data)} images, fewer than train + test = {train + test}")
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(data)))
    parts = []
    for label, index in (("train", order[:train]), ("test", order[train:train + test])):
        parts.append(Dataset(f"mnist-t10k-{label}", data.X[index], data.y[index], data.feature_names, data.target_name))
    return parts[0], parts[1]
