"""Sets a signal's disposition through libc's sigaction (ctypes: the call
loopfast's wrapper sees), reads it back, then raises the signal and says
"alive" if it lives. Run plainly and under `loopfast run` (where every
handler is wrapped), it must end the same way: SIG_DFL kills, SIG_IGN
ignores, whatever the flags (SA_SIGINFO with SIG_DFL is what Go's runtime
and PHP's zend_signal set before they re-raise a signal).

    sigdisp.py SIG dfl|ign FLAGS      (FLAGS: a number, the sa_flags)"""
import ctypes
import signal
import sys

sig, disp, flags = signal.Signals[sys.argv[1]], sys.argv[2], int(sys.argv[3], 0)


class SigAction(ctypes.Structure):  # glibc's struct sigaction (x86_64 and aarch64)
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


libc = ctypes.CDLL(None, use_errno=True)
act = SigAction(handler={"dfl": 0, "ign": 1}[disp], flags=flags)
old = SigAction()
assert libc.sigaction(int(sig), ctypes.byref(act), None) == 0, ctypes.get_errno()
assert libc.sigaction(int(sig), None, ctypes.byref(old)) == 0, ctypes.get_errno()
print("read back", old.handler or 0, hex(old.flags & (flags | 0xffff)), flush=True)
getattr(libc, "raise")(int(sig))
print("alive", flush=True)
