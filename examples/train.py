"""A dispatcher and two workers in this process, a registered pipeline, and a PyTorch training
loop that reads it: every element of each epoch exactly once, preprocessed by the workers."""
import sluice
import sluice.torch
import torch

with sluice.DispatchServer() as dispatcher:
    workers = [sluice.WorkerServer(dispatcher) for _ in range(2)]
    dataset_id = sluice.register_dataset(
        dispatcher, "range(4096) | map(mul, 2) | shuffle(512, 7) | batch(64)")

    data = sluice.torch.IterableDataset(dispatcher, dataset_id=dataset_id,
                                        processing_mode="distributed_epoch")
    loader = sluice.torch.DataLoader(data, num_workers=2)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        seen = 0
        for batch in loader:                      # a torch.int64 tensor of 64 values
            x = batch.float().unsqueeze(1) / 8192
            loss = ((model(x) - x) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(batch)
        print(f"epoch {epoch}: {seen} elements, loss {loss.item():.4f}")
    for w in workers:
        w.stop()
