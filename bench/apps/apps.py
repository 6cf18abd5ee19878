"""loopfast bench app mariadb|postgres|redis|nginx|all: real servers and their
standard benchmark clients, unmodified, over plain loopback TCP, over the
loopfast fast path (optionally also with its spin tier), and over the
server's own Unix socket, interleaved.

Called by `loopfast bench app` (which sets LOOPFAST_BIN); see
man/loopfast-bench-app.1 and docs/apps.md.
"""
import argparse
import importlib
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import apps_fastpath  # noqa: E402
from apps_fastpath import DEFAULT_PATHS, LOOPFAST_PATHS, PATHS, Sampler, check_run, samples_for, status, verdict  # noqa: E402,E501
from apps_install import ensure_matplotlib, ensure_packages  # noqa: E402
from apps_proc import Interrupted, Reaper, install_signal_handlers, log  # noqa: E402

APPS = ("mariadb", "postgres", "redis", "nginx")


def raise_fd_limit():
    """Clients with 1000 connections (and servers that inherit the limit)
    need more than the usual 1024 descriptors."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, 1 << 20), hard))
        except (ValueError, OSError):
            pass


def app_module(name):
    return importlib.import_module(f"apps_{name}")


class Parser(argparse.ArgumentParser):
    """Bad input: one line, as JSON on stdout under `--json -` (the global
    `loopfast --json`), and exit status 2."""

    def error(self, message):
        if self.json_stdout:
            print(json.dumps({"error": f"bench app: {message}"}))
            sys.exit(2)
        super().error(message)


def parse_args(argv):
    ap = Parser(prog="loopfast bench app", description=__doc__.split("\n\n")[0])
    ap.json_stdout = any(x == "-" and y == "--json" for y, x in zip(argv, argv[1:]))
    ap.add_argument("app", choices=APPS + ("all",))
    ap.add_argument("--threads", help="comma-separated client thread/connection counts (default per app)")
    ap.add_argument("--time", type=int, default=2, help="seconds per measurement (default 2)")
    ap.add_argument("--workload", help="comma-separated workloads (default: all of the app's)")
    ap.add_argument("--repeat", type=int, default=2, help="repetitions of each measurement (default 2)")
    ap.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                    help="comma-separated subset of tcp,fast,unix,spin,shm,shm-spin (default tcp,fast,unix)")
    ap.add_argument("--spin-us", type=int, default=apps_fastpath.SPIN_US,
                    help=f"busy-poll budget of the spin path in microseconds (default {apps_fastpath.SPIN_US})")
    ap.add_argument("--json", metavar="FILE", help="write every figure as JSON ('-' for stdout)")
    ap.add_argument("--plot", metavar="FILE.png", help="write a throughput-vs-threads plot")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing packages")
    a = ap.parse_args(argv)
    a.paths = list(dict.fromkeys(p for p in a.paths.split(",") if p))
    if not a.paths or any(p not in PATHS for p in a.paths):
        ap.error("--paths takes a comma-separated subset of tcp,fast,unix,spin,shm,shm-spin")
    if not 0 <= a.spin_us <= 1000000:
        ap.error("--spin-us takes microseconds from 0 to 1000000")
    if a.threads is not None:
        try:
            a.threads = [int(t) for t in a.threads.split(",") if t]
        except ValueError:
            ap.error("--threads takes comma-separated integers, e.g. 1,8,64")
        if not a.threads or min(a.threads) < 1:
            ap.error("--threads takes positive integers, e.g. 1,8,64")
    if a.time <= 0 or a.repeat < 1:
        ap.error("--time must be > 0 and --repeat >= 1")
    apps = APPS if a.app == "all" else (a.app,)
    if a.workload:
        wls = [w for w in a.workload.split(",") if w]
        for name in apps:
            bad = [w for w in wls if w not in app_module(name).WORKLOADS]
            if bad and a.app != "all":
                ap.error(f"unknown {name} workload {bad[0]} (one of {', '.join(app_module(name).WORKLOADS)})")
    return a, apps


def measure(reaper, app, path, workload, threads, seconds, can_sample, fast_error):
    argv, conns = app.client(path, workload, threads, seconds)
    first, every = samples_for(seconds)
    rec = {"path": path, "workload": workload, "threads": threads, "time": seconds}
    t0 = time.monotonic()
    with Sampler(app.port(path), first, every, enabled=can_sample) as s:
        p = reaper.spawn_client(argv)
        s.pid = p.pid
        rc, out, err = reaper.finish(p, argv, timeout=seconds * 4 + 120, check=False)
    rec["elapsed"] = round(time.monotonic() - t0, 3)
    rec["proof"] = s.record()
    if rc != 0:
        rec.update(valid=False, reason=f"client exited with status {rc}: {(err or out).strip()[-300:]}")
        return rec
    try:
        rec.update(app.parse(out))
    except RuntimeError as e:
        rec.update(valid=False, reason=str(e)[:300])
        return rec
    rec["valid"], rec["reason"] = verdict(path, rec["proof"], conns, fast_error)
    return rec


def run_app(name, a, result):
    mod = app_module(name)
    if not a.no_install:
        ensure_packages(mod.PACKAGES)
    lf_paths = [p for p in a.paths if p in LOOPFAST_PATHS]
    fast_error = check_run() if lf_paths else "not requested"
    can_sample = True
    if lf_paths:
        try:
            status()
        except (RuntimeError, ValueError, OSError) as e:
            can_sample = False
            fast_error = fast_error or f"'loopfast status' does not work, so the fast path cannot be proven: {e}"
    if fast_error and lf_paths:
        log(f"fast path not measured: {fast_error}")
    threads = a.threads or list(mod.DEFAULT_THREADS)
    workloads = [w for w in (a.workload.split(",") if a.workload else mod.WORKLOADS) if w in mod.WORKLOADS]
    res = result["apps"][name] = {"unit": mod.UNIT, "workloads": workloads, "threads": threads,
                                  "fast_error": fast_error if lf_paths else None, "runs": []}
    reaper = Reaper()
    try:
        app = mod.App(reaper, [] if fast_error else lf_paths)
        res["version"] = app.version()
        t0 = time.monotonic()
        app.setup(threads)
        res["setup_seconds"] = round(time.monotonic() - t0, 1)
        runnable = [p for p in a.paths if p not in LOOPFAST_PATHS or not fast_error]
        for wl in workloads:
            for p in runnable:
                try:
                    app.warm(p, wl)
                except RuntimeError as e:
                    log(f"warm-up of {name} {wl} over {p} failed: {str(e)[:200]}")
            for i, t in enumerate(threads):
                for rep in range(a.repeat):
                    k = (i + rep) % len(a.paths)
                    for p in a.paths[k:] + a.paths[:k]:  # rotate the order: no path is always first
                        if p not in runnable:
                            res["runs"].append({"path": p, "workload": wl, "threads": t, "rep": rep,
                                                "valid": False, "reason": fast_error})
                            continue
                        rec = measure(reaper, app, p, wl, t, a.time, can_sample, None)
                        rec["rep"] = rep
                        res["runs"].append(rec)
                        tput = f"{rec['tps']:.0f} {mod.UNIT}" if "tps" in rec else "-"
                        log(f"{name} {wl} threads={t} rep={rep} {p}: {tput}"
                            + ("" if rec["valid"] else f" INVALID: {rec['reason'][:160]}"))
    finally:
        reaper.close()


def main(argv):
    a, apps = parse_args(argv)
    install_signal_handlers()
    raise_fd_limit()
    apps_fastpath.SPIN_US = a.spin_us
    import apps_report
    result = {"meta": {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "command": "loopfast bench app " + " ".join(argv), "time": a.time, "repeat": a.repeat,
                       "paths": a.paths, "spin_us": a.spin_us if {"spin", "shm-spin"} & set(a.paths) else None},
              "apps": {}}
    status_code = 0
    t0 = time.monotonic()
    try:
        for name in apps:
            try:
                run_app(name, a, result)
            except RuntimeError as e:  # the next application may still work
                log(f"error: {name}: {e}")
                result["apps"].setdefault(name, {"runs": []})["error"] = str(e)
                status_code = 1
    except Interrupted as e:
        log(f"interrupted ({e}): stopped every server, removed every data directory")
        result["meta"]["interrupted"] = True
        status_code = 130
    except RuntimeError as e:
        log(f"error: {e}")
        result["meta"]["error"] = str(e)
        status_code = 1
    result["meta"]["seconds"] = round(time.monotonic() - t0, 1)
    apps_report.summarize(result)
    table = apps_report.tables(result)
    print(table, file=sys.stderr if a.json == "-" else sys.stdout, flush=True)
    if a.json:
        text = json.dumps(result, indent=1)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")
    if a.plot and any(r["runs"] for r in result["apps"].values()):
        ensure_matplotlib()
        apps_report.plot(result, a.plot)
        log(f"plot written to {a.plot}")
    return status_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
