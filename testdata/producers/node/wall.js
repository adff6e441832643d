'use strict';
// Writes node-wall.pb.gz: a wall-time profile taken with @datadog/pprof.
//
//   npm install && node wall.js <output-dir>
//
// The workload is a known call chain of named functions:
//   main -> work -> hashLoop -> mix (TurboFan usually inlines mix, and V8
//                                    then reports the sample in hashLoop)
//               \-> fib (recursive)
//               \-> yieldToLoop (setImmediate; later iterations run from the
//                                event loop, so their stacks start at work)
//
// Note: yielding with setTimeout instead of setImmediate made @datadog/pprof
// 5.20.0 attribute nearly every sample to (idle) (which it then drops), so the
// profile ended up with only a handful of samples.

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const pprof = require('@datadog/pprof');

let sink = 0;

function mix(x) {
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x45d9f3b) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

function hashLoop(n) {
  let h = 2166136261;
  for (let i = 0; i < n; i++) {
    h = mix(h + i);
  }
  return h;
}

function fib(n) {
  return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

function yieldToLoop() {
  return new Promise((resolve) => setImmediate(resolve));
}

async function work(durationMs) {
  const deadline = Date.now() + durationMs;
  while (Date.now() < deadline) {
    sink += hashLoop(200000);
    sink += fib(20);
    await yieldToLoop();
  }
}

async function main() {
  const outDir = process.argv[2] || '.';
  fs.mkdirSync(outDir, { recursive: true });

  pprof.time.start({
    durationMillis: 10000,
    intervalMicros: 10000, // 10 ms, ~100 Hz like Go's CPU profiler
  });
  await work(2000);
  const profile = pprof.time.stop();

  let buf = await pprof.encode(profile);
  if (!(buf[0] === 0x1f && buf[1] === 0x8b)) {
    buf = zlib.gzipSync(buf); // encode() gzips today; guard in case it stops
  }
  const out = path.join(outDir, 'node-wall.pb.gz');
  fs.writeFileSync(out, buf);
  console.log('wrote', out, buf.length, 'bytes, sink', sink);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
