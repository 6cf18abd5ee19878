"""Installs the Debian packages a benchmark needs, only those missing.

Package scripts must not start the machine's default database instance, so a
temporary /usr/sbin/policy-rc.d that denies service starts is in place while
apt-get runs (unless one already exists), as in Debian's container images.
"""
import os
import shutil
import subprocess
import sys

from apps_proc import log

POLICY = "/usr/sbin/policy-rc.d"


def missing(pkgs):
    out = []
    for p in pkgs:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if r.returncode != 0 or "install ok installed" not in r.stdout:
            out.append(p)
    return out


def ensure_packages(pkgs):
    """Installs what is missing of pkgs; raises RuntimeError naming what
    could not be installed."""
    if not shutil.which("dpkg-query"):
        raise RuntimeError("not a Debian system: install " + " ".join(pkgs) + " by hand")
    need = missing(pkgs)
    if not need:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"missing packages {' '.join(need)}: run as root or 'apt-get install {' '.join(need)}'")
    log(f"installing {' '.join(need)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    made_policy = False
    if not os.path.exists(POLICY):
        with open(POLICY, "w") as f:
            f.write("#!/bin/sh\n# loopfast bench app: no service starts during install\nexit 101\n")
        os.chmod(POLICY, 0o755)
        made_policy = True
    try:
        subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL, check=False)
        r = subprocess.run(["apt-get", "install", "-y", "-q", *need], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    finally:
        if made_policy:
            os.unlink(POLICY)
    if r.returncode != 0 or missing(need):
        raise RuntimeError(f"apt-get install {' '.join(need)} failed: {r.stderr.strip()[-300:]}")


def ensure_matplotlib():
    """Makes `import matplotlib` work for this python (pip where allowed,
    Debian's package for the system python)."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    log("installing matplotlib")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], capture_output=True)
    if r.returncode != 0:
        ensure_packages(["python3-matplotlib"])
    import importlib
    importlib.invalidate_caches()
    import matplotlib  # noqa: F401
