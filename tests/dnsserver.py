"""A tiny authoritative DNS server for discovery tests: answers A queries from a
dict that the test edits, on a loopback address, in a thread the test stops."""

import socket
import struct
import threading


class DnsServer:
    def __init__(self, host: str, port: int = 5353, ttl: int = 1):
        self.records: dict[str, list[str]] = {}
        self.ttl = ttl
        self.addr = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(self.addr)
        self.sock.settimeout(0.2)
        self.queries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> "DnsServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _serve(self):
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self._answer(data)
            if reply:
                self.sock.sendto(reply, peer)

    def _answer(self, q: bytes) -> bytes | None:
        if len(q) < 12:
            return None
        qid, flags, qd = struct.unpack("!HHH", q[:6])
        i, labels = 12, []
        while i < len(q) and q[i] != 0:
            n = q[i]
            labels.append(q[i + 1:i + 1 + n].decode(errors="replace"))
            i += 1 + n
        qtype, _qclass = struct.unpack("!HH", q[i + 1:i + 5])
        question = q[12:i + 5]
        name = ".".join(labels).lower()
        self.queries += 1
        ips = self.records.get(name, []) if qtype == 1 else []
        rcode = 0 if name in self.records else 3  # NXDOMAIN for unknown names
        header = struct.pack("!HHHHHH", qid, 0x8400 | (flags & 0x0100) | rcode, 1, len(ips), 0, 0)
        answers = b"".join(struct.pack("!HHHLH", 0xC00C, 1, 1, self.ttl, 4) + socket.inet_aton(ip) for ip in ips)
        return header + question + answers


NAME = "backends.huntlb.test"  # the name the discovery tests' fronts resolve


def naming(addrs, hosts: list[str]) -> DnsServer:
    """A DnsServer on a loopback address of its own, answering NAME with
    `hosts` (edit .records[NAME] to change them); stopped on leaving `with`."""
    dns = DnsServer(addrs.host(), 5353)
    dns.records[NAME] = list(hosts)
    return dns
