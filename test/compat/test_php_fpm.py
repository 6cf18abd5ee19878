"""nginx + php-fpm: curl posts a body to nginx, which passes it over
FastCGI to a php-fpm worker (a static pool of two www-data workers); and a
worker signalled while it runs a script dies of that signal."""
import hashlib
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import await_fast, finish, lf, need, start_nginx

FPM_CONF = """[global]
pid = {tmp}/php-fpm.pid
error_log = {tmp}/php-fpm-error.log
daemonize = no
[www]
user = www-data
group = www-data
listen = 127.0.0.1:{port}
pm = static
pm.max_children = 2
"""

# Answers once tmp/release exists, so that the test can look at both hops first.
SCRIPT = """<?php
for ($i = 0; $i < 3000 && !file_exists('{tmp}/release'); $i++) {{ usleep(20000); clearstatcache(); }}
echo hash('sha256', file_get_contents('php://input')), " from php ", PHP_MAJOR_VERSION, "\\n";
"""


def start(procs, tmp):
    """php-fpm, and nginx passing *.php to it (its www holds sum.php);
    returns (php-fpm, nginx, nginx's port)."""
    need("curl", "php-fpm8.2")

    def fpm_argv(port):
        (tmp / "php-fpm.conf").write_text(FPM_CONF.format(tmp=tmp, port=port))
        return lf("php-fpm8.2", "--nodaemonize", "--fpm-config", tmp / "php-fpm.conf")

    fpm, fpm_port = procs.serve("php-fpm", fpm_argv)
    srv, port = start_nginx(procs, tmp, server=(
        "        client_max_body_size 16m;\n"
        "        location ~ \\.php$ {\n"
        "            include /etc/nginx/fastcgi_params;\n"
        "            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n"
        f"            fastcgi_pass 127.0.0.1:{fpm_port};\n"
        "        }"))
    (tmp / "www" / "sum.php").write_text(SCRIPT.format(tmp=tmp))
    fpm.port = fpm_port
    return fpm, srv, port


def post(procs, tmp, port, data):
    (tmp / "body.bin").write_bytes(data)
    return procs.start("curl", lf("curl", "-sS", "--fail", "--data-binary", f"@{tmp}/body.bin",
                                  f"http://127.0.0.1:{port}/sum.php"), stdout=subprocess.PIPE)


@pytest.mark.timeout(120)
def test_nginx_passes_to_php_fpm(procs, tmp):
    fpm, srv, port = start(procs, tmp)
    data = os.urandom(1 << 20)
    cli = post(procs, tmp, port, data)
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    await_fast(fpm, srv, peer=f"127.0.0.1:{fpm.port}")
    (tmp / "release").touch()
    assert finish(cli).decode() == f"{hashlib.sha256(data).hexdigest()} from php 8\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_php_fpm_worker_signalled_during_a_request(procs, tmp, sig):
    # The worker running the script is sent a signal: PHP's zend_signal
    # resets it to SIG_DFL, keeping SA_SIGINFO, and raises it again. As
    # without loopfast, the worker dies of that signal (the master logs
    # it) and nginx answers 502; under loopfast's signal wrapper it once
    # died of SIGSEGV at address 0 instead (and the kernel logged it).
    fpm, srv, port = start(procs, tmp)
    cli = post(procs, tmp, port, b"x")
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    (pair,) = await_fast(fpm, srv, peer=f"127.0.0.1:{fpm.port}")  # its server end: the worker in the script
    os.kill(pair.server_pid, sig)
    log, deadline = tmp / "php-fpm-error.log", time.monotonic() + 60
    while not re.search(rf"child {pair.server_pid} exited", log.read_text()):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    line = re.search(rf".*child {pair.server_pid} exited.*", log.read_text()).group(0)
    assert f"exited on signal {int(sig)} ({sig.name})" in line, line
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 22, (cli.returncode, out)  # curl --fail: nginx's 502
