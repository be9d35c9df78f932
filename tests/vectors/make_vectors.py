#!/usr/bin/python3
"""Kafka test vectors from python3-kafka's own encoders (kafka.protocol, kafka.record).

Writes tests/vectors/kafka_python.json: conversations (request and response frames as the
client and broker put them on the wire) and, for each, what a decoder must find in them — the
very values handed to the encoders. Run with Debian's /usr/bin/python3 (it sees python3-kafka):

    /usr/bin/python3 tests/vectors/make_vectors.py
"""
import json
import os
import struct

import kafka
from kafka.protocol import admin, fetch, group, produce
from kafka.protocol.api import RequestHeader
from kafka.record.memory_records import MemoryRecordsBuilder

CLIENT_ID = "py-consumer-1"


def request_frame(req, correlation_id, client_id=CLIENT_ID):
    # (kafka-python binds encode() weakly: keep the struct alive while encoding)
    header = RequestHeader(req, correlation_id=correlation_id, client_id=client_id)
    body = header.encode() + req.encode()
    return struct.pack(">i", len(body)) + body


def response_frame(resp, correlation_id):
    body = struct.pack(">i", correlation_id) + resp.encode()
    return struct.pack(">i", len(body)) + body


def record_batch(base_offset, count, value_size):
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(timestamp=1700000000000 + i, key=b"k%d" % i, value=bytes([65 + i % 26]) * value_size)
    builder.close()
    data = bytearray(builder.buffer())
    struct.pack_into(">q", data, 0, base_offset)  # base offset of the batch
    return bytes(data)


def fetch_conversation(version, correlation_id, topics, session=(0, -1), with_records=True):
    """topics: [(name, [(partition, fetch_offset, max_bytes, hw, lso, log_start, n_records)])]"""
    args = dict(replica_id=-1, max_wait_time=500, min_bytes=1)
    if version >= 3:
        args["max_bytes"] = 52428800
    if version >= 4:
        args["isolation_level"] = 1 if version % 2 else 0
    if version >= 7:
        args["session_id"], args["session_epoch"] = session
    req_topics = []
    for name, parts in topics:
        req_parts = []
        for (p, off, mb, *_rest) in parts:
            fields = [p]
            if version >= 9:
                fields.append(7)  # current_leader_epoch
            fields.append(off)
            if version >= 5:
                fields.append(-1)  # log_start_offset
            fields.append(mb)
            req_parts.append(tuple(fields))
        req_topics.append((name, req_parts))
    args["topics"] = req_topics
    if version >= 7:
        args["forgotten_topics_data"] = []  # python3-kafka 2.0.2 cannot encode non-empty ones
    if version >= 11:
        args["rack_id"] = "rack-a"
    req = fetch.FetchRequest[version](**args)

    resp_topics = []
    expect_topics = []
    records_hex = []
    for name, parts in topics:
        resp_parts = []
        expect_parts = []
        for (p, off, mb, hw, lso, log_start, n_records) in parts:
            records = record_batch(off, n_records, 40 + p) if (with_records and n_records) else b""
            if records:
                records_hex.append(records.hex())
            fields = [p, 0, hw]
            if version >= 4:
                fields.append(lso)
            if version >= 5:
                fields.append(log_start)
            if version >= 4:
                fields.append([(1234, off)] if p % 2 else [])  # aborted transactions
            if version >= 11:
                fields.append(-1)
            fields.append(records)
            resp_parts.append(tuple(fields))
            expect_parts.append({
                "partition": p, "fetch_offset": off, "partition_max_bytes": mb,
                "error_code": 0, "high_watermark": hw,
                "log_start_offset": log_start if version >= 5 else -1,
                "records_size": len(records)})
        resp_topics.append((name, resp_parts))
        expect_topics.append({"topic": name, "partitions": expect_parts})
    rargs = {}
    if version >= 1:
        rargs["throttle_time_ms"] = 0
    if version >= 7:
        rargs["error_code"] = 0
        rargs["session_id"] = 777 if session == (0, 0) else session[0]
    rargs["topics"] = resp_topics
    resp = fetch.FetchResponse[version](**rargs)
    expect = {
        "api_key": 1, "version": version, "correlation_id": correlation_id, "client_id": CLIENT_ID,
        "fetch": {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
                  "max_bytes": args.get("max_bytes", 0),
                  "isolation_level": args.get("isolation_level", 0),
                  "session_id": session[0] if version >= 7 else 0,
                  "session_epoch": session[1] if version >= 7 else -1,
                  "response_session_id": rargs.get("session_id", 0),
                  "rack_id": "rack-a" if version >= 11 else "",
                  "topics": expect_topics},
    }
    return [("request", request_frame(req, correlation_id)),
            ("response", response_frame(resp, correlation_id))], expect, records_hex


def group_conversations():
    frames, expects = [], []
    cid = 100
    specs = [
        (group.JoinGroupRequest[0](group="orders-app", session_timeout=10000, member_id="",
                                   protocol_type="consumer", group_protocols=[("range", b"m")]),
         group.JoinGroupResponse[0](error_code=0, generation_id=1, group_protocol="range",
                                    leader_id="m-1", member_id="m-1", members=[])),
        (group.JoinGroupRequest[2](group="orders-app", session_timeout=10000, rebalance_timeout=30000,
                                   member_id="m-1", protocol_type="consumer",
                                   group_protocols=[("range", b"m")]),
         group.JoinGroupResponse[2](throttle_time_ms=0, error_code=27, generation_id=1,
                                    group_protocol="range", leader_id="m-1", member_id="m-1",
                                    members=[])),
        (group.SyncGroupRequest[1](group="orders-app", generation_id=1, member_id="m-1",
                                   group_assignment=[]),
         group.SyncGroupResponse[1](throttle_time_ms=0, error_code=0, member_assignment=b"")),
        (group.HeartbeatRequest[1](group="orders-app", generation_id=1, member_id="m-1"),
         group.HeartbeatResponse[1](throttle_time_ms=0, error_code=25)),
        (group.LeaveGroupRequest[1](group="orders-app", member_id="m-1"),
         group.LeaveGroupResponse[1](throttle_time_ms=0, error_code=0)),
    ]
    for req, resp in specs:
        frames += [("request", request_frame(req, cid)), ("response", response_frame(resp, cid))]
        expects.append({"api_key": req.API_KEY, "version": req.API_VERSION, "correlation_id": cid,
                        "client_id": CLIENT_ID, "group_id": "orders-app",
                        "member_id": req.member_id,
                        "response_error_code": resp.error_code})
        cid += 1
    return frames, expects


def main():
    out = {"encoder": "python3-kafka %s (kafka.protocol, kafka.record)" % kafka.__version__,
           "conversations": []}

    def add(name, frames, expects, records_hex=()):
        out["conversations"].append({
            "name": name,
            "frames": [{"direction": d, "hex": f.hex()} for d, f in frames],
            "records_hex": list(records_hex),
            "expect": expects})

    topics_small = [("orders", [(0, 1000, 1048576, 1500, 1500, 10, 3)])]
    topics_wide = [("orders", [(p, 5000 + p, 1048576, 9000, 9000, 100 + p, 2) for p in range(6)]),
                   ("payments-eu.v2", [(p, 70 + p, 65536, 90, 88, 0, 1) for p in range(3)])]
    for version in range(4, 12):
        for label, topics in (("1p", topics_small), ("9p", topics_wide)):
            session = (0, 0) if version >= 7 else (0, -1)
            frames, expect, records = fetch_conversation(version, 40 + version, topics, session)
            add("fetch_v%d_%s" % (version, label), frames, [expect], records)

    # Pipelined: three requests in flight before the first response, answered in order.
    frames_req, frames_resp, expects, records = [], [], [], []
    for i, version in enumerate((4, 7, 11)):
        f, e, r = fetch_conversation(version, 200 + i, topics_small, (0, -1))
        frames_req.append(f[0])
        frames_resp.append(f[1])
        expects.append(e)
        records += r
    add("fetch_pipelined", frames_req + frames_resp, expects, records)

    # Produce is skipped by length; a Fetch after it on the same connection still decodes.
    produce_req = produce.ProduceRequest[3](
        transactional_id=None, required_acks=1, timeout=30000,
        topics=[("orders", [(0, record_batch(0, 50, 200))])])
    produce_resp = produce.ProduceResponse[3](
        topics=[("orders", [(0, 0, 0, -1)])], throttle_time_ms=0)
    f, e, r = fetch_conversation(6, 301, topics_small)
    add("produce_then_fetch",
        [("request", request_frame(produce_req, 300)), ("response", response_frame(produce_resp, 300))] + f,
        [{"api_key": 0, "version": 3, "correlation_id": 300, "client_id": CLIENT_ID,
          "decoded": False}, e], r)

    frames, expects = group_conversations()
    add("group_membership", frames, expects)

    # SASL: skipped by length and never retained; a Fetch after authentication still decodes.
    # acks=0 Produce gets no response: the next response overtakes it.
    hs_req = admin.SaslHandShakeRequest[1](mechanism="PLAIN")
    hs_resp = admin.SaslHandShakeResponse[1](error_code=0, enabled_mechanisms=["PLAIN"])
    auth_req = admin.SaslAuthenticateRequest[0](sasl_auth_bytes=b"\x00alice\x00secret-password")
    auth_resp = admin.SaslAuthenticateResponse[0](error_code=0, error_message=None,
                                                  sasl_auth_bytes=b"")
    produce0 = produce.ProduceRequest[3](
        transactional_id=None, required_acks=0, timeout=30000,
        topics=[("orders", [(0, record_batch(0, 5, 100))])])
    f, e, r = fetch_conversation(8, 13, topics_small)
    add("sasl_then_acks0_then_fetch",
        [("request", request_frame(hs_req, 10)), ("response", response_frame(hs_resp, 10)),
         ("request", request_frame(auth_req, 11)), ("response", response_frame(auth_resp, 11)),
         ("request", request_frame(produce0, 12))] + f,
        [{"api_key": 17, "version": 1, "correlation_id": 10, "client_id": CLIENT_ID,
          "decoded": False},
         {"api_key": 36, "version": 0, "correlation_id": 11, "client_id": CLIENT_ID,
          "decoded": False},
         {"api_key": 0, "version": 3, "correlation_id": 12, "client_id": CLIENT_ID,
          "decoded": False, "response": False}, e], r)

    # SaslHandshake v0: raw SASL tokens follow, size-prefixed without a Kafka header. This token
    # is shaped like a Fetch request header on purpose; its "client id" must never surface.
    hs0_req = admin.SaslHandShakeRequest[0](mechanism="PLAIN")
    hs0_resp = admin.SaslHandShakeResponse[0](error_code=0, enabled_mechanisms=["PLAIN"])
    token = struct.pack(">hhih", 1, 11, 7, 12) + b"alice:secret" + b"\x00" * 20
    server_token = b""
    f, e, r = fetch_conversation(11, 21, topics_small)
    add("sasl_v0_raw_tokens_then_fetch",
        [("request", request_frame(hs0_req, 20)), ("response", response_frame(hs0_resp, 20)),
         ("request", struct.pack(">i", len(token)) + token),
         ("response", struct.pack(">i", len(server_token)) + server_token)] + f,
        [{"api_key": 17, "version": 0, "correlation_id": 20, "client_id": CLIENT_ID,
          "decoded": False}, e], r)

    api_req = admin.ApiVersionRequest[0]()
    api_resp = admin.ApiVersionResponse[0](error_code=0, api_versions=[(1, 0, 11), (3, 0, 5)])
    add("api_versions_v0",
        [("request", request_frame(api_req, 1)), ("response", response_frame(api_resp, 1))],
        [{"api_key": 18, "version": 0, "correlation_id": 1, "client_id": CLIENT_ID,
          "response_error_code": 0}])

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafka_python.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print("wrote %s (%d conversations)" % (path, len(out["conversations"])))


if __name__ == "__main__":
    main()
