"""Tensors from a DataLoader's worker processes to the training process without a copy.

An element a loader worker reads from a sluice worker on its host lies in the shared-memory
region of its connection (docs/reading.md "Local workers"). Torch would pickle each tensor by
moving its bytes into a new shared segment of its own; instead the loader worker sends where the
values lie (the region, an offset, dtype and shape) and, the first time, the region's descriptor,
and the training process maps the region once and builds its tensors over it.

The values must stay put until the training process is done with them: the loader worker keeps
the element (so its block of the region is not reused) until the tensors made from it in the
training process are gone. It learns that from a board, a small shared memory file of its own:
one byte per element in flight (a slot), which the training process sets to HELD when it builds
the element's tensors and to FREED when the last of them is freed, and which the loader worker
clears when it lets the element go. A loader worker with no free slot waits for one, as it waits
when its region is full: a consumer that keeps every tensor makes the readers wait, and memory
stays bounded.

When a loader's iteration ends in the training process (its end, an error, a loop left early),
the training process forgets its boards and mappings (the tensors out keep their own) and writes
the iteration's generation in each board's header: elements of it still on the way are then
refused as stale (torch drops them when it resets persistent workers), and the loader worker lets
go of every element of that generation the training process never built.

Both sides keep the same small table of the regions whose descriptors went over (the training
process sees the elements in the order they were sent), so a descriptor goes once per region,
not once per element; every iteration of a loader worker starts the tables afresh.
"""

import collections
import mmap
import os
import threading
import time
import uuid
import weakref
from multiprocessing.reduction import DupFd

import numpy as np
import torch

import sluice._sluice as _core

SLOTS = 4096  # elements in flight per loader worker
REGIONS = 8  # region descriptors each side keeps per loader worker
_IN_FLIGHT, _FREED, _HELD = 0, 1, 2
_HEADER = 8  # the board's header: the last generation the training process forgot (u64)

# What an element of a forgotten iteration becomes in the training process: torch discards such
# elements when it resets persistent workers; sluice.torch.DataLoader refuses one otherwise.
STALE = object()


def _to_torch(x):
    if isinstance(x, tuple):
        return tuple(_to_torch(c) for c in x)
    if isinstance(x, np.ndarray) and x.dtype != object:
        return torch.from_numpy(x)
    return x


class Sender:
    """The loader worker's side: one per process (sender())."""

    def __init__(self, slots=None):
        self.slots = slots or SLOTS
        fd = os.memfd_create("sluice-handover", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, _HEADER + self.slots)
            self.board = mmap.mmap(fd, _HEADER + self.slots)
            self.board_fd = fd
        except BaseException:
            os.close(fd)
            raise
        self.key = uuid.uuid4().hex
        self.held = {}  # slot -> (generation, the element), kept until the training process frees it
        self.free = list(range(self.slots - 1, -1, -1))
        self.forgotten = 0  # the board's header when last looked at
        self.generation = 0
        self.sent = collections.OrderedDict()  # region ids whose descriptor went, oldest first
        self.board_sent = False
        self.parent = os.getppid()

    def begin(self):
        """A new iteration: the tables start afresh on both sides."""
        self.generation += 1
        self.sent.clear()
        self.board_sent = False

    def _let_go(self, slot):
        self.board[_HEADER + slot] = _IN_FLIGHT
        del self.held[slot]
        self.free.append(slot)

    def _reclaim(self):
        at = self.board.find(b"\x01", _HEADER)
        while at >= 0:
            self._let_go(at - _HEADER)
            at = self.board.find(b"\x01", at + 1)
        forgotten = int.from_bytes(self.board[:_HEADER], "little")
        if forgotten != self.forgotten:
            self.forgotten = forgotten
            for slot in [s for s, (gen, _) in self.held.items()
                         if gen <= forgotten and self.board[_HEADER + s] == _IN_FLIGHT]:
                self._let_go(slot)

    def _slot(self):
        self._reclaim()
        while not self.free:
            if os.getppid() != self.parent:
                raise RuntimeError("the training process is gone")
            time.sleep(0.001)
            self._reclaim()
        return self.free.pop()

    def wrap(self, x, token):
        """What to send for element x (the reader's form: arrays, bytes, tuples): a Handed that
        the training process rebuilds into tensors over the region, or x's tensors as usual when
        none of its values lie in a region."""
        parts = x if isinstance(x, tuple) else (x,)
        places = [_core.shm_place(p) if isinstance(p, np.ndarray) and p.dtype != object else None
                  for p in parts]
        if not any(places):
            return _to_torch(x)
        slot = self._slot()
        self.held[slot] = (self.generation, x)
        board = None
        if not self.board_sent:
            board = DupFd(self.board_fd)
            self.board_sent = True
        fds = {}
        out = []
        for p, place in zip(parts, places):
            if place is None:
                out.append(("value", _to_torch(p)))
                continue
            fd, offset, region_len, region = place
            if region in self.sent:
                self.sent.move_to_end(region)
            else:
                fds[region] = (DupFd(fd), region_len)
                self.sent[region] = True
                if len(self.sent) > REGIONS:
                    self.sent.popitem(last=False)
            out.append(("view", region, offset, p.dtype.str, p.shape))
        return Handed((token, self.key, self.generation, board, self.slots, slot, fds, out,
                       isinstance(x, tuple)))


_sender: "Sender | None" = None
_sender_lock = threading.Lock()


def sender():
    """This process's Sender (a forked loader worker makes its own)."""
    global _sender
    with _sender_lock:
        if _sender is None or _sender.pid != os.getpid():
            _sender = Sender()
            _sender.pid = os.getpid()
        return _sender


class Handed:
    """An element on its way: pickled by reference, rebuilt into tensors by the receiver."""

    def __init__(self, args):
        self.args = args

    def __reduce__(self):
        return (_rebuild, self.args)


class _Board:
    def __init__(self, board, generation):
        self.board = board
        self.generation = generation
        self.regions = collections.OrderedDict()  # region id -> its private mapping


# The training process's side: (loader token, loader worker key) -> _Board.
_boards: dict = {}
_boards_lock = threading.Lock()
# Loader tokens whose iteration ended and whose next has not begun (begin()).
_forgotten: set = set()


def _map(fd, length, writable):
    try:
        if writable:
            return mmap.mmap(fd, length)
        # A private mapping: the training step may write into its tensors without touching the
        # region; what it does not write stays the region's, unchanged while held.
        return mmap.mmap(fd, length, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)


def _rebuild(token, key, generation, board_fd, slots, slot, fds, parts, is_tuple):
    with _boards_lock:
        b = _boards.get((token, key))
        if board_fd is not None:
            fd = board_fd.detach()
            if token in _forgotten:
                os.close(fd)
                return STALE
            board = _map(fd, _HEADER + slots, True)
            if b is None or b.generation != generation:
                b = _Board(board, generation)
                _boards[(token, key)] = b
            else:
                b.board = board
        if b is None or b.generation != generation:
            for df, _ in fds.values():
                os.close(df.detach())
            return STALE
        for region, (df, length) in fds.items():
            b.regions[region] = _map(df.detach(), length, False)
            if len(b.regions) > REGIONS:
                b.regions.popitem(last=False)
        board = b.board
        maps = []
        for part in parts:
            if part[0] == "view":
                m = b.regions.get(part[1])
                if m is None:
                    raise RuntimeError("sluice.torch: an element names a shared region this "
                                       "process does not know")
                b.regions.move_to_end(part[1])
                maps.append(m)
        board[_HEADER + slot] = _HELD
    # Freed once the last array over the element's values is gone (each tensor holds its
    # array), whichever goes last.
    left = [sum(1 for p in parts if p[0] == "view")]
    lock = threading.Lock()

    def gone():
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            try:
                board[_HEADER + slot] = _FREED
            except ValueError:
                pass  # the board was closed: the loader worker is gone

    out = []
    k = 0
    for part in parts:
        if part[0] == "value":
            out.append(part[1])
            continue
        _, _, offset, dtype, shape = part
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        arr = np.frombuffer(maps[k], dtype=dt, count=count, offset=offset).reshape(shape)
        k += 1
        weakref.finalize(arr, gone)
        out.append(torch.from_numpy(arr))
    return tuple(out) if is_tuple else out[0]


def begin(token):
    """The loader's next iteration starts: its loader workers' elements are welcome again."""
    with _boards_lock:
        _forgotten.discard(token)


def forget(token):
    """The loader's iteration ended: its boards and region mappings go (the tensors still out
    keep their own), each board's header says which generation was forgotten, and elements of
    it still on the way are STALE."""
    with _boards_lock:
        _forgotten.add(token)
        for k in [k for k in _boards if k[0] == token]:
            b = _boards.pop(k)
            b.board[:_HEADER] = b.generation.to_bytes(_HEADER, "little")
