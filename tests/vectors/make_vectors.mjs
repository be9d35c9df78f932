#!/usr/bin/env node
// Kafka test vectors from the Node.js clients' own encoders (pinned in tools/node):
//  - kafkajs: Fetch v4–v11 requests (with forgotten topics, which python3-kafka cannot encode)
//  - @platformatic/kafka 1.35.0: Fetch v12–v17, JoinGroup v9, SyncGroup v5, Heartbeat v4,
//    LeaveGroup v5, OffsetCommit v9, ApiVersions v4 requests, and its Writer for the flexible
//    responses (Fetch v12–v17, Metadata v12), each checked by parsing it back with the library's
//    own parseResponse.
// Writes tests/vectors/node_clients.json in the format of kafka_python.json.
//     node tests/vectors/make_vectors.mjs
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = join(here, '..', '..', 'tools', 'node', 'node_modules');
const require = createRequire(join(nodeModules, 'kafkajs', 'package.json'));
const plt = join(nodeModules, '@platformatic', 'kafka', 'dist');
const imp = (p) => import(join(plt, p));

const { Writer } = await imp('protocol/writer.js');
const { Reader } = await imp('protocol/reader.js');
const { createRecordsBatch } = await imp('protocol/records.js');
const pltVersion = JSON.parse(
  (await import('node:fs')).readFileSync(join(plt, '..', 'package.json'), 'utf8')).version;
const kafkajsVersion = require('kafkajs/package.json').version;
const kafkajsFrame = require('kafkajs/src/protocol/request');

const CLIENT_ID = 'node-consumer-7';
const conversations = [];
const hex = (buf) => Buffer.from(buf).toString('hex');

// The header exactly as @platformatic/kafka's Connection.send writes it.
function pltRequestFrame(apiKey, apiVersion, correlationId, payload, headerTags = true) {
  const w = Writer.create();
  w.appendInt16(apiKey).appendInt16(apiVersion).appendInt32(correlationId).appendString(CLIENT_ID, false);
  if (headerTags) w.appendTaggedFields();
  w.appendFrom(payload).prependLength();
  return Buffer.from(w.buffer);
}

function responseFrame(correlationId, body, headerTags = true) {
  const w = Writer.create().appendInt32(correlationId);
  if (headerTags) w.appendTaggedFields();
  w.appendFrom(body).prependLength();
  return Buffer.from(w.buffer);
}

function recordsBatch(firstOffset, count, valueSize) {
  const messages = [];
  for (let i = 0; i < count; i++) {
    messages.push({ key: Buffer.from(`k${i}`), value: Buffer.alloc(valueSize, 66 + i),
                    timestamp: 1700000000000n + BigInt(i), headers: new Map() });
  }
  const batch = createRecordsBatch(messages, { firstSequence: 0 });
  const buf = Buffer.from(batch.buffer ?? batch.slice());
  buf.writeBigInt64BE(BigInt(firstOffset), 0);
  return buf;
}

const uuid = (n) => `${n.toString(16).padStart(8, '0')}-1111-4222-8333-${(n * 7).toString(16).padStart(12, '0')}`;
const uuidB64 = (u) => Buffer.from(u.replaceAll('-', ''), 'hex').toString('base64url');

// ---- Fetch v4–v11 requests from kafkajs; responses are not encoded by kafkajs (it is a client),
// so these conversations carry requests only.
for (let version = 4; version <= 11; version++) {
  const encoder = require(`kafkajs/src/protocol/requests/fetch/v${version}/request`);
  const topics = [
    { topic: 'clicks', partitions: [0, 1, 2].map((p) => ({ partition: p, fetchOffset: String(123456789012 + p), maxBytes: 1048576, currentLeaderEpoch: 3 })) },
  ];
  const sessionId = version >= 7 ? 4242 : 0;
  const sessionEpoch = version >= 7 ? 5 : -1;
  const forgotten = version >= 7 ? [{ topic: 'old-topic', partitions: [4, 5] }] : [];
  const request = encoder({ replicaId: -1, maxWaitTime: 250, minBytes: 1, maxBytes: 10485760,
                            topics, isolationLevel: 1, sessionId, sessionEpoch,
                            forgottenTopics: forgotten, rackId: 'az-1' });
  const frame = (await kafkajsFrame({ correlationId: 900 + version, clientId: CLIENT_ID, request })).buffer;
  conversations.push({
    name: `kafkajs_fetch_v${version}_request`,
    frames: [{ direction: 'request', hex: hex(frame) }],
    records_hex: [],
    expect: [{ api_key: 1, version, correlation_id: 900 + version, client_id: CLIENT_ID,
               response: false,
               fetch: { replica_id: -1, max_wait_ms: 250, min_bytes: 1, max_bytes: 10485760,
                        isolation_level: 1, session_id: version >= 7 ? sessionId : 0,
                        session_epoch: version >= 7 ? sessionEpoch : -1,
                        rack_id: version >= 11 ? 'az-1' : '',
                        topics: [{ topic: 'clicks', partitions: topics[0].partitions.map((p) => ({
                          partition: p.partition, fetch_offset: 123456789012 + p.partition,
                          partition_max_bytes: 1048576 })) }],
                        forgotten: version >= 7 ? [{ topic: 'old-topic', partitions: [4, 5] }] : [] } }],
  });
}

// ---- Metadata v12 response (topic ids) so v13+ fetches resolve names.
const topicIds = { orders: uuid(0xa1), 'payments-eu.v2': uuid(0xb2) };
function metadataConversation(correlationId) {
  const { parseResponse } = globalThis.metadataV12;
  const body = Writer.create()
    .appendInt32(0)
    .appendArray([{ id: 1, host: 'broker-1', port: 9092 }], (w, b) => w.appendInt32(b.id).appendString(b.host).appendInt32(b.port).appendString(null))
    .appendString('cluster-x')
    .appendInt32(1)
    .appendArray(Object.entries(topicIds), (w, [name, id]) => {
      w.appendInt16(0).appendString(name).appendUUID(id).appendBoolean(false)
        .appendArray([0, 1, 2], (w, p) => w.appendInt16(0).appendInt32(p).appendInt32(1).appendInt32(5)
          .appendArray([1], (w, r) => w.appendInt32(r), true, false)
          .appendArray([1], (w, r) => w.appendInt32(r), true, false)
          .appendArray([], (w, r) => w.appendInt32(r), true, false))
        .appendInt32(-2147483648);
    })
    .appendTaggedFields();
  const parsed = parseResponse(correlationId, 3, 12, Reader.from(Buffer.from(body.buffer)));
  if (parsed.topics.length !== 2 || parsed.topics[0].topicId !== topicIds.orders) throw new Error('metadata round trip');
  const { createRequest } = globalThis.metadataV12;
  return [
    { direction: 'request', hex: hex(pltRequestFrame(3, 12, correlationId, createRequest(Object.keys(topicIds)))) },
    { direction: 'response', hex: hex(responseFrame(correlationId, body)) },
  ];
}
globalThis.metadataV12 = await imp('apis/metadata/metadata-v12.js');

// ---- Fetch v12–v17 from @platformatic/kafka.
for (let version = 12; version <= 17; version++) {
  const { createRequest, parseResponse } = await imp(`apis/consumer/fetch-v${version}.js`);
  const byId = version >= 13;
  const topicList = [['orders', [0, 1, 2, 3]], ['payments-eu.v2', [7]]];
  const topics = topicList.map(([name, parts]) => ({
    topicId: byId ? topicIds[name] : name,
    partitions: parts.map((p) => ({ partition: p, currentLeaderEpoch: 9, fetchOffset: 5000000000n + BigInt(p),
                                   lastFetchedEpoch: 8, partitionMaxBytes: 1048576 })),
  }));
  const forgotten = byId ? [{ topic: topicIds.orders, partitions: [11, 12] }] : [];
  const correlationId = 50 + version;
  let payload = createRequest(500, 1, 52428800, 0, 0, 0, topics, forgotten, 'rack-z');
  let replicaId = -1;
  if (version >= 15) {
    // Followers send ReplicaState as tagged field 1 (platformatic, a consumer, never does):
    // replace the request's empty trailing tag buffer with {ReplicaId 3, ReplicaEpoch 77}.
    const buf = Buffer.from(payload.buffer);
    const tag = Writer.create().appendUnsignedVarInt(1).appendUnsignedVarInt(1).appendUnsignedVarInt(13)
      .appendInt32(3).appendInt64(77n).appendTaggedFields();
    payload = Writer.create().append(buf.subarray(0, buf.length - 1)).appendFrom(tag);
    replicaId = 3;
  }
  const requestFrame = pltRequestFrame(1, version, correlationId, payload);

  const recordsHex = [];
  const recordsByPartition = new Map([0, 1, 3, 7].map((p) => [p, recordsBatch(5000000000 + p, 2 + p, 100)]));
  const body = Writer.create().appendInt32(0).appendInt16(0).appendInt32(31337)
    .appendArray(topicList, (w, [name, parts]) => {
      if (byId) w.appendUUID(topicIds[name]); else w.appendString(name);
      w.appendArray(parts, (w, p) => {
        const records = recordsByPartition.get(p) ?? null;
        if (records) recordsHex.push(hex(records));
        w.appendInt32(p).appendInt16(0).appendInt64(5000000100n).appendInt64(5000000100n)
          .appendInt64(4000000000n)
          .appendArray(p === 1 ? [{ producerId: 99n, firstOffset: 5000000001n }] : [],
                       (w, a) => w.appendInt64(a.producerId).appendInt64(a.firstOffset))
          .appendInt32(-1)
          .appendBytes(records ?? Buffer.alloc(0));
      });
    })
    .appendTaggedFields();
  const parsed = parseResponse(correlationId, 1, version, Reader.from(Buffer.from(body.buffer)));
  if (parsed.responses.length !== 2 || parsed.sessionId !== 31337) throw new Error(`fetch v${version} round trip`);

  const frames = [];
  if (byId) frames.push(...metadataConversation(10 + version));
  frames.push({ direction: 'request', hex: hex(requestFrame) });
  frames.push({ direction: 'response', hex: hex(responseFrame(correlationId, body)) });
  const expect = [];
  if (byId) expect.push({ api_key: 3, version: 12, correlation_id: 10 + version, client_id: CLIENT_ID, metadata_topics: 2 });
  expect.push({
    api_key: 1, version, correlation_id: correlationId, client_id: CLIENT_ID,
    fetch: {
      replica_id: replicaId, max_wait_ms: 500, min_bytes: 1, max_bytes: 52428800, isolation_level: 0,
      session_id: 0, session_epoch: 0, response_session_id: 31337, rack_id: 'rack-z',
      topics: topicList.map(([name, parts]) => ({
        topic: name, ...(byId ? { topic_id: uuidB64(topicIds[name]) } : {}),
        partitions: parts.map((p) => ({
          partition: p, fetch_offset: 5000000000 + p, partition_max_bytes: 1048576,
          error_code: 0, high_watermark: 5000000100, log_start_offset: 4000000000,
          records_size: recordsByPartition.get(p)?.length ?? 0,
        })),
      })),
      forgotten: byId ? [{ topic: 'orders', partitions: [11, 12] }] : [],
    },
  });
  conversations.push({ name: `platformatic_fetch_v${version}`, frames, records_hex: recordsHex, expect });
}

// ---- Incremental fetch session (v13): full fetch creates session 31337; an incremental fetch
// updates one partition and forgets another; its response lists a partition the request omitted,
// whose fetch offset must come from the session.
{
  const version = 13;
  const { createRequest } = await imp(`apis/consumer/fetch-v${version}.js`);
  const part = (p, off) => ({ partition: p, currentLeaderEpoch: 9, fetchOffset: BigInt(off), lastFetchedEpoch: 8, partitionMaxBytes: 65536 });
  const full = createRequest(500, 1, 52428800, 0, 0, 0,
    [{ topicId: topicIds.orders, partitions: [part(0, 100), part(1, 200), part(2, 300)] }], [], '');
  const incr = createRequest(500, 1, 52428800, 0, 31337, 1,
    [{ topicId: topicIds.orders, partitions: [part(0, 150)] }], [{ topic: topicIds.orders, partitions: [2] }], '');
  const resp = (parts) => Writer.create().appendInt32(0).appendInt16(0).appendInt32(31337)
    .appendArray([0], (w) => {
      w.appendUUID(topicIds.orders).appendArray(parts, (w, [p, size]) => {
        w.appendInt32(p).appendInt16(0).appendInt64(1000n).appendInt64(1000n).appendInt64(0n)
          .appendArray([], () => {}).appendInt32(-1).appendBytes(Buffer.alloc(size, 1));
      });
    }).appendTaggedFields();
  const frames = [
    ...metadataConversation(1),
    { direction: 'request', hex: hex(pltRequestFrame(1, version, 2, full)) },
    { direction: 'response', hex: hex(responseFrame(2, resp([[0, 10], [1, 20], [2, 30]]))) },
    { direction: 'request', hex: hex(pltRequestFrame(1, version, 3, incr)) },
    { direction: 'response', hex: hex(responseFrame(3, resp([[0, 11], [1, 21]]))) },
  ];
  conversations.push({
    name: 'platformatic_fetch_session_v13', frames, records_hex: [],
    expect: [
      { api_key: 3, version: 12, correlation_id: 1, client_id: CLIENT_ID, metadata_topics: 2 },
      { api_key: 1, version, correlation_id: 2, client_id: CLIENT_ID,
        fetch: { session_id: 0, session_epoch: 0, session_kind: 'full', response_session_id: 31337,
                 topics: [{ topic: 'orders', partitions: [
                   { partition: 0, fetch_offset: 100, partition_max_bytes: 65536, records_size: 10 },
                   { partition: 1, fetch_offset: 200, partition_max_bytes: 65536, records_size: 20 },
                   { partition: 2, fetch_offset: 300, partition_max_bytes: 65536, records_size: 30 }] }] } },
      { api_key: 1, version, correlation_id: 3, client_id: CLIENT_ID,
        fetch: { session_id: 31337, session_epoch: 1, session_kind: 'incremental', response_session_id: 31337,
                 topics: [{ topic: 'orders', partitions: [
                   { partition: 0, fetch_offset: 150, partition_max_bytes: 65536, records_size: 11 },
                   { partition: 1, fetch_offset: 200, partition_max_bytes: 65536, records_size: 21, from_session: true }] }],
                 forgotten: [{ topic: 'orders', partitions: [2] }] } },
    ],
  });
}

// ---- Consumer-group APIs (flexible versions) and ApiVersions v4.
{
  const join = await imp('apis/consumer/join-group-v9.js');
  const sync = await imp('apis/consumer/sync-group-v5.js');
  const hb = await imp('apis/consumer/heartbeat-v4.js');
  const leave = await imp('apis/consumer/leave-group-v5.js');
  const commit = await imp('apis/consumer/offset-commit-v9.js');
  const apiv = await imp('apis/metadata/api-versions-v4.js');
  const group = 'billing-consumers';
  const member = 'node-consumer-7-3f2a';
  const reqs = [
    [11, 9, join.createRequest(group, 30000, 60000, member, null, 'consumer', [{ name: 'roundrobin', metadata: Buffer.from('x') }], null), member, 2],
    [14, 5, sync.createRequest(group, 4, member, null, 'consumer', 'roundrobin', []), member, 1],
    [12, 4, hb.createRequest(group, 4, member, null), member, 1],
    [8, 9, commit.createRequest(group, 4, member, null, [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 10n, committedLeaderEpoch: -1, committedMetadata: null }] }]), member, -1],
    [13, 5, leave.createRequest(group, [{ memberId: member, groupInstanceId: null, reason: null }]), '', 1],
  ];
  const frames = [];
  const expect = [];
  let cid = 600;
  // Responses: throttle_time_ms, error_code (25 = UNKNOWN_MEMBER_ID) then whatever follows,
  // cut to the fields we read; decoders must not need the rest to report the error.
  for (const [key, version, payload, memberId, errorAt] of reqs) {
    frames.push({ direction: 'request', hex: hex(pltRequestFrame(key, version, cid, payload)) });
    const body = Writer.create().appendInt32(0);
    if (key !== 8) body.appendInt16(25);
    body.appendTaggedFields();
    frames.push({ direction: 'response', hex: hex(responseFrame(cid, body)) });
    const e = { api_key: key, version, correlation_id: cid, client_id: CLIENT_ID, group_id: group };
    if (memberId) e.member_id = memberId;
    if (key !== 8) e.response_error_code = 25;
    expect.push(e);
    cid++;
  }
  frames.push({ direction: 'request', hex: hex(pltRequestFrame(18, 4, cid, apiv.createRequest('plt-kafka', pltVersion))) });
  frames.push({ direction: 'response', hex: hex(responseFrame(cid, Writer.create().appendInt16(0).appendArray([], () => {}).appendInt32(0).appendTaggedFields(), false)) });
  expect.push({ api_key: 18, version: 4, correlation_id: cid, client_id: CLIENT_ID, response_error_code: 0,
                client_software_name: 'plt-kafka', client_software_version: pltVersion });
  conversations.push({ name: 'platformatic_groups_and_api_versions', frames, records_hex: [], expect });
}

const out = { encoder: `kafkajs ${kafkajsVersion}, @platformatic/kafka ${pltVersion}`, conversations };
writeFileSync(join(here, 'node_clients.json'), JSON.stringify(out, null, 1) + '\n');
console.log(`wrote node_clients.json (${conversations.length} conversations)`);
