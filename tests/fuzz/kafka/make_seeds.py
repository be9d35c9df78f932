#!/usr/bin/env python3
"""Seed corpora for the Kafka fuzz targets, from the client-encoded vectors in tests/vectors.

fuzz_kafka_decoder: [flags][request stream length u16][request frames][response frames]
fuzz_kafka_bodies:  [selector][body] for Fetch request bodies (selector = version)
fuzz_stream:        a few operation strings
Run: python3 tests/fuzz/kafka/make_seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "vectors")


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    n = 0
    for file in ("kafka_python.json", "node_clients.json"):
        with open(os.path.join(VECTORS, file)) as f:
            vectors = json.load(f)
        for conv in vectors["conversations"]:
            req = b"".join(bytes.fromhex(fr["hex"]) for fr in conv["frames"] if fr["direction"] == "request")
            resp = b"".join(bytes.fromhex(fr["hex"]) for fr in conv["frames"] if fr["direction"] == "response")
            if len(req) > 0xFFFF:
                continue
            for flags in (0x08 | 0x01,):
                write("fuzz_kafka_decoder", "%s_%02x" % (conv["name"], flags),
                      bytes([flags]) + struct.pack(">H", len(req)) + req + resp)
                n += 1
            for fr in conv["frames"]:
                b = bytes.fromhex(fr["hex"])
                if fr["direction"] == "request" and b[4:6] == b"\x00\x01":
                    version = struct.unpack(">h", b[6:8])[0]
                    clen = struct.unpack(">h", b[12:14])[0]
                    write("fuzz_kafka_bodies", "%s_fetch_v%d" % (conv["name"], version),
                          bytes([version]) + b[14 + max(clen, 0):])
    for i, ops in enumerate([bytes(range(0, 90)), bytes([0, 10, 20, 1, 70, 30, 3, 5, 0, 4, 0, 0] * 8),
                             bytes([0x30, 1, 90, 0x12, 60, 33, 3, 40, 0, 2, 63, 95] * 8)]):
        write("fuzz_stream", "ops_%d" % i, ops)
    print("wrote %d decoder seeds" % n)


if __name__ == "__main__":
    main()
