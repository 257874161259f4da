"""Record and image functions from Python: JPEGs made by PIL decode to the numpy arrays PIL
decodes (within 1), crops and normalize give the arrays computed here with numpy, and Examples
encoded by hand here parse into their features."""

import io
import struct

import numpy as np
import pytest
from PIL import Image

import sluice


def literal(data):
    """data as a string literal of the pipeline language."""
    return '"' + "".join(f"\\x{b:02x}" for b in data) + '"'


def jpeg(w, h, mode="RGB", seed=0):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BILINEAR).convert(mode)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def pil_rgb(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
def test_decode_jpeg_matches_pil(mode):
    data = jpeg(37, 21, mode)
    (img, cls), = list(sluice.run(f'list(({literal(data)}, "cat")) | map(decode_jpeg)'))
    want = pil_rgb(data)
    assert img.dtype == np.uint8 and img.shape == (21, 37, 3)
    assert np.abs(img.astype(int) - want.astype(int)).max() <= 1
    assert cls == b"cat"


def test_crops_and_normalize():
    data = jpeg(40, 30, seed=3)
    want = pil_rgb(data)
    c, = list(sluice.run(f"list({literal(data)}) | map(decode_jpeg) | map(center_crop, 10, 12)"))
    assert c.shape == (10, 12, 3)
    assert np.abs(c.astype(int) - want[10:20, 14:26].astype(int)).max() <= 1
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    (n,) = list(sluice.run(f"list({literal(data)}) | map(decode_jpeg) | "
                           f"map(normalize, {mean}, {std})"))
    img, = list(sluice.run(f"list({literal(data)}) | map(decode_jpeg)"))
    assert n.dtype == np.float32 and n.shape == (30, 40, 3)
    np.testing.assert_allclose(n, (img / 255.0 - mean) / std, rtol=1e-6, atol=1e-6)
    # random_crop with a seed: the same windows in every run, inside the image.
    pipe = f"list({literal(data)}, {literal(data)}) | map(decode_jpeg) | map(random_crop, 8, 8, 5)"
    a, b = list(sluice.run(pipe)), list(sluice.run(pipe))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for crop in a:
        assert crop.shape == (8, 8, 3)
        assert any(np.array_equal(crop, img[t:t + 8, l:l + 8])
                   for t in range(23) for l in range(33))


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def test_parse_example():
    feats = (ld(1, ld(1, b"label") + ld(2, ld(3, varint(1 << 3) + varint(7)))) +
             ld(1, ld(1, b"box") + ld(2, ld(2, ld(1, struct.pack("<4f", 1, 2, 3, 4))))) +
             ld(1, ld(1, b"ids") + ld(2, ld(3, ld(1, varint(3) + varint(300) + varint(-2))))))
    rec = ld(1, feats)
    got = list(sluice.run(f'list({literal(rec)}) | map(parse_example, "label:int64", '
                          f'"box:float32[2, 2]", "ids:int64[-1]", "name:bytes=none")'))
    (label, box, ids, name), = got
    assert label.dtype == np.int64 and int(label) == 7
    assert box.dtype == np.float32 and box.tolist() == [[1, 2], [3, 4]]
    assert ids.tolist() == [3, 300, -2]
    assert name == b"none"
    with pytest.raises(sluice.Error, match=r"map\(parse_example\): feature 'nope': missing"):
        list(sluice.run(f'list({literal(rec)}) | map(parse_example, "nope:int64")'))
