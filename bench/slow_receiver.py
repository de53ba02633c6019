#!/usr/bin/python3
"""bench/slow_receiver.py: a webhook receiver that answers every POST with
200 after a fixed delay, for bench/slots.sh.

  slow_receiver.py PORT DELAY_MS [PROCESSES]

asyncio, HTTP/1.1 keep-alive, one event loop per process, the processes
sharing the port (SO_REUSEPORT).  It prints nothing; every second it writes
"<requests so far> <open connections>" to /tmp/slow_receiver.PORT.<pid>.
"""
import asyncio
import os
import socket
import sys

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Conn(asyncio.Protocol):
    def __init__(self, state):
        self.state = state
        self.buf = b""

    def connection_made(self, transport):
        self.transport = transport
        self.state["open"] += 1

    def connection_lost(self, exc):
        self.state["open"] -= 1

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            self.state["requests"] += 1
            asyncio.get_running_loop().call_later(self.state["delay"], self.answer)

    def answer(self):
        if not self.transport.is_closing():
            self.transport.write(ANSWER)


async def serve(port, delay):
    state = {"requests": 0, "open": 0, "delay": delay}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(4096)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(state), sock=sock)
    path = "/tmp/slow_receiver.%d.%d" % (port, os.getpid())
    async with server:
        while True:
            await asyncio.sleep(1)
            with open(path, "w") as f:
                f.write("%d %d\n" % (state["requests"], state["open"]))


def main():
    port, delay = int(sys.argv[1]), int(sys.argv[2]) / 1000.0
    procs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for _ in range(procs - 1):
        if os.fork() == 0:
            break
    asyncio.run(serve(port, delay))


if __name__ == "__main__":
    sys.exit(main())
