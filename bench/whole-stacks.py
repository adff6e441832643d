"""Share of a program's samples whose stack is whole, in OTLP profiles files.

  whole-stacks.py FILE PROGRAM...

FILE holds length-framed OTLP ProfilesData (the file exporter's `format: proto`). For each
PROGRAM (a path; matched by process.executable.name), prints one JSON line: samples, whole
samples and the share. A stack is whole when, read leaf first, it holds burner.c's chain
burner_leaf, burner_middle, burner_outer, main in that order and ends in _start: the
unwinder got from the sampled instruction all the way to the program's entry.

Frames with function names (profcol symbolizes on the host) are read as they are; native
frames sent as addresses only (the OTel eBPF profiler leaves symbolization to the backend)
are named with addr2line when they are in the program's own file.
"""
import json
import os
import struct
import subprocess
import sys

from opentelemetry.proto.profiles.v1development import profiles_pb2

CHAIN = ["burner_leaf", "burner_middle", "burner_outer", "main"]


def messages(path):
    data = open(path, "rb").read()
    at = 0
    while at + 4 <= len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        m = profiles_pb2.ProfilesData()
        m.ParseFromString(data[at + 4 : at + 4 + n])
        at += 4 + n
        yield m


def symbolizer(program):
    cache = {}

    def name(address):
        if address not in cache:
            out = subprocess.run(
                ["addr2line", "-f", "-e", program, hex(address)],
                capture_output=True, text=True, check=False,
            ).stdout.split("\n")
            cache[address] = out[0] if out and out[0] != "??" else hex(address)
        return cache[address]

    return name


def is_whole(frames):
    if not frames or frames[-1] != "_start":
        return False
    at = 0
    for f in frames:
        if at < len(CHAIN) and f == CHAIN[at]:
            at += 1
    return at == len(CHAIN) and frames[0] == CHAIN[0]


def main():
    path, programs = sys.argv[1], sys.argv[2:]
    names = {os.path.basename(p): symbolizer(p) for p in programs}
    counts = {p: [0, 0] for p in names}
    for m in messages(path):
        d = m.dictionary
        s = d.string_table
        for rp in m.resource_profiles:
            attrs = {a.key: a.value.string_value for a in rp.resource.attributes}
            program = attrs.get("process.executable.name")
            if program not in names:
                continue
            for sp in rp.scope_profiles:
                for p in sp.profiles:
                    for sample in p.samples:
                        n = sum(sample.values) if sample.values else len(sample.timestamps_unix_nano)
                        frames = []
                        for li in d.stack_table[sample.stack_index].location_indices:
                            loc = d.location_table[li]
                            kinds = {d.attribute_table[a].value.string_value for a in loc.attribute_indices
                                     if s[d.attribute_table[a].key_strindex] == "profile.frame.type"}
                            # Kernel frames (an interrupt on the way back to user space)
                            # are not the program's stack.
                            if "kernel" in kinds:
                                continue
                            if loc.lines:
                                frames += [s[d.function_table[l.function_index].name_strindex] for l in loc.lines]
                                continue
                            file = os.path.basename(s[d.mapping_table[loc.mapping_index].filename_strindex])
                            frames.append(names[program](loc.address) if file == program else f"{file}+{loc.address:#x}")
                        counts[program][0] += n
                        counts[program][1] += n if is_whole(frames) else 0
    for program, (total, whole) in counts.items():
        print(json.dumps({"program": program, "samples": total, "whole": whole,
                          "share": round(whole / total, 4) if total else None}))


if __name__ == "__main__":
    main()
