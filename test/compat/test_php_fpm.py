"""nginx + php-fpm: curl posts a body to nginx, which passes it over
FastCGI to a php-fpm worker (a static pool of two www-data workers)."""
import hashlib
import os
import subprocess

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


@pytest.mark.timeout(120)
def test_nginx_passes_to_php_fpm(procs, tmp):
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
    data = os.urandom(1 << 20)
    (tmp / "body.bin").write_bytes(data)
    cli = procs.start("curl", lf("curl", "-sS", "--fail", "--data-binary", f"@{tmp}/body.bin",
                                 f"http://127.0.0.1:{port}/sum.php"), stdout=subprocess.PIPE)
    await_fast(srv, cli, peer=f"127.0.0.1:{port}")
    await_fast(fpm, srv, peer=f"127.0.0.1:{fpm_port}")
    (tmp / "release").touch()
    assert finish(cli).decode() == f"{hashlib.sha256(data).hexdigest()} from php 8\n"
