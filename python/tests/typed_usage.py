"""The sluice API as a typed program uses it: test_packaging.py checks that `mypy --strict`
accepts this file (and refuses a wrong call). It also runs: python3 typed_usage.py."""

from typing import Dict, List

import numpy as np

import sluice
import sluice.torch


def square_all(n: int) -> List[int]:
    """Runs a built pipeline in this process and returns its elements as ints."""
    p: sluice.Pipeline = sluice.Pipeline.range(n).map("square").filter("even")
    text: str = str(p)
    assert text == f"range({n}) | map(square) | filter(even)"
    return [int(x) for x in sluice.run(p)]


def serve_and_read() -> Dict[str, bytes]:
    """A dispatcher and a worker in this process, a registered pipeline read twice."""
    with sluice.DispatchServer() as dispatcher:
        target: str = dispatcher.target
        worker = sluice.WorkerServer(dispatcher, threads=2)
        try:
            pipeline = (sluice.Pipeline.range(100)
                        .map("mul", 2)
                        .shuffle(16, seed=7)
                        .batch(10, drop_remainder=True)
                        .prefetch(2))
            dataset_id: str = pipeline.register(dispatcher)
            again: str = sluice.register_dataset(target, str(pipeline))
            assert again == dataset_id
            total = 0
            ds: sluice.Dataset = sluice.from_dataset_id("distributed_epoch", dispatcher,
                                                        dataset_id, job_name="typed")
            with iter(ds) as it:
                for batch in it:
                    total += int(np.sum(batch))
                state: Dict[str, bytes] = it.state_dict()
                counts: Dict[str, int] = it.progress()
            assert total == 2 * sum(range(100)) and counts["elements"] == 10
            for x in sluice.progress(pipeline.distribute("parallel_epochs", dispatcher),
                                     report=lambda figures: None):
                total -= int(np.sum(x))
            assert total == 0
            status = sluice.status(dispatcher, timeout=5.0)
            assert isinstance(status, dict)
            merged = sluice.merge_positions([state])
            return merged
        finally:
            worker.stop()


def refused() -> str:
    """A bad argument raises at the builder call."""
    try:
        sluice.Pipeline.range(10).batch(0)
    except ValueError as e:
        return str(e)
    try:
        list(sluice.run("range(3) | nosuchop()"))
    except sluice.InvalidArgumentError as e:
        return str(e)
    return ""


def reweigh(service: sluice.DispatchServer) -> int:
    """Changes the weights of a running mix job; the position they apply from."""
    return sluice.set_weights(service, "mixed", [0.5, 0.3, 0.2], at=None, timeout=5.0)


def torch_reader(service: sluice.DispatchServer) -> sluice.torch.DataLoader:
    """The PyTorch adapter over a pipeline."""
    data = sluice.torch.IterableDataset(service, pipeline=sluice.Pipeline.range(8).batch(4),
                                        processing_mode="distributed_epoch")
    return sluice.torch.DataLoader(data, num_workers=0)


if __name__ == "__main__":
    print(square_all(6))
    print(sorted(serve_and_read()))
    print(refused())
