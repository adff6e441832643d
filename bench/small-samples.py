#!/usr/bin/env python3
# small-samples.py OUT [BYTES]: a pprof of about BYTES (default 60 MiB) made of small
# samples: one frame of 32, one value, a thread label on a third. What bench/model-memory.sh
# decodes to measure the model's peak memory per input byte.
import sys, gzip
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7f; v >>= 7
        if v: out.append(b | 0x80)
        else: out.append(b); return bytes(out)
def field(n, wt, payload):
    if wt == 2: return varint(n << 3 | 2) + varint(len(payload)) + payload
    return varint(n << 3 | wt) + payload
strings = ["", "samples", "count", "thread", "main", "f.go"] + [f"fn{i}" for i in range(32)] + [f"w{i}" for i in range(8)]
out = bytearray()
out += field(1, 2, field(1, 0, varint(1)) + field(2, 0, varint(2)))  # sample_type samples/count
target = int(sys.argv[2]) if len(sys.argv) > 2 else 60 << 20
i = 0
body_parts = []
size = 0
while size < target:
    loc = 1 + (i % 32)
    s = field(1, 2, varint(loc)) + field(2, 2, varint(1 + i % 7))
    if i % 3 == 0:
        s += field(3, 2, field(1, 0, varint(3)) + field(2, 0, varint(38 + i % 8)))
    e = field(2, 2, s)
    body_parts.append(e); size += len(e); i += 1
out += b"".join(body_parts)
out += field(3, 2, field(1, 0, varint(1)) + field(2, 0, varint(0x400000)) + field(3, 0, varint(0x800000)) + field(5, 0, varint(5)))
for l in range(1, 33):
    out += field(4, 2, field(1, 0, varint(l)) + field(2, 0, varint(1)) + field(3, 0, varint(0x400000 + l * 16)) + field(4, 2, field(1, 0, varint(l)) + field(2, 0, varint(l))))
for f in range(1, 33):
    out += field(5, 2, field(1, 0, varint(f)) + field(2, 0, varint(5 + f)) + field(4, 0, varint(5)))
for s in strings:
    out += field(6, 2, s.encode())
open(sys.argv[1], "wb").write(bytes(out))
print(i, "samples,", len(out), "bytes")
