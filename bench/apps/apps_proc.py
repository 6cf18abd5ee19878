"""Processes, ports and directories that `loopfast bench app` starts or makes.

Everything is registered with one Reaper; Reaper.close() stops every process
by PID (then its process group), removes every directory, and is safe to call
twice. Signal handlers turn SIGINT/SIGTERM into an exception so that the
`finally:` that calls close() always runs.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the run is being abandoned."""


def log(msg):
    print(f"apps: {msg}", file=sys.stderr, flush=True)


def free_port():
    """A TCP port on 127.0.0.1 that is free now (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def read_pidfile(path):
    try:
        with open(path) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def install_signal_handlers():
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_interrupted)


class Server:
    """A server process started in its own session (so a terminal's Ctrl-C
    reaches only us, and we stop it in order)."""

    def __init__(self, name, popen, stop_signal, pidfile, logpath, port):
        self.name, self.popen, self.stop_signal = name, popen, stop_signal
        self.pidfile, self.logpath, self.port = pidfile, logpath, port

    @property
    def pid(self):
        """The server's own PID (from its pid file when `loopfast run` or
        setpriv sit between us and it), else the PID we started."""
        pid = read_pidfile(self.pidfile) if self.pidfile else None
        return pid or self.popen.pid

    def log_tail(self, n=15):
        try:
            with open(self.logpath, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def check_alive(self):
        if self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited with status {self.popen.returncode}:\n{self.log_tail()}")

    def stop(self, timeout=30):
        pids = {self.popen.pid, self.pid}
        pgid = self.popen.pid  # start_new_session: the group id is our child's pid
        for pid in pids:
            try:
                os.kill(pid, self.stop_signal)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.popen.poll()
            if not any(pid_alive(p) for p in pids):
                break
            time.sleep(0.05)
        else:
            log(f"{self.name} did not stop in {timeout}s, killing it")
        try:
            os.killpg(pgid, signal.SIGKILL)  # stragglers: backends, helpers
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline + 5:
            time.sleep(0.05)


class Reaper:
    def __init__(self):
        self.servers, self.clients, self.dirs = [], [], []

    def tempdir(self, prefix="loopfast-app-"):
        d = tempfile.mkdtemp(prefix=prefix)
        os.chmod(d, 0o755)  # servers that drop root (postgres) must reach it
        self.dirs.append(d)
        return d

    def start_server(self, name, argv, *, logpath, stop_signal=signal.SIGTERM, pidfile=None, port=None, env=None):
        logf = open(logpath, "ab")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env)
        finally:
            logf.close()
        s = Server(name, p, stop_signal, pidfile, logpath, port)
        self.servers.append(s)
        return s

    def wait_ready(self, srv, ping, *, timeout, interval=0.2, expect=None):
        """Runs the ping command until it succeeds (and prints `expect`, if
        given), the server exits, or `timeout` seconds pass. True when ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if srv.popen.poll() is not None:
                return False
            rc, out, _ = self.run(ping, timeout=30, check=False)
            if rc == 0 and (expect is None or expect in out):
                return True
            time.sleep(interval)
        return False

    def stop_server(self, s):
        s.stop()
        if s in self.servers:
            self.servers.remove(s)

    def run(self, argv, *, timeout, env=None, check=True, cwd=None):
        """Runs a client to completion in its own session; returns
        (returncode, stdout, stderr). It is killed on timeout or interrupt."""
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, env=env, cwd=cwd, text=True, errors="replace")
        self.clients.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(p)
            out, err = p.communicate()
            raise RuntimeError(f"{os.path.basename(argv[0])} timed out after {timeout}s: {' '.join(argv)}\n{err[-2000:]}")
        finally:
            if p.poll() is None:
                self._kill_group(p)
                p.wait()
            self.clients.remove(p)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed with status {p.returncode}:\n{(err or out)[-2000:]}")
        return p.returncode, out, err

    def spawn_client(self, argv, *, env=None, cwd=None):
        """Starts a client in its own session and returns the Popen; finish()
        collects it."""
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, env=env, cwd=cwd, text=True, errors="replace")
        self.clients.append(p)
        return p

    def finish(self, p, argv, timeout, check=True):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(p)
            out, err = p.communicate()
            raise RuntimeError(f"{os.path.basename(argv[0])} timed out after {timeout}s\n{err[-2000:]}")
        finally:
            if p.poll() is None:
                self._kill_group(p)
                p.wait()
            if p in self.clients:
                self.clients.remove(p)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed with status {p.returncode}:\n{(err or out)[-2000:]}")
        return p.returncode, out, err

    @staticmethod
    def _kill_group(p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self):
        """Stops every client and server, removes every directory. Signals
        are ignored meanwhile so that a second Ctrl-C cannot leave debris."""
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for p in list(self.clients):
                self._kill_group(p)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self.clients.clear()
            for s in reversed(self.servers):
                s.stop()
                if s.port and port_in_use(s.port):
                    log(f"warning: port {s.port} of {s.name} is still in use")
            self.servers.clear()
            for d in self.dirs:
                shutil.rmtree(d, ignore_errors=True)
            self.dirs.clear()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
