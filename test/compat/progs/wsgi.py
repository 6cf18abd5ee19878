"""A WSGI application for gunicorn: answers every request with the bytes
of the file named by $LF_BLOB."""
import os


def app(environ, start_response):
    with open(os.environ["LF_BLOB"], "rb") as f:
        body = f.read()
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]
