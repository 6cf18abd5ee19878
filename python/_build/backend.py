"""A PEP 517 build backend that needs nothing but the standard library.

The venv of Debian 12's python3 has pip and setuptools but not `wheel`, and
setuptools 66 cannot build a wheel without it; this backend writes the
wheel itself (a zip: the package, METADATA, WHEEL, RECORD), so that
`pip install --no-build-isolation ./python` works offline. It builds only
this pure-Python package."""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME, VERSION = "loopfast", "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = "Opt a socket in to loopfast's TCP loopback fast path (pure Python, a socket option)"


def _metadata():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
            f"Requires-Python: >=3.9\nDescription-Content-Type: text/markdown\n\n{readme}")


def _package_files():
    pkg = os.path.join(HERE, NAME)
    return sorted(f"{NAME}/{n}" for n in os.listdir(pkg) if n.endswith(".py") or n == "py.typed")


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = f"{NAME}-{VERSION}.dist-info"
    files = [(p, open(os.path.join(HERE, p), "rb").read()) for p in _package_files()]
    files += [(f"{dist}/METADATA", _metadata().encode()),
              (f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: loopfast-backend\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n")]
    record = []
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for p in _package_files() + ["pyproject.toml", "README.md", "_build/backend.py"]:
            t.add(os.path.join(HERE, p), f"{base}/{p}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
