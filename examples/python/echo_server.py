"""An echo server (socketserver) whose listener opts in.

    loopfast run --per-socket -- python3 echo_server.py [PORT]
"""
import socketserver
import sys

import loopfast


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        print("accepted:", "fast path" if loopfast.fast_path_active(self.connection) else "plain TCP", flush=True)
        for line in self.rfile:
            self.wfile.write(line)


srv = socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Echo)
try:
    loopfast.enable_fast_path(srv.socket)  # a listener may opt in after listen
except OSError as e:
    print(e, "- serving plain TCP", file=sys.stderr)
print("listening on", srv.server_address[1], flush=True)
srv.serve_forever()
