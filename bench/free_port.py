"""bench/free_port.py [N]: print N (1) distinct ports, one per line, that
nothing on 127.0.0.1 listens on, below 32768.  The kernel's ephemeral range
(32768-60999 here) is where outgoing connections take their local ports: a
server there collides with them under load, and an unused port the kernel
hands out for bind(0) is in that range."""
import random
import socket
import sys

LOW, HIGH = 10200, 32767


def free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    chosen = []
    for _ in range(10000):
        if len(chosen) == n:
            break
        port = random.randint(LOW, HIGH)
        if port not in chosen and free(port):
            chosen.append(port)
    if len(chosen) < n:
        sys.exit("free_port.py: no free port below 32768")
    print("\n".join(map(str, chosen)))


if __name__ == "__main__":
    main()
