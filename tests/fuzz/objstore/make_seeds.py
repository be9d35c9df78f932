#!/usr/bin/python3
"""Writes the seeds of fuzz_objstore_http (and, with the Kafka seeds, of fuzz_pipeline):
[flags u8][request stream length u16 BE][request stream][response stream]; the pipeline's are
[flags][u16 Kafka requests][u16 Kafka responses][u16 HTTP requests] then the four streams.
The HTTP exchanges are shaped like s3rver's, GCS's and Azure's answers (tests/fixtures/objstore
has a recorded s3rver conversation)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "tiered/scan-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB"


def get(path, host="127.0.0.1:9000", rng=None, method="GET"):
    h = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if rng:
        h += f"Range: bytes={rng}\r\n"
    return (h + "User-Agent: fuzz\r\n\r\n").encode()


def answer(status, body=b"", chunked=False, extra=""):
    reason = {200: "OK", 206: "Partial Content", 404: "Not Found", 503: "Slow Down"}[status]
    h = f"HTTP/1.1 {status} {reason}\r\n{extra}"
    if chunked:
        mid = len(body) // 2
        data = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:mid], body[mid:]) if p)
        return (h + "Transfer-Encoding: chunked\r\n\r\n").encode() + data + b"0\r\n\r\n"
    return (h + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def conversations():
    body = bytes(range(256)) * 4
    yield "s3_range", get(f"/{KEY}.log", rng="0-1023"), answer(206, body, extra="Content-Range: bytes 0-1023/5000\r\n")
    yield "s3_keepalive", get(f"/{KEY}.rsm-manifest") + get(f"/{KEY}.indexes") + get(f"/{KEY}.log", rng="1024-2047"), \
        answer(200, b"{}") + answer(200, b"idx" * 30) + answer(206, body)
    yield "s3_404", get(f"/{KEY}.log", rng="0-9"), answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
    yield "s3_503_chunked", get(f"/{KEY}.log"), answer(503, b"slow down please", chunked=True)
    yield "chunked", get(f"/{KEY}.log"), answer(200, body, chunked=True)
    yield "virtual_host", get("/scan-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-B.log",
                              host="tiered.s3.eu-west-1.amazonaws.com", rng="-100"), answer(206, body[:100])
    yield "gcs_json", get("/download/storage/v1/b/tiered/o/scan-AAAAAAAAAAAAAAAAAAAAAA%2F0%2F00000000000000000000-B.log?alt=media",
                          host="storage.googleapis.com"), answer(200, body[:300])
    yield "azure", get(f"/{KEY}.log", host="acct.blob.core.windows.net"), answer(206, body[:64], extra="x-ms-range: bytes=0-63\r\n")
    yield "head", get(f"/{KEY}.log", method="HEAD"), b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"


def main():
    out = os.path.join(HERE, "corpus", "fuzz_objstore_http")
    for name, req, resp in conversations():
        for flags in (0, 8 | 16):
            with open(os.path.join(out, f"{name}_{flags:02x}"), "wb") as f:
                f.write(bytes([flags]) + struct.pack(">H", len(req)) + req + resp)
    # Pipeline seeds: one remote fetch (Fetch v4 for scan/0 at offset 5) around each exchange.
    def kstr(s):
        return struct.pack(">h", len(s)) + s.encode()
    def fetch(corr):
        b = struct.pack(">hhi", 1, 4, corr) + kstr("seed-client") + struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)
        b += struct.pack(">i", 1) + kstr("scan") + struct.pack(">i", 1) + struct.pack(">iqi", 0, 5, 1 << 20)
        return struct.pack(">i", len(b)) + b
    def fetch_resp(corr, n):
        b = struct.pack(">ii", corr, 0) + struct.pack(">i", 1) + kstr("scan") + struct.pack(">i", 1)
        b += struct.pack(">ihqqi", 0, 0, 1000, 1000, 0) + struct.pack(">i", n) + b"r" * n
        return struct.pack(">i", len(b)) + b
    pout = os.path.join(HERE, "..", "pipeline", "corpus", "fuzz_pipeline")
    for name, req, resp in conversations():
        kreq, kresp = fetch(1) + fetch(2), fetch_resp(1, 100) + fetch_resp(2, 50)
        for flags in (0, 1, 8 | 16):
            with open(os.path.join(pout, f"{name}_{flags:02x}"), "wb") as f:
                f.write(bytes([flags]) + struct.pack(">HHH", len(kreq), len(kresp), len(req)) +
                        kreq + kresp + req + resp)


if __name__ == "__main__":
    main()
