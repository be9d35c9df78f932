#!/usr/bin/env node
// Runs s3rver (the pinned npm package) for fetchcost's demo and tests, with an exact request log:
// one JSON line per response {ts, method, path, range, status, bytes}, where bytes counts the body
// bytes actually written. s3rver's own console log rounds sizes and drops the key prefix, so it
// cannot reconcile byte counts; this log can.
//
// usage: s3-endpoint.js --dir DIR --bucket NAME --request-log FILE --ready-file FILE
//                       [--port N] [--key PEM --cert PEM] [--silent true]
'use strict';
const fs = require('fs');
const path = require('path');
const S3rver = require('s3rver');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const required of ['dir', 'bucket', 'request-log', 'ready-file']) {
  if (!args[required]) {
    console.error(`s3-endpoint: --${required} is required`);
    process.exit(2);
  }
}
fs.mkdirSync(args.dir, { recursive: true });
const log = fs.openSync(args['request-log'], 'a');

const options = {
  address: '127.0.0.1',
  port: Number(args.port || 0),
  directory: args.dir,
  // s3rver's own console log (one line per response, sizes rounded) stays on: tests check that
  // it agrees with the exact log below, response by response status.
  silent: args.silent === 'true',
  configureBuckets: [{ name: args.bucket, configs: [] }],
};
if (args.key && args.cert) {
  options.key = fs.readFileSync(args.key);
  options.cert = fs.readFileSync(args.cert);
}
const server = new S3rver(options);

server.run().then(({ port }) => {
  server.httpServer.prependListener('request', (req, res) => {
    let bytes = 0;
    const write = res.write.bind(res);
    const end = res.end.bind(res);
    res.write = (chunk, ...rest) => {
      if (chunk && typeof chunk !== 'function') bytes += Buffer.byteLength(chunk);
      return write(chunk, ...rest);
    };
    res.end = (chunk, ...rest) => {
      if (chunk && typeof chunk !== 'function') bytes += Buffer.byteLength(chunk);
      return end(chunk, ...rest);
    };
    const start = Date.now();
    res.on('finish', () => {
      const line = JSON.stringify({
        ts: start / 1000, method: req.method, path: decodeURIComponent(req.url.split('?')[0]),
        range: req.headers.range || null, status: res.statusCode, bytes,
        ms: Date.now() - start,
      });
      fs.writeSync(log, line + '\n');
    });
  });
  const ready = args['ready-file'];
  fs.writeFileSync(ready + '.tmp', JSON.stringify({ port, pid: process.pid }) + '\n');
  fs.renameSync(ready + '.tmp', ready);
});

function stop() {
  server.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
