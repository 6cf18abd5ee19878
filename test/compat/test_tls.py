"""TLS over the fast path: curl fetching from nginx over HTTPS, and a
program that tries kernel TLS first (progs/ktls.py, as OpenSSL does): it
must be refused as by a TCP socket whose kernel has no tls module, fall
back to user-space TLS and still work."""
import hashlib
import os
import pathlib
import subprocess

import pytest

from conftest import await_fast, finish, lf, need, start_nginx

PROGS = pathlib.Path(__file__).resolve().parent / "progs"
PYTHON = "/usr/bin/python3"  # Debian's, as a packaged program would use


def make_cert(tmp):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", tmp / "key.pem", "-out", tmp / "cert.pem", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"],
                   check=True, capture_output=True, timeout=30)
    return tmp / "cert.pem", tmp / "key.pem"


@pytest.mark.timeout(120)
def test_curl_https_from_nginx(procs, tmp):
    need("curl", "openssl")
    cert, key = make_cert(tmp)
    srv, port = start_nginx(procs, tmp, listen_opts=" ssl",
                            server=f"        ssl_certificate {cert};\n        ssl_certificate_key {key};")
    data = os.urandom(16 << 20)
    (tmp / "www" / "blob.bin").write_bytes(data)
    # curl is blocked writing the body until the test reads it.
    cli = procs.start("curl", lf("curl", "-sS", "--fail", "--cacert", cert, f"https://127.0.0.1:{port}/blob.bin"),
                      stdout=subprocess.PIPE)
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    out = finish(cli)
    assert len(out) == len(data) and hashlib.sha256(out).digest() == hashlib.sha256(data).digest()


@pytest.mark.timeout(120)
def test_kernel_tls_is_refused_and_user_space_tls_works(procs, tmp):
    need(PYTHON, "openssl")
    cert, key = make_cert(tmp)
    srv, port = procs.serve("ktls-server", lambda _: lf(PYTHON, PROGS / "ktls.py", "server", cert, key), port=0)
    cli = procs.start("ktls-client", lf(PYTHON, PROGS / "ktls.py", "client", port, cert),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # The client holds its connection until its stdin ends.
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    data = os.urandom(1 << 20)
    # ENOENT: what TCP_ULP answers where the kernel has no tls module.
    assert finish(cli, data).decode() == ("TCP_ULP tls: ENOENT\nfallback: user-space TLS\n"
                                          f"answer: {hashlib.sha256(data).hexdigest()}\n")
