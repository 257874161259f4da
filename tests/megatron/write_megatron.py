#!/usr/bin/python3
"""Writes a Megatron-LM indexed dataset (PREFIX.idx, PREFIX.bin) of random documents, following
the published layout of Megatron-LM's megatron/core/datasets/indexed_dataset.py (its
IndexedDatasetBuilder and _IndexWriter), without any of sluice's code, and the documents as
sluice's text output prints them (PREFIX.txt: one line per document, "[t0, t1, ...]").

    write_megatron.py PREFIX DTYPE DOCUMENTS SEED

DTYPE is one of the layout's token types (uint8, int8, int16, int32, int64, uint16). Documents
are made of 0 to 3 sequences of 0 to 40 tokens each, so some documents are empty (no sequence,
or only empty ones) and some span several sequences; the first three documents are always one
empty document with no sequence, one of a single sequence and one of three sequences.
"""
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7,
         "uint16": 8}


def documents(rng, dtype, count):
    info = np.iinfo(dtype)
    hi = min(int(info.max), 2**31 - 1)
    lo = max(int(info.min), -2**31)
    docs = []
    for k in range(count):
        if k == 0:
            lengths = []
        elif k == 1:
            lengths = [7]
        elif k == 2:
            lengths = [3, 0, 5]
        else:
            lengths = [int(n) for n in rng.integers(0, 41, size=int(rng.integers(0, 4)))]
        seqs = [rng.integers(lo, hi, size=n, endpoint=True).astype(dtype) for n in lengths]
        docs.append(seqs)
    return docs


def write(prefix, dtype_name, docs):
    dtype = np.dtype(dtype_name)
    sequence_lengths = []
    document_indices = [0]
    with open(prefix + ".bin", "wb") as f:
        for seqs in docs:
            for s in seqs:
                f.write(np.asarray(s, dtype=dtype).tobytes(order="C"))
                sequence_lengths.append(len(s))
            document_indices.append(len(sequence_lengths))
    pointers = []
    at = 0
    for n in sequence_lengths:
        pointers.append(at)
        at += n * dtype.itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[dtype_name]))
        f.write(struct.pack("<Q", len(sequence_lengths)))
        f.write(struct.pack("<Q", len(document_indices)))
        f.write(np.array(sequence_lengths, dtype="<i4").tobytes())
        f.write(np.array(pointers, dtype="<i8").tobytes())
        f.write(np.array(document_indices, dtype="<i8").tobytes())


def text(docs):
    lines = []
    for seqs in docs:
        tokens = [int(t) for s in seqs for t in s]
        lines.append("[" + ", ".join(str(t) for t in tokens) + "]\n")
    return "".join(lines)


def main():
    if len(sys.argv) != 5 or sys.argv[2] not in CODES:
        sys.stderr.write(__doc__)
        return 2
    prefix, dtype_name, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(seed)
    docs = documents(rng, dtype_name, count)
    write(prefix, dtype_name, docs)
    with open(prefix + ".txt", "w") as f:
        f.write(text(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
