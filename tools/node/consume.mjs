#!/usr/bin/env node
// One tenant of the tiered-broker demo/tests: consumes with kafkajs or @platformatic/kafka and
// checks every message against the simulator's deterministic contents:
//   key = "<topic>/<partition>/<offset>", value = key + "/" + ('a' + offset % 26) repeated.
// Prints a JSON summary; exits 0 only when --count messages arrived and all were right.
//
// usage: consume.mjs --lib kafkajs|platformatic --bootstrap HOST:PORT --topic T[,T2]
//                    --client-id ID --group G [--from earliest|latest] [--count N]
//                    [--value-size BYTES] [--partition-max-bytes N] [--timeout-s S] [--tls]
//                    [--forever]   (a demo tenant: consume until SIGTERM)
import { createRequire } from 'module';
const require = createRequire(import.meta.url);

const args = { from: 'earliest', count: '0', 'timeout-s': '60' };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i].replace(/^--/, '');
  if (k === 'tls' || k === 'forever') args[k] = true;
  else args[k] = process.argv[++i];
}
const topics = args.topic.split(',');
const want = Number(args.count);
const valueSize = args['value-size'] ? Number(args['value-size']) : null;
const maxPart = args['partition-max-bytes'] ? Number(args['partition-max-bytes']) : undefined;
const state = { messages: 0, bad: 0, gaps: 0, redelivered: 0, firstBad: null, partitions: {} };

function check(topic, partition, offset, key, value) {
  const k = `${topic}/${partition}/${offset}`;
  let ok = key === k && value.startsWith(k + '/');
  if (ok) {
    const fill = String.fromCharCode(97 + Number(offset % 26n));
    for (let i = k.length + 1; i < value.length && ok; i++) ok = value[i] === fill;
    if (valueSize !== null && value.length !== Math.max(valueSize, k.length + 1)) ok = false;
  }
  const p = state.partitions[`${topic}/${partition}`] ??= { first: offset, last: null, count: 0 };
  // A skipped offset is a lost message; going back is at-least-once redelivery (allowed).
  if (p.last !== null && offset > p.last + 1n) state.gaps++;
  if (p.last !== null && offset <= p.last) state.redelivered++;
  p.last = offset;
  p.count++;
  state.messages++;
  if (!ok) {
    state.bad++;
    state.firstBad ??= { key, offset: String(offset), valueHead: value.slice(0, 60) };
  }
}

let finished = false;
let stopFn = async () => {};
async function finish(code) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  try {
    await Promise.race([stopFn(), new Promise(r => setTimeout(r, 5000))]);
  } catch (e) {}
  const parts = {};
  for (const [k, v] of Object.entries(state.partitions))
    parts[k] = { first: String(v.first), last: String(v.last), count: v.count };
  const ok = code === 0 && state.bad === 0 && state.gaps === 0 && (args.forever || state.messages >= want);
  console.log(JSON.stringify({ lib: args.lib, client_id: args['client-id'], messages: state.messages,
    bad: state.bad, gaps: state.gaps, redelivered: state.redelivered, first_bad: state.firstBad,
    partitions: parts, ok }));
  process.exit(ok ? 0 : 1);
}
const timer = args.forever ? null : setTimeout(() => {
  console.error(`consume.mjs: timed out after ${args['timeout-s']} s with ${state.messages}/${want} messages`);
  finish(1);
}, Number(args['timeout-s']) * 1000);
process.on('SIGTERM', () => finish(0));
process.on('SIGINT', () => finish(0));
const reached = () => !args.forever && want > 0 && state.messages >= want;

if (args.lib === 'kafkajs') {
  const { Kafka, logLevel } = require('kafkajs');
  const kafka = new Kafka({ clientId: args['client-id'], brokers: [args.bootstrap],
    logLevel: logLevel.ERROR, ssl: args.tls ? { rejectUnauthorized: false } : undefined });
  const consumer = kafka.consumer({ groupId: args.group, maxBytesPerPartition: maxPart,
    sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 1000 });
  stopFn = () => consumer.disconnect();
  await consumer.connect();
  await consumer.subscribe({ topics, fromBeginning: args.from === 'earliest' });
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      if (finished) return;
      check(topic, partition, BigInt(message.offset), message.key?.toString() ?? '',
            message.value?.toString() ?? '');
      if (reached()) setImmediate(() => finish(0));
    },
  });
} else if (args.lib === 'platformatic') {
  const { Consumer, stringDeserializers } = await import('@platformatic/kafka');
  const consumer = new Consumer({ groupId: args.group, clientId: args['client-id'],
    bootstrapBrokers: [args.bootstrap], deserializers: stringDeserializers,
    maxBytesPerPartition: maxPart, sessionTimeout: 10000, rebalanceTimeout: 10000,
    heartbeatInterval: 1000, tls: args.tls ? { rejectUnauthorized: false } : undefined });
  const stream = await consumer.consume({ topics, mode: args.from, autocommit: true });
  stopFn = async () => { await stream.close(); await consumer.close(true); };
  stream.on('data', m => {
    if (finished) return;
    check(m.topic, m.partition, BigInt(m.offset), m.key ?? '', m.value ?? '');
    if (reached()) finish(0);
  });
  stream.on('error', e => { console.error('consume.mjs:', e.message); finish(1); });
} else {
  console.error('consume.mjs: --lib must be kafkajs or platformatic');
  process.exit(2);
}
