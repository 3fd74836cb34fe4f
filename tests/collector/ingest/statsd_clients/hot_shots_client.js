// hot-shots (npm's DogStatsD client) against the collector: a Datadog-mode client with a
// container id and global tags, and a Telegraf-mode client (InfluxDB tags in the name).
// Usage: node hot_shots_client.js PORT. Results are checked exactly by statsd_clients_e2e_test.cc.
'use strict';
const StatsD = require('hot-shots');
const port = Number(process.argv[2]);
const errors = [];
const onError = (e) => errors.push(e);

const dd = new StatsD({
  host: '127.0.0.1', port, prefix: 'js.', globalTags: { env: 'prod' },
  datadog: true, originDetection: false, containerID: 'c0ffee', errorHandler: onError,
  includeDatadogTelemetry: false,  // its own counters, sent at close: not what is under test
});
dd.increment('requests', 2, ['route:/a']);        // js.requests:2|c|#env:prod,route:/a|c:c0ffee
dd.increment('requests', 3, ['route:/a', 'canary']);  // value-less tag: dropped, same series
dd.gauge('queue', 10);
dd.gaugeDelta('queue', -4);                       // js.queue:-4|g -> 6
dd.set('users', 'u1');
dd.unique('users', 'u2');
dd.set('users', 'u1');                            // -> 2 distinct
dd.histogram('size', 100);
dd.distribution('size', 300);                     // h and d: one distribution
dd.timing('latency', 40);                         // 0.04 s
dd.increment('stamped', 1, { timestamp: new Date(1700000000000) });  // |T1700000000: ignored
dd.event('deploy', 'version 2 rolled out');       // _e{6,20}:deploy|version 2 rolled out
dd.check('db.up', dd.CHECKS.OK);                  // _sc|db.up|0

const tg = new StatsD({
  host: '127.0.0.1', port, prefix: 'tg.', telegraf: true, globalTags: { region: 'eu' },
  errorHandler: onError,
});
tg.increment('hits', 5, ['code:200']);            // tg.hits,region=eu,code=200:5|c
tg.gauge('temp', 21.5);

// close() flushes and closes the sockets; exit once both are done.
let open = 2;
const done = () => {
  if (--open > 0) return;
  if (errors.length) {
    console.error(errors.map(String).join('\n'));
    process.exit(1);
  }
  console.log('sent');
};
dd.close(done);
tg.close(done);
