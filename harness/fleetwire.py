"""The forwarding tier's datagram (`hunt-fleet/3`, policy/src/forward/report.rs), as
tests play it: seal and open reports, a member played over a plain socket
(with the nonce handshake), and the tools of an attacker on the machine:
recording datagrams on loopback and sending them again from a forged source.

Only for tests and benchmarks on loopback: recording opens an AF_PACKET socket
on `lo` (root), and a forged source is a raw IPv4 socket (root), both bounded
in time and count by their callers.
"""

import hashlib
import hmac
import os
import socket
import struct
import time

from harness.testbed import FLEET_PORT

MAGIC = "hunt-fleet/3"


def key_of(key_file):
    return open(key_file).read().split("\n")[0].strip().encode()


def seal(key_file, text):
    return f"{text} {hmac.new(key_of(key_file), text.encode(), hashlib.sha256).digest()[:16].hex()}".encode()


def text(frm, to, boot, seq, busy, ready=True, sub=0, mine=1, yours=0):
    return f"{MAGIC} {frm} {to} {boot:016x} {seq} {busy} {int(ready)} {sub} {mine:016x} {yours:016x}"


def parse(datagram):
    """A report's fields (no check of its tag), or None if it is no report."""
    f = datagram.decode(errors="replace").split(" ")
    if len(f) != 10 or f[0] != MAGIC:
        return None
    return {"from": f[1], "to": f[2], "boot": int(f[3], 16), "seq": int(f[4]), "busy": int(f[5]),
            "ready": f[6] == "1", "sub": int(f[7]), "mine": int(f[8], 16), "yours": int(f[9], 16)}


def nonce():
    return int.from_bytes(os.urandom(8), "little") or 1


class Member:
    """A member of `fleet_peers` played by the test at an address whose agent
    is not running: it holds the fleet key (an insider), speaks the handshake,
    and reports the count it is told to."""

    def __init__(self, key_file, addr, port=FLEET_PORT):
        self.key_file = key_file
        self.me = f"{addr}:{port}"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, port))
        self.sock.settimeout(0.2)
        self.boot, self.seq = nonce(), 0
        self.mine = {}    # agent -> our nonce for it
        self.theirs = {}  # agent -> its nonce for us, as last heard

    def close(self):
        self.sock.close()

    def send(self, agent, busy, ready=True, sub=0):
        self.seq += 1
        mine = self.mine.setdefault(agent, nonce())
        d = seal(self.key_file, text(self.me, agent, self.boot, self.seq, busy, ready, sub, mine, self.theirs.get(agent, 0)))
        host, port = agent.rsplit(":", 1)
        self.sock.sendto(d, (host, int(port)))

    def hear(self, seconds=0.2):
        """Read what agents sent us for `seconds`: learn each one's nonce."""
        until = time.monotonic() + seconds
        got = 0
        while time.monotonic() < until:
            try:
                d, _ = self.sock.recvfrom(512)
            except (socket.timeout, BlockingIOError):
                continue
            r = parse(d[:-33]) if len(d) > 33 else None
            if r and r["yours"] == self.mine.get(r["from"]):
                self.theirs[r["from"]] = r["mine"]
                got += 1
        return got

    def report(self, agents, busy, ready=True, rounds=3):
        """Report `busy` to each agent, through the handshake (an answer, a
        new nonce): a few rounds, each read for what came back."""
        for _ in range(rounds):
            for a in agents:
                self.send(a, busy, ready)
            self.hear(0.05)


def loopback_udp_recorder():
    """A raw AF_PACKET socket on `lo` that sees every frame on it (root);
    `record` picks the UDP datagrams wanted."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    s.bind(("lo", 0))
    s.settimeout(0.05)
    return s


def record(sock, port, seconds, src=None, dst=None, limit=10_000):
    """Datagrams to UDP `port` seen on `lo` for `seconds` (at most `limit`):
    [(src ip, src port, dst ip, payload)]. Loopback frames carry a 14-byte
    Ethernet header, and each shows twice on `lo` (going out, coming in): the
    incoming copy is kept."""
    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until and len(out) < limit:
        try:
            frame, meta = sock.recvfrom(65535)
        except socket.timeout:
            continue
        if meta[2] == socket.PACKET_OUTGOING:
            continue  # each loopback frame is seen twice: once out, once in
        ip = frame[14:]
        if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        ihl = (ip[0] & 15) * 4
        sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
        s_ip, d_ip = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        if dport != port or (src and s_ip != src) or (dst and d_ip != dst):
            continue
        out.append((s_ip, sport, d_ip, bytes(ip[ihl + 8:])))
    return out


def send_forged(src_ip, src_port, dst_ip, dst_port, payload):
    """One UDP datagram whose IPv4 source is `src_ip:src_port` (root; on
    loopback only). The UDP checksum is 0: none, as IPv4 allows."""
    udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(payload), 0) + payload
    total = 20 + len(udp)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 17, 0, socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    csum = _checksum(hdr)
    hdr = hdr[:10] + struct.pack("!H", csum) + hdr[12:]
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        s.sendto(hdr + udp, (dst_ip, 0))


def _checksum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF
