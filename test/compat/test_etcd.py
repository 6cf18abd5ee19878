"""etcd, Debian's etcd-server (a Go program linked with cgo, supervised by
`loopfast run` for its Go build-info section), a single-member cluster in
the test's directory, with two clients that hold a watch: etcdctl (Go,
supervised) over gRPC and curl (the preload) over etcd's JSON gateway;
etcdctl puts a value and a 64 KiB one, and both watchers print them.
The same without loopfast and under it, each watcher's connection on the
fast path at both ends (the programs' own descriptors, not their
supervisors'), and etcd and the watchers stopped with SIGTERM end alike."""
import base64
import json
import os
import signal
import subprocess

import pytest

from conftest import await_pairs, finish, free_port, lf, need, programs, wait_line, wait_log

import kernel


def watch_events(curl_out):
    """The values (bytes) of the events in the gateway's watch stream."""
    out = []
    for line in curl_out.splitlines():
        for ev in json.loads(line)["result"].get("events", []):
            out.append(base64.b64decode(ev["kv"]["value"]))
    return out


@pytest.mark.timeout(180)
def test_etcd_watchers_over_grpc_and_the_gateway(procs, tmp):
    need("etcd", "etcdctl", "curl")
    big = base64.b64encode(os.urandom(48 << 10))  # 64 KiB of text: etcdctl prints a value as it is
    (tmp / "big").write_bytes(big)
    rounds = []
    for under in (False, True):
        tag = "lf" if under else "plain"
        run = lf if under else (lambda *argv: list(map(str, argv)))

        def etcd(port):
            peer = f"http://127.0.0.1:{free_port()}"
            return run("etcd", "--name", "n1", "--data-dir", tmp / f"data-{tag}",
                       "--listen-client-urls", f"http://127.0.0.1:{port}",
                       "--advertise-client-urls", f"http://127.0.0.1:{port}",
                       "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                       "--initial-cluster", f"n1={peer}")

        srv, port = procs.serve(f"etcd-{tag}", etcd, env={"LOOPFAST_DEBUG": "1"})
        wait_log(srv, b"ready to serve client requests")
        url = f"http://127.0.0.1:{port}"
        ctl = [*run("etcdctl", "--endpoints", url)]
        said = [finish(procs.start(f"put-{tag}", ctl + ["put", "k", "v1"], stdout=subprocess.PIPE))]
        w1 = procs.start(f"watch-etcdctl-{tag}", ctl + ["watch", "--rev=1", "k"], stdout=subprocess.PIPE)
        w2 = procs.start(f"watch-curl-{tag}", run("curl", "-sSN", f"{url}/v3/watch", "-d",
                                                  '{"create_request": {"key": "aw==", "start_revision": 1}}'),
                         stdout=subprocess.PIPE)
        got1 = wait_line(w1, b"v1\n")
        got2 = wait_line(w2, b'"value":"djE="}}]}}\n')  # "v1"
        if under:
            for w in (w1, w2):
                assert await_pairs("unix_pairs", w, srv, port), (w.name, kernel.unix_sockets())
                assert not kernel.tcp_pairs(programs(w), programs(srv), port), w.name
        with open(tmp / "big", "rb") as f:
            said.append(finish(procs.start(f"put-big-{tag}", ctl + ["put", "k"], stdin=f, stdout=subprocess.PIPE)))
        got1 += wait_line(w1, big + b"\n")
        got2 += wait_line(w2, b"}}]}}\n")  # the next event's line
        said.append(finish(procs.start(f"get-{tag}", ctl + ["get", "k", "--print-value-only"], stdout=subprocess.PIPE)))
        endings = []
        for p in (w1, w2, srv):  # the watchers first: a client that lost its server may end by itself
            procs.stop(p)
            endings.append(p.returncode)
        if under:
            log = srv.log.read_text(errors="replace")
            assert "/usr/bin/etcd is a Go binary: supervised" in log, log[-2000:]
        rounds.append((said, got1.split(b"\n"), watch_events(got2.decode()), endings))
    assert rounds[0] == ([b"OK\n", b"OK\n", big + b"\n"], [b"PUT", b"k", b"v1", b"PUT", b"k", big, b""],
                         [b"v1", big], [-signal.SIGTERM] * 3), rounds[0]
    assert rounds[1] == rounds[0]
