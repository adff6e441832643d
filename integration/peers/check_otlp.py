"""Independent decoder check: parse profcol's OTLP protobuf output with the official
opentelemetry-proto Python package (same wire version, v1.10/v1.11) and print what it
sees as JSON, so the Rust test can compare it with profcol's own reading.

usage: check_otlp.py FILE
"""
import json
import sys

from opentelemetry.proto.profiles.v1development import profiles_pb2


def main(path):
    data = profiles_pb2.ProfilesData()
    with open(path, "rb") as f:
        data.ParseFromString(f.read())
    d = data.dictionary
    problems = []
    # Every table starts with its zero value.
    if not d.string_table or d.string_table[0] != "":
        problems.append("string_table[0] is not empty")
    for name in ("mapping_table", "location_table", "function_table", "attribute_table", "stack_table"):
        table = getattr(d, name)
        if not table or table[0].ByteSize() != 0:
            problems.append(f"{name}[0] is not the zero value")
    types = {}
    for rp in data.resource_profiles:
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                key = d.string_table[p.sample_type.type_strindex] + "/" + d.string_table[p.sample_type.unit_strindex]
                t = types.setdefault(key, {"samples": 0, "total": 0, "leaf_functions": set()})
                for s in p.samples:
                    t["samples"] += 1
                    t["total"] += sum(s.values) if s.values else len(s.timestamps_unix_nano)
                    stack = d.stack_table[s.stack_index]
                    if stack.location_indices:
                        loc = d.location_table[stack.location_indices[0]]
                        if loc.lines:
                            fn = d.function_table[loc.lines[0].function_index]
                            t["leaf_functions"].add(d.string_table[fn.name_strindex])
    out = {
        "problems": problems,
        "resources": len(data.resource_profiles),
        "sample_types": {k: {"samples": v["samples"], "total": v["total"], "leaf_functions": sorted(v["leaf_functions"])} for k, v in types.items()},
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
