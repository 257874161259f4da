#!/usr/bin/python3
"""A TCP relay that can add a fixed one-way delay, for machines whose kernel has no tc netem.

    delay_relay.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Every connection accepted on LISTEN is relayed to TARGET. Bytes from the client to the target
pass at once. Bytes from the target back to the client are held until DELAY_MS after they
arrived, in order, while delaying is on: that is what `tc qdisc add dev IF root netem delay
DELAY_MS` does on the target's interface. SIGUSR1 turns delaying on, SIGUSR2 off; it starts
off. Prints "delay-relay listening on HOST:PORT" once ready, and on SIGTERM one line
"delay-relay: connections C, chunks delayed D, bytes B" before it exits 0.
"""
import asyncio
import signal
import sys
import time

CHUNK = 65536
QUEUE_CHUNKS = 256  # at most 16 MiB held per direction


class Relay:
    def __init__(self, target, delay_s):
        self.target = target
        self.delay_s = delay_s
        self.on = False
        self.connections = 0
        self.delayed = 0
        self.bytes = 0

    async def pump(self, reader, writer, delay):
        # A reader task stamps each chunk as it arrives; the writer sends it once its time
        # has come, so a chunk is late by the delay and not by the chunks queued before it.
        queue = asyncio.Queue(QUEUE_CHUNKS)

        async def read_side():
            try:
                while True:
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    due = time.monotonic() + self.delay_s if delay and self.on else 0.0
                    await queue.put((due, data))
            except (ConnectionError, OSError):
                pass
            await queue.put(None)

        async def write_side():
            try:
                while True:
                    item = await queue.get()
                    if item is None:
                        if writer.can_write_eof():
                            writer.write_eof()
                        break
                    due, data = item
                    wait = due - time.monotonic()
                    if due:
                        self.delayed += 1
                    if wait > 0:
                        await asyncio.sleep(wait)
                    writer.write(data)
                    self.bytes += len(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass

        await asyncio.gather(read_side(), write_side())

    async def handle(self, c_reader, c_writer):
        self.connections += 1
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(self.pump(c_reader, t_writer, False),
                             self.pump(t_reader, c_writer, True))
        for w in (c_writer, t_writer):
            w.close()


def split_addr(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main():
    if len(sys.argv) != 4:
        print("usage: delay_relay.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS", file=sys.stderr)
        sys.exit(2)
    listen = split_addr(sys.argv[1])
    relay = Relay(split_addr(sys.argv[2]), int(sys.argv[3]) / 1000.0)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(relay, "on", True))
    loop.add_signal_handler(signal.SIGUSR2, lambda: setattr(relay, "on", False))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    server = await asyncio.start_server(relay.handle, *listen)
    print("delay-relay listening on %s:%d" % listen, flush=True)
    await stop
    server.close()
    print("delay-relay: connections %d, chunks delayed %d, bytes %d"
          % (relay.connections, relay.delayed, relay.bytes), flush=True)


asyncio.run(main())
