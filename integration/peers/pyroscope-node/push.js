// Pushes wall and heap profiles to a Pyroscope-compatible server with the real
// @pyroscope/nodejs client (POST /ingest?format=pprof&name=APP{...}), while burning CPU in
// a function whose name the test looks for.
//
//   node push.js SERVER_URL APP_NAME SECONDS
const Pyroscope = require('@pyroscope/nodejs');

const [url, app, seconds] = process.argv.slice(2);

function pyroscopeNodeBurn(until) {
  let x = 0;
  while (Date.now() < until) {
    for (let i = 0; i < 100000; i++) x += i * i;
  }
  return x;
}

Pyroscope.init({ serverAddress: url, appName: app, tags: { region: 'test' }, flushIntervalMs: 2000 });
Pyroscope.start();
const end = Date.now() + Number(seconds) * 1000;
function loop() {
  pyroscopeNodeBurn(Date.now() + 50);
  if (Date.now() < end) {
    setImmediate(loop);
  } else {
    Pyroscope.stop().then(() => process.exit(0));
  }
}
loop();
