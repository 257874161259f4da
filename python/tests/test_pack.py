"""pack() from Python: a local run against a reference packer written here; a deterministic
distributed_epoch read, which packs each split (here each file) on its own, against the reference
over each file's documents; and checkpoints taken at 100 random points of that read, each restored
into a new read that must yield exactly the rest of the same packed stream, with a worker killed
under a group of open restored reads and another started."""

import json
import random
import signal

import numpy as np
import pytest

import sluice

L = 32


def pack_ref(docs, seq_len, first_fit=False, window=16):
    """Packs token lists by the rules of docs/pipelines.md: a list of (tokens, segment_ids,
    positions) lists of seq_len each."""
    out, bins = [], []  # bins in the order they were opened: lists of pieces

    def emit(pieces):
        tok, seg, pos = [], [], []
        for s, piece in enumerate(pieces, 1):
            tok += piece
            seg += [s] * len(piece)
            pos += list(range(len(piece)))
        pad = seq_len - len(tok)
        out.append((tok + [0] * pad, seg + [0] * pad, pos + [0] * pad))

    def used(b):
        return sum(len(p) for p in b)

    for doc in docs:
        while len(doc) >= seq_len:
            emit([doc[:seq_len]])
            doc = doc[seq_len:]
        if not doc:
            continue
        fits = [b for b in bins if seq_len - used(b) >= len(doc)]
        if fits:
            b = fits[0] if first_fit else max(fits, key=used)  # max keeps the first of ties
        else:
            if len(bins) == window:
                victim = bins[0] if first_fit else max(bins, key=used)
                emit(victim)
                bins.remove(victim)
            b = []
            bins.append(b)
        b.append(doc)
        if used(b) == seq_len:
            emit(b)
            bins.remove(b)
    for b in bins:
        emit(b)
    return out


def as_lists(element):
    assert len(element) == 3
    for t in element:
        assert t.dtype == np.int32 and t.shape == (L,)
    return tuple(t.tolist() for t in element)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """12 JSON Lines files of 60 documents: skewed lengths, some longer than L."""
    d = tmp_path_factory.mktemp("pack")
    rng = random.Random(5)
    files = []
    for f in range(12):
        docs = []
        for i in range(60):
            r = rng.random()
            n = rng.randint(1, 6) if r < 0.6 else rng.randint(6, 24) if r < 0.93 else \
                rng.randint(30, 100)
            docs.append([f * 100000 + i * 1000 + j for j in range(n)])
        with open(d / f"part-{f:02d}.jsonl", "w") as out:
            for doc in docs:
                out.write(json.dumps({"tokens": doc}) + "\n")
        files.append(docs)
    return d, files


def test_local_run_matches_reference(corpus):
    d, files = corpus
    docs = [doc for f in files for doc in f]
    for args, first_fit, window in (("", False, 16), (', "first_fit"', True, 16),
                                    (', "best_fit", 3', False, 3), (", first_fit, 1", True, 1)):
        got = [as_lists(e) for e in sluice.run(f'jsonl("{d}/*.jsonl", "tokens") | pack({L}{args})')]
        assert got == pack_ref(docs, L, first_fit, window), args


def test_errors():
    with pytest.raises(sluice.InvalidArgumentError, match="column 28: expected a sequence length"):
        sluice.run("range(3) | batch(2) | pack(0)")
    with pytest.raises(sluice.Error, match=r"pack: element 0 is a rank-0 int64 tensor"):
        list(sluice.run("range(3) | pack(4)"))


def test_checkpoints_resume_the_packed_stream(corpus, cluster):
    d, files = corpus
    for _ in range(2):
        cluster.add_worker()
    pipeline = f'jsonl("{d}/*.jsonl", "tokens") | pack({L})'
    # Deterministic: splits (files) in order, each packed on its own.
    want = [s for f in files for s in pack_ref(f, L)]

    def read(state=None):
        ds = sluice.distribute(pipeline, "distributed_epoch", cluster.target, deterministic=True,
                               element_timeout=60)
        if state is not None:
            ds.load_state_dict(state)
        return ds

    rng = random.Random(11)
    points = set(rng.sample(range(1, len(want)), 100))
    it = iter(read())
    got, states = [], []
    for e in it:
        got.append(as_lists(e))
        if len(got) in points:
            states.append((len(got), it.state_dict()))
    it.close()
    assert got == want
    assert len(states) == 100
    # Restored in groups of 20 reads open at once, so their jobs start together.
    for g in range(0, 100, 20):
        group = [(at, iter(read(state))) for at, state in states[g:g + 20]]
        for k, (at, restored) in enumerate(group):
            if g == 60 and k == 1:  # a worker the open reads have tasks on dies
                cluster.workers[0].stop(signal.SIGKILL)
                cluster.add_worker()
            rest = [as_lists(e) for e in restored]
            assert rest == want[at:], f"restored at sequence {at} of {len(want)}"
            restored.close()


def test_torch_loader_yields_packed_triples(corpus, cluster):
    torch = pytest.importorskip("torch")
    import sluice.torch as st
    d, files = corpus
    cluster.add_worker()
    ds = st.IterableDataset(cluster.target, pipeline=f'jsonl("{d}/*.jsonl", "tokens") | pack({L})',
                            processing_mode="distributed_epoch", deterministic=True)
    loader = st.DataLoader(ds, num_workers=1, batch_size=None)
    got = []
    for tokens, segments, positions in loader:
        for t in (tokens, segments, positions):
            assert isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.shape == (L,)
        got.append((tokens.tolist(), segments.tolist(), positions.tolist()))
    want = [s for f in files for s in pack_ref(f, L)]
    assert got == want  # one consumer of a deterministic read: the splits in order
