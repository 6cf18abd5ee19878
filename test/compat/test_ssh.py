"""OpenSSH: sshd started by hand (-D -e, its own config and host key in a
temporary directory, key authentication with a key the test generates),
ssh running a command that checksums its stdin, over IPv4 and IPv6."""
import hashlib
import os
import subprocess

import pytest

from conftest import await_fast, finish, lf, need, url_host

SSHD_CONFIG = """ListenAddress {listen}
HostKey {tmp}/host_key
PidFile none
AuthorizedKeysFile {tmp}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_ssh_runs_a_command(procs, tmp, host):
    need("/usr/sbin/sshd", "ssh", "ssh-keygen")
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp / key], check=True, timeout=30)
    (tmp / "authorized_keys").write_bytes((tmp / "user_key.pub").read_bytes())
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory

    def argv(port):
        conf = tmp / "sshd_config"
        conf.write_text(SSHD_CONFIG.format(listen=f"{url_host(host)}:{port}", tmp=tmp))
        return lf("/usr/sbin/sshd", "-D", "-e", "-f", conf)

    srv, port = procs.serve("sshd", argv, host=host)
    host_key = (tmp / "host_key.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[{host}]:{port} {host_key[0]} {host_key[1]}\n")
    cli = procs.start("ssh", lf("ssh", "-F", "/dev/null", "-p", port, "-i", tmp / "user_key", "-o", "IdentitiesOnly=yes",
                                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                                "-o", f"UserKnownHostsFile={tmp}/known_hosts", f"root@{host}",
                                "sha256sum; echo over ssh"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # ssh holds its connection until its stdin ends.
    await_fast(srv, cli, peer=f"{url_host(host)}:{port}")
    data = os.urandom(1 << 20)
    assert finish(cli, data).decode() == f"{hashlib.sha256(data).hexdigest()}  -\nover ssh\n"
