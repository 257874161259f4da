"""Image loading: sluice's native decode_jpeg and random_crop against PyTorch's DataLoader.

Writes 2,000 JPEGs of 500x375 (PIL, quality 90, smooth random content like photos) with their
class labels into 8 shards in a temporary directory, then times, on the same machine in the same
run, one epoch of 224x224 random crops in uint8 batches of 64 from

  - torch.utils.data.DataLoader(num_workers=2, batch_size=64) over a map-style Dataset that
    reads each JPEG from its tar shard, decodes it with PIL and crops it with numpy;
  - sluice with two in-process workers of one producer thread each (the same two cores' worth of
    decoding), read through sluice.torch.IterableDataset in distributed_epoch:
        tar("DIR/*.tar", "jpg", "cls") | map(decode_jpeg) | map(random_crop, 224, 224) | batch(64)
    when the pipeline language has the tar() source, otherwise the same images as TFRecord
    shards of tf.train.Example records (written here, framing and all):
        tfrecord("DIR/*.tfrecord") | map(parse_example, "jpg:bytes", "cls:int64")
          | map(decode_jpeg) | map(random_crop, 224, 224) | batch(64)

Prints images/s for both (the best of --epochs epochs each, alternated) and the ratio.

    PYTHONPATH=build/python /usr/bin/python3 bench/images.py [--images N] [--epochs E]

A benchmark, not a test: it never fails on timing.
"""

import argparse
import io
import os
import struct
import tarfile
import tempfile
import time

import numpy as np
import torch
import torch.utils.data
from PIL import Image

import sluice
import sluice.torch

WIDTH, HEIGHT, CROP, BATCH, SHARDS, CLASSES = 500, 375, 224, 64, 8, 1000


# ---- Data ---------------------------------------------------------------------------------------

def make_jpeg(rng):
    """A 500x375 JPEG of smooth random color fields with edges and grain, as photos have."""
    small = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((WIDTH, HEIGHT), Image.BICUBIC)
    px = np.asarray(img, dtype=np.int16)
    px = px + rng.integers(-12, 13, size=px.shape, dtype=np.int16)
    px[::40, :, :] = 255  # a few hard edges
    buf = io.BytesIO()
    Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_tars(dirname, jpegs, labels):
    """WebDataset shards: NNNNNN.jpg and NNNNNN.cls (the label in decimal) per sample."""
    per = (len(jpegs) + SHARDS - 1) // SHARDS
    for s in range(SHARDS):
        with tarfile.open(os.path.join(dirname, f"shard-{s:02d}.tar"), "w") as tar:
            for i in range(s * per, min((s + 1) * per, len(jpegs))):
                for ext, data in (("jpg", jpegs[i]), ("cls", str(labels[i]).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))


def crc32c_table():
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[i] = c
    return table


CRC_TABLE = crc32c_table()


def crc32c_many(records):
    """CRC-32C of each record, computed for all of them at once, byte position by byte position
    (numpy lanes), since a byte-at-a-time loop in Python would take longer than the benchmark."""
    lens = np.array([len(r) for r in records])
    data = np.zeros((len(records), lens.max()), dtype=np.uint8)
    for i, r in enumerate(records):
        data[i, :len(r)] = np.frombuffer(r, dtype=np.uint8)
    crc = np.full(len(records), 0xFFFFFFFF, dtype=np.uint32)
    for j in range(data.shape[1]):
        step = CRC_TABLE[(crc ^ data[:, j]) & 0xFF] ^ (crc >> 8)
        crc = np.where(j < lens, step, crc)
    return [int(c) ^ 0xFFFFFFFF for c in crc]


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(jpg, label):
    """tf.train.Example {jpg: bytes_list [jpg], cls: int64_list [label]}, encoded by hand."""
    jpg_feature = field(1, field(1, jpg))                                  # bytes_list
    cls_feature = field(3, field(1, varint(label)))                        # int64_list, packed
    features = (field(1, field(1, b"jpg") + field(2, jpg_feature)) +
                field(1, field(1, b"cls") + field(2, cls_feature)))
    return field(1, features)


def write_tfrecords(dirname, jpegs, labels):
    """TFRecord shards: u64 length, masked CRC-32C of it, data, masked CRC-32C of the data."""
    records = [example(j, l) for j, l in zip(jpegs, labels)]
    heads = [struct.pack("<Q", len(r)) for r in records]
    crcs, head_crcs = crc32c_many(records), crc32c_many(heads)
    per = (len(records) + SHARDS - 1) // SHARDS
    for s in range(SHARDS):
        with open(os.path.join(dirname, f"shard-{s:02d}.tfrecord"), "wb") as f:
            for i in range(s * per, min((s + 1) * per, len(records))):
                f.write(heads[i] + struct.pack("<I", masked(head_crcs[i])) + records[i] +
                        struct.pack("<I", masked(crcs[i])))


# ---- The DataLoader baseline --------------------------------------------------------------------

class TarJpegs(torch.utils.data.Dataset):
    """Map-style: sample i is read from its shard by offset, decoded by PIL, randomly cropped."""

    def __init__(self, dirname):
        self.index = []  # (path, jpg offset, jpg size, label)
        for name in sorted(os.listdir(dirname)):
            if not name.endswith(".tar"):
                continue
            path = os.path.join(dirname, name)
            with tarfile.open(path) as tar:
                members = {m.name: m for m in tar.getmembers()}
                for key in sorted(n[:-4] for n in members if n.endswith(".jpg")):
                    jpg = members[key + ".jpg"]
                    label = int(tar.extractfile(members[key + ".cls"]).read())
                    self.index.append((path, jpg.offset_data, jpg.size, label))

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        path, offset, size, label = self.index[i]
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        h, w, _ = img.shape
        top = np.random.randint(0, h - CROP + 1)
        left = np.random.randint(0, w - CROP + 1)
        crop = np.ascontiguousarray(img[top:top + CROP, left:left + CROP])
        return torch.from_numpy(crop), label


# ---- Timing -------------------------------------------------------------------------------------

def consume(batches):
    """Images of one pass and the seconds it took; checks every batch's shape and dtype."""
    n = 0
    start = time.perf_counter()
    for images, labels in batches:
        assert images.dtype == torch.uint8 and tuple(images.shape[1:]) == (CROP, CROP, 3), \
            (images.dtype, images.shape)
        assert len(labels) == images.shape[0]
        n += images.shape[0]
    return n, time.perf_counter() - start


CROP_MODULE = """
import numpy as np

_rng = np.random.default_rng()


def random_crop(elem, h, w):
    img, label = elem
    top = int(_rng.integers(0, img.shape[0] - h + 1))
    left = int(_rng.integers(0, img.shape[1] - w + 1))
    return np.ascontiguousarray(img[top:top + h, left:left + w]), label
"""


def has_tar_source():
    """Whether the pipeline language knows tar(): a missing file, not an unknown source."""
    try:
        sluice.run('tar("/nonexistent-sluice-bench/*.tar", "jpg", "cls")')
    except sluice.Error as e:
        return "unknown" not in str(e)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=2, help="passes of each loader; the best counts")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="sluice-bench-images-") as tmp:
        rng = np.random.default_rng(1)
        start = time.perf_counter()
        jpegs = [make_jpeg(rng) for _ in range(args.images)]
        labels = [int(x) for x in rng.integers(0, CLASSES, size=args.images)]
        write_tars(tmp, jpegs, labels)
        use_tar = has_tar_source()
        if use_tar:
            source = f'tar("{tmp}/*.tar", "jpg", "cls")'
        else:
            write_tfrecords(tmp, jpegs, labels)
            source = f'tfrecord("{tmp}/*.tfrecord") | map(parse_example, "jpg:bytes", "cls:int64")'
        pipeline = (f"{source} | map(decode_jpeg) | map(random_crop, {CROP}, {CROP}) | "
                    f"batch({BATCH})")
        mean_kb = sum(len(j) for j in jpegs) / len(jpegs) / 1000
        print(f"{args.images} JPEGs of {WIDTH}x{HEIGHT} (mean {mean_kb:.0f} KB) in {SHARDS} "
              f"shards, written in {time.perf_counter() - start:.1f} s")
        print(f"sluice pipeline: {pipeline.replace(tmp, 'DIR')}")

        # The same crop as a Python function on the workers (numpy slicing, no copy of the image
        # before the crop's own).
        with open(os.path.join(tmp, "benchcrop.py"), "w") as f:
            f.write(CROP_MODULE)
        py_pipeline = (f'{source} | map(decode_jpeg) | map(py, "benchcrop:random_crop", {CROP}, '
                       f'{CROP}) | batch({BATCH})')

        loader = torch.utils.data.DataLoader(TarJpegs(tmp), batch_size=BATCH, shuffle=True,
                                             num_workers=2)
        with sluice.DispatchServer() as d:
            workers = [sluice.WorkerServer(d, threads=1, python_path=[tmp]) for _ in range(2)]
            ours_ds = sluice.torch.IterableDataset(d, pipeline=pipeline,
                                                   processing_mode="distributed_epoch")
            py_ds = sluice.torch.IterableDataset(d, pipeline=py_pipeline,
                                                 processing_mode="distributed_epoch")
            base, ours, pys = [], [], []
            for _ in range(args.epochs):
                base.append(consume(loader))
                ours.append(consume(ours_ds))
                pys.append(consume(py_ds))
            for w in workers:
                w.stop()

    for n, _ in base + ours + pys:
        assert n == args.images, (n, args.images)
    b = max(n / s for n, s in base)
    o = max(n / s for n, s in ours)
    print(f"DataLoader(num_workers=2), PIL:        {b:8.0f} images/s")
    print(f"sluice, 2 workers, decode_jpeg:        {o:8.0f} images/s")
    p = max(n / s for n, s in pys)
    print(f"ratio sluice / DataLoader:             {o / b:8.2f}")
    print(f"sluice, crop by map(py, ...):          {p:8.0f} images/s")
    print(f"ratio Python crop / native crop:       {p / o:8.2f}")


if __name__ == "__main__":
    main()
