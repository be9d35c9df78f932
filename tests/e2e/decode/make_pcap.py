#!/usr/bin/python3
"""Captures real Kafka client traffic on loopback into tests/e2e/decode/kafka_clients.pcap.

A small scripted broker (responses encoded by python3-kafka's kafka.protocol) answers:
  0. kcat (librdkafka): ApiVersions v3 (answered in the v0 layout with UNSUPPORTED_VERSION, as
     a broker does), ApiVersions v0, Metadata v4, Fetch v11,
  1. python3-kafka's KafkaConsumer (its own network client: ApiVersions, Metadata, Fetch),
  2. python3-kafka's BrokerConnection sending consumer-group requests, Produce and pipelined
     Fetch v4–v11 (the versions tshark 4.0 decodes fully),
  3. @platformatic/kafka's Connection sending Fetch v12–v17 (tshark decodes their headers).
dumpcap records it all (root needed). Run: sudo /usr/bin/python3 tests/e2e/decode/make_pcap.py
"""
import os
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time

from kafka import KafkaConsumer, TopicPartition
from kafka.conn import BrokerConnection
from kafka.protocol import admin, fetch, group, metadata, produce
from kafka.protocol.api import RequestHeader
from kafka.record.memory_records import MemoryRecordsBuilder

PORT = 39092
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "kafka_clients.pcap")
TOPICS = {"orders": 3, "payments-eu.v2": 2}
TOPIC_IDS = {"orders": bytes(range(1, 17)), "payments-eu.v2": bytes(range(101, 117))}
# Keys a flexible (v12+) fetch request's topic ids resolve to; platformatic sends ids.
ID_TO_TOPIC = {v: k for k, v in TOPIC_IDS.items()}


def enc(struct_obj):
    # kafka-python binds encode() weakly: keep the struct referenced while it encodes.
    return struct_obj.encode()


def records(base_offset, count):
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        b.append(timestamp=1700000000000 + i, key=None, value=b"v" * 64)
    b.close()
    data = bytearray(b.buffer())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def uvarint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def read_uvarint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def flexible_fetch_response(version, body):
    """Fetch v12–v17 response built field by field from FetchResponse.json (python3-kafka has no
    flexible Fetch): every requested partition gets 2 records from its fetch offset."""
    # Parse the request far enough to know topics, partitions and offsets.
    pos = 0
    ntags, pos = read_uvarint(body, pos)  # header tagged fields
    assert ntags == 0
    if version <= 14:
        pos += 4  # replica_id
    pos += 4 + 4 + 4 + 1 + 4 + 4  # max_wait, min_bytes, max_bytes, isolation, session id/epoch
    ntopics, pos = read_uvarint(body, pos)
    topics = []
    for _ in range(ntopics - 1):
        if version >= 13:
            tid = body[pos:pos + 16]
            pos += 16
        else:
            n, pos = read_uvarint(body, pos)
            tid = body[pos:pos + n - 1]
            pos += n - 1
        nparts, pos = read_uvarint(body, pos)
        parts = []
        for _ in range(nparts - 1):
            p, = struct.unpack_from(">i", body, pos)
            off, = struct.unpack_from(">q", body, pos + 8)
            pos += 4 + 4 + 8 + 4 + 8 + 4
            ntag, pos = read_uvarint(body, pos)
            parts.append((p, off))
        ntag, pos = read_uvarint(body, pos)
        topics.append((tid, parts))
    out = struct.pack(">ihi", 0, 0, 0) + uvarint(len(topics) + 1)
    for tid, parts in topics:
        out += tid if version >= 13 else uvarint(len(tid) + 1) + tid
        out += uvarint(len(parts) + 1)
        for p, off in parts:
            rec = records(off, 2)
            out += struct.pack(">ihqqq", p, 0, off + 2, off + 2, 0)
            out += uvarint(1)  # aborted_transactions: empty compact array
            out += struct.pack(">i", -1)
            out += uvarint(len(rec) + 1) + rec + b"\x00"
        out += b"\x00"
    return out + b"\x00"


class Broker(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        buf = b""
        while True:
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            size, = struct.unpack_from(">i", buf)
            frame, buf = buf[4:4 + size], buf[4 + size:]
            key, version, corr, clen = struct.unpack_from(">hhih", frame)
            body = frame[10 + max(clen, 0):]
            resp, flexible_header = self.answer(key, version, body)
            if resp is None:
                continue
            head = struct.pack(">i", corr) + (b"\x00" if flexible_header else b"")
            sock.sendall(struct.pack(">i", len(head) + len(resp)) + head + resp)

    def answer(self, key, version, body):
        if key == 18:  # ApiVersions
            if version > 2:  # answer in the v0 layout with UNSUPPORTED_VERSION
                return enc(admin.ApiVersionResponse[0](error_code=35, api_versions=[(18, 0, 2)])), False
            apis = [(0, 0, 7), (1, 0, 17), (3, 0, 5), (8, 0, 6), (10, 0, 2), (11, 0, 5),
                    (12, 0, 3), (13, 0, 2), (14, 0, 3), (18, 0, 2)]
            args = dict(error_code=0, api_versions=apis)
            if version >= 1:
                args["throttle_time_ms"] = 0
            return enc(admin.ApiVersionResponse[version](**args)), False
        if key == 3:  # Metadata
            brokers = [(0, "127.0.0.1", PORT)] if version == 0 else [(0, "127.0.0.1", PORT, None)]
            topics = []
            for name, n in TOPICS.items():
                parts = []
                for p in range(n):
                    parts.append((0, p, 0, [0], [0], []) if version >= 5 else (0, p, 0, [0], [0]))
                topics.append((0, name, False, parts) if version >= 1 else (0, name, parts))
            args = dict(brokers=brokers, topics=topics)
            if version >= 1:
                args["controller_id"] = 0
            if version >= 2:
                args["cluster_id"] = "fetchcost-test"
            if version >= 3:
                args["throttle_time_ms"] = 0
            return enc(metadata.MetadataResponse[version](**args)), False
        if key == 1:  # Fetch
            if version >= 12:
                return flexible_fetch_response(version, body), True
            req = fetch.FetchRequest[version].decode(body)
            topics = []
            for topic, parts in req.topics:
                rparts = []
                for part in parts:
                    p, off = part[0], part[2] if version >= 9 else part[1]
                    fields = [p, 0, off + 3]
                    if version >= 4:
                        fields.append(off + 3)
                    if version >= 5:
                        fields.append(0)
                    if version >= 4:
                        fields.append([])
                    if version >= 11:
                        fields.append(-1)
                    fields.append(records(off, 3))
                    rparts.append(tuple(fields))
                topics.append((topic, rparts))
            args = dict(throttle_time_ms=0, topics=topics)
            if version >= 7:
                args["error_code"] = 0
                args["session_id"] = 0
            time.sleep(0.002)
            return enc(fetch.FetchResponse[version](**args)), False
        if key == 0:  # Produce
            req = produce.ProduceRequest[version].decode(body)
            if req.required_acks == 0:
                return None, False
            return enc(produce.ProduceResponse[version](
                topics=[(t, [(p, 0, 0, -1) for p, _ in parts]) for t, parts in req.topics],
                throttle_time_ms=0)), False
        if key == 11:
            return enc(group.JoinGroupResponse[version](
                *(([0] if version >= 2 else []) + [0, 1, "range", "m-1", "m-1", []]))), False
        if key == 14:
            return enc(group.SyncGroupResponse[version](*(([0] if version >= 1 else []) + [0, b""]))), False
        if key == 12:
            return enc(group.HeartbeatResponse[version](*(([0] if version >= 1 else []) + [0]))), False
        if key == 13:
            return enc(group.LeaveGroupResponse[version](*(([0] if version >= 1 else []) + [0]))), False
        return b"", False


def kcat_consumer():
    subprocess.run(["kcat", "-C", "-b", "127.0.0.1:%d" % PORT, "-t", "orders", "-p", "1",
                    "-o", "4000", "-c", "6", "-q", "-X", "client.id=kcat-reader"],
                   check=True, timeout=30, stdout=subprocess.DEVNULL)


def python_consumer():
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:%d" % PORT, client_id="py-analytics",
                             api_version=(2, 1, 0), enable_auto_commit=False, fetch_max_wait_ms=100)
    tps = [TopicPartition("orders", p) for p in range(3)]
    consumer.assign(tps)
    for i, tp in enumerate(tps):
        consumer.seek(tp, 1000 * (i + 1))
    got = 0
    deadline = time.time() + 5
    while got < 20 and time.time() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            got += len(recs)
    consumer.close()


def python_raw_client():
    conn = BrokerConnection("127.0.0.1", PORT, socket.AF_INET, client_id="py-raw-client")
    conn.connect_blocking(timeout=5)
    futures = []

    def drain():
        deadline = time.time() + 5
        while any(not f.is_done for f in futures) and time.time() < deadline:
            for response, future in conn.recv():  # the caller completes the futures
                future.success(response)
            time.sleep(0.005)
        assert all(f.succeeded() for f in futures), [f.exception for f in futures]

    def send(req):
        # BrokerConnection allows 5 requests in flight: pipeline up to 4, then drain.
        if sum(1 for f in futures if not f.is_done) >= 4:
            drain()
        futures.append(conn.send(req))

    send(group.JoinGroupRequest[2](group="billing", session_timeout=10000, rebalance_timeout=30000,
                                   member_id="", protocol_type="consumer",
                                   group_protocols=[("range", b"meta")]))
    send(group.SyncGroupRequest[1](group="billing", generation_id=1, member_id="m-1",
                                   group_assignment=[]))
    send(group.HeartbeatRequest[1](group="billing", generation_id=1, member_id="m-1"))
    send(produce.ProduceRequest[3](transactional_id=None, required_acks=1, timeout=1000,
                                   topics=[("orders", [(0, records(0, 5))])]))
    # Pipelined fetches, every version tshark decodes fully, several partitions each.
    for version in range(4, 12):
        args = dict(replica_id=-1, max_wait_time=100, min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0)
        parts = []
        for p in range(2):
            fields = [p]
            if version >= 9:
                fields.append(-1)
            fields.append(500 * version + p)
            if version >= 5:
                fields.append(-1)
            fields.append(65536)
            parts.append(tuple(fields))
        args["topics"] = [("orders", parts), ("payments-eu.v2", parts[:1])]
        if version >= 7:
            args["session_id"], args["session_epoch"] = 0, -1
            args["forgotten_topics_data"] = []
        if version >= 11:
            args["rack_id"] = ""
        send(fetch.FetchRequest[version](**args))
    send(group.LeaveGroupRequest[1](group="billing", member_id="m-1"))
    drain()
    conn.close()


NODE_CLIENT = r"""
const plt = process.argv[process.argv.length - 1];
const { Connection } = await import(plt + '/network/connection.js');
const conn = new Connection('plt-consumer');
await conn.connect('127.0.0.1', %d);
const ids = %s;
for (let v = 12; v <= 17; v++) {
  const { api } = await import(plt + `/apis/consumer/fetch-v${v}.js`);
  const topics = [{ topicId: v >= 13 ? ids.orders : 'orders',
    partitions: [0, 1, 2].map((p) => ({ partition: p, currentLeaderEpoch: -1, fetchOffset: BigInt(7000 + 10 * v + p),
                                        lastFetchedEpoch: -1, partitionMaxBytes: 1048576 })) }];
  await api.async(conn, 100, 1, 1048576, 0, 0, -1, topics, [], '');
}
await conn.close();
"""


def node_client():
    plt = os.path.join(HERE, "..", "..", "..", "tools", "node", "node_modules", "@platformatic",
                       "kafka", "dist")
    ids = "{orders: '%s'}" % TOPIC_IDS["orders"].hex()
    script = NODE_CLIENT % (PORT, ids)
    subprocess.run(["node", "--input-type=module", "-e", script, os.path.abspath(plt)],
                   check=True, timeout=30)


def main():
    if os.geteuid() != 0:
        sys.exit("make_pcap.py captures on loopback: run it as root")
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(("127.0.0.1", PORT), Broker)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = OUT + ".tmp"
    cap = subprocess.Popen(["dumpcap", "-q", "-P", "-i", "lo", "-f", "tcp port %d" % PORT, "-w", tmp],
                           stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    try:
        kcat_consumer()
        python_consumer()
        python_raw_client()
        node_client()
        time.sleep(1)
    finally:
        cap.terminate()
        cap.wait()
        server.shutdown()
    os.replace(tmp, OUT)
    print("wrote %s (%d bytes)" % (OUT, os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
