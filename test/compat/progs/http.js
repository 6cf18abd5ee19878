// A node http server and client.
// server FILE: answers every GET with the bytes of FILE, on every address (listen with no
// host: [::], dual-stack, as node servers usually listen), a kernel-chosen port.
// client PORT: GETs / and, once its stdin has ended, reads the body and prints
// the status and the body's SHA-256 (so the test can look at the open connection first).
'use strict';
const http = require('http'), fs = require('fs'), crypto = require('crypto');
const [mode, arg] = process.argv.slice(2);
if (mode === 'server') {
    const body = fs.readFileSync(arg);
    http.createServer((req, res) => {
        res.writeHead(200, { 'content-length': body.length });
        res.end(body);
    }).listen(0);
} else {
    http.get({ host: '127.0.0.1', port: Number(arg), path: '/' }, res => {
        res.pause();
        process.stdin.on('end', () => {
            const h = crypto.createHash('sha256');
            res.on('data', d => h.update(d));
            res.on('end', () => console.log(res.statusCode, h.digest('hex')));
            res.resume();
        });
        process.stdin.resume();
    });
}
