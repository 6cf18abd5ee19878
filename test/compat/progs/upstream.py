"""An aiohttp upstream for nginx: GET /FILE answers the bytes of DIR/FILE,
but only once DIR/release exists (so that the test can look at the open
connections first). Listens on 127.0.0.1, a kernel-chosen port.
usage: upstream.py DIR"""
import asyncio
import pathlib
import sys

from aiohttp import web

DIR = pathlib.Path(sys.argv[1])


async def get(request):
    for _ in range(3000):  # at most 60 s
        if (DIR / "release").exists():
            break
        await asyncio.sleep(0.02)
    return web.Response(body=(DIR / request.match_info["name"]).read_bytes())


app = web.Application()
app.router.add_get("/{name}", get)
web.run_app(app, host="127.0.0.1", port=0, print=None)
