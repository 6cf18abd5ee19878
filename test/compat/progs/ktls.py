"""A TLS client and server that try kernel TLS the way OpenSSL does.

server CERT KEY: listens on 127.0.0.1 (a kernel-chosen port), and for each
connection completes a user-space TLS handshake, reads a length-prefixed
message and answers its SHA-256 in hex.

client PORT CA: connects to 127.0.0.1:PORT, completes the handshake, then
asks the kernel to take over encryption, as OpenSSL's ktls_enable() and
ktls_start() do: setsockopt(TCP_ULP, "tls"), then setsockopt(SOL_TLS,
TLS_TX, keys). Where the kernel refuses, it falls back to user-space TLS,
as OpenSSL does. Then it reads all of stdin, sends it and prints what
happened and the server's answer.

A kernel that accepted both calls would encrypt what the program writes to
the socket, so the program writes plaintext. Python's ssl module cannot
export the session keys, so zeros stand in for them; a real program would
pass its keys, and on a Unix socket they would be ignored just the same.
"""
import errno
import socket
import ssl
import struct
import sys

TCP_ULP, SOL_TLS, TLS_TX = 31, 282, 1
TLS_1_3_VERSION, TLS_CIPHER_AES_GCM_128 = 0x0304, 51


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 16))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def server(cert, key):
    import hashlib
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    lst = socket.create_server(("127.0.0.1", 0))
    while True:
        conn, _ = lst.accept()
        with ctx.wrap_socket(conn, server_side=True) as s:
            n = struct.unpack("!Q", recv_exact(s, 8))[0]
            s.sendall(hashlib.sha256(recv_exact(s, n)).hexdigest().encode() + b"\n")


def try_ktls(sock):
    """What OpenSSL does after the handshake; returns a line for the
    transcript and whether the kernel now encrypts."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
    except OSError as e:
        return f"TCP_ULP tls: {errno.errorcode[e.errno]}", False
    info = struct.pack("=HH8s16s4s8s", TLS_1_3_VERSION, TLS_CIPHER_AES_GCM_128, bytes(8), bytes(16), bytes(4), bytes(8))
    try:
        sock.setsockopt(SOL_TLS, TLS_TX, info)
    except OSError as e:
        return f"TCP_ULP tls: ok, TLS_TX: {errno.errorcode[e.errno]}", False
    return "TCP_ULP tls: ok, TLS_TX: ok", True


def client(port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(port))), server_hostname="localhost")
    line, kernel = try_ktls(s)
    print(line, flush=True)
    data = sys.stdin.buffer.read()
    msg = struct.pack("!Q", len(data)) + data
    if kernel:
        socket.socket.sendall(s, msg)  # straight to the socket: the kernel was said to encrypt it
    else:
        print("fallback: user-space TLS", flush=True)
        s.sendall(msg)
    print("answer:", s.makefile("rb").readline().decode().strip(), flush=True)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](*sys.argv[2:])
