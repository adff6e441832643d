"""Independent check of the arrow exporter's output with pyarrow.

Reads every Arrow IPC stream the Parca fake received, asserts the type rules Parca's
normalizer enforces (v2: the 13 columns and their exact types; v1: the samples and
locations records), and compares stacks, labels and values with what went in: the
OTLP/JSON lines that the same collector's file exporter wrote from the same batches.
Prints a JSON summary; exits non-zero on the first problem.

usage: check_arrow.py v2 OTLP_JSONL STREAM...
       check_arrow.py v1 OTLP_JSONL SAMPLES LOCATIONS [SAMPLES LOCATIONS...]
"""
import collections
import json
import re
import sys

import pyarrow as pa

BUILD_ID_KEYS = (
    "process.executable.build_id.gnu",
    "process.executable.build_id.go",
    "process.executable.build_id.htlhash",
)
SCHEMA_KEY = b"parca_write_schema_version"


def fail(message):
    print(json.dumps({"error": message}))
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def label_name(key):
    name = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "_" + name if name[:1].isdigit() else name


def any_value(v):
    for key in ("stringValue", "intValue", "boolValue", "doubleValue"):
        if key in v:
            x = v[key]
            if isinstance(x, bool):
                return "true" if x else "false"
            return str(x)
    return ""


# ---- what went in: OTLP/JSON ------------------------------------------------------------


def expected(jsonl):
    totals = collections.Counter()
    types = {}
    with open(jsonl) as f:
        for line in f:
            if not line.strip():
                continue
            data = json.loads(line)
            d = data.get("dictionary", {})
            strings = d.get("stringTable", [""])
            attrs = d.get("attributeTable", [{}])
            mappings = d.get("mappingTable", [{}])
            locations = d.get("locationTable", [{}])
            functions = d.get("functionTable", [{}])
            stacks = d.get("stackTable", [{}])

            def s(i):
                return strings[int(i or 0)]

            def attr_of(indices, key):
                for i in indices or []:
                    kv = attrs[int(i)]
                    if s(kv.get("keyStrindex", 0)) == key:
                        return any_value(kv.get("value", {}))
                return None

            def frame(li):
                loc = locations[int(li)]
                mi = int(loc.get("mappingIndex", 0) or 0)
                m = mappings[mi] if mi > 0 else None
                file = s(m.get("filenameStrindex", 0)) if m else ""
                declared = attr_of(loc.get("attributeIndices"), "profile.frame.type")
                ftype = declared or ("kernel" if file == "[kernel.kallsyms]" else "native")
                lines = loc.get("lines", [])
                if lines:
                    names = []
                    for ln in lines:
                        fn = functions[int(ln.get("functionIndex", 0) or 0)]
                        names.append(s(fn.get("nameStrindex", 0)) or s(fn.get("systemNameStrindex", 0)) or "UNKNOWN")
                    return ("L", tuple(names))
                if ftype == "kernel":
                    return ("L", ("UNKNOWN",))
                address = int(loc.get("address", 0) or 0)
                build_id = None
                if m:
                    start, limit = int(m.get("memoryStart", 0) or 0), int(m.get("memoryLimit", 0) or 0)
                    if declared is None and limit > start and start <= address < limit:
                        address = address - start + int(m.get("fileOffset", 0) or 0)
                    if ftype != "abort-marker":
                        for key in BUILD_ID_KEYS:
                            build_id = attr_of(m.get("attributeIndices"), key)
                            if build_id:
                                break
                return ("A", address, build_id or None)

            for rp in data.get("resourceProfiles", []):
                base = {}
                for kv in rp.get("resource", {}).get("attributes", []):
                    value = any_value(kv.get("value", {}))
                    if value:
                        base.setdefault(label_name(kv["key"]), value)
                for sp in rp.get("scopeProfiles", []):
                    for p in sp.get("profiles", []):
                        st = p.get("sampleType", {})
                        pt = p.get("periodType", {})
                        ptype = ":".join(
                            [s(st.get("typeStrindex")), s(st.get("unitStrindex")), s(pt.get("typeStrindex")), s(pt.get("unitStrindex"))]
                        )
                        for smp in p.get("samples", []):
                            labels = dict(base)
                            for i in smp.get("attributeIndices", []):
                                kv = attrs[int(i)]
                                value = any_value(kv.get("value", {}))
                                if value:
                                    labels[label_name(s(kv.get("keyStrindex", 0)))] = value
                            values = smp.get("values", [])
                            # A sample's total: the sum of its values (one per event when
                            # they pair with timestamps), else its count of timestamps.
                            value = sum(int(v) for v in values) if values else max(1, len(smp.get("timestampsUnixNano", [])))
                            st_index = int(smp.get("stackIndex", 0) or 0)
                            frames = tuple(frame(li) for li in stacks[st_index].get("locationIndices", []))
                            key = (tuple(sorted(labels.items())), frames, ptype)
                            totals[key] += value
                            types[ptype] = True
    return totals


# ---- what came out: Arrow -----------------------------------------------------------------


def read_stream(path):
    with open(path, "rb") as f:
        reader = pa.ipc.open_stream(f)
        batches = list(reader)
        schema = reader.schema
    check(len(batches) == 1, f"{path}: {len(batches)} record batches, Parca takes exactly one")
    return schema, batches[0]


def ree_expand(array):
    """The logical values of a run-end encoded array (dictionaries decoded)."""
    check(pa.types.is_run_end_encoded(array.type), f"{array.type} is not run-end encoded")
    ends = array.run_ends.to_pylist()
    values = array.values.to_pylist()
    out, start = [], 0
    for end, value in zip(ends, values):
        out.extend([value] * (end - start))
        start = end
    return out[array.offset : array.offset + len(array)]


def is_dict_of(t, value_type):
    return pa.types.is_dictionary(t) and t.value_type == value_type


def check_ree(t, run_end, values, what):
    check(pa.types.is_run_end_encoded(t), f"{what}: {t} is not run-end encoded")
    check(t.run_end_type == run_end, f"{what}: run ends {t.run_end_type}, want {run_end}")
    check(values(t.value_type), f"{what}: REE values {t.value_type}")


def check_v2_schema(schema, path):
    meta = schema.metadata or {}
    check(meta.get(SCHEMA_KEY) == b"v2", f"{path}: schema metadata {meta}")
    names = [f.name for f in schema]
    want = ["labels", "stacktrace", "stacktrace_id", "value", "producer", "sample_type", "sample_unit",
            "period_type", "period_unit", "temporality", "period", "duration", "timestamp"]
    check(names == want, f"{path}: columns {names}")
    labels = schema.field("labels").type
    check(pa.types.is_struct(labels), f"labels is {labels}")
    label_names = [labels.field(i).name for i in range(labels.num_fields)]
    check(label_names == sorted(label_names), f"label names not sorted: {label_names}")
    for i in range(labels.num_fields):
        check_ree(labels.field(i).type, pa.int32(), lambda v: is_dict_of(v, pa.string()), f"labels.{label_names[i]}")
    st = schema.field("stacktrace").type
    check(pa.types.is_list_view(st), f"stacktrace is {st}, want list_view (not large)")
    loc_dict = st.value_type
    check(pa.types.is_dictionary(loc_dict) and loc_dict.index_type == pa.uint32(), f"stacktrace item {loc_dict}")
    loc = loc_dict.value_type
    check(pa.types.is_struct(loc), f"location {loc}")
    check(loc.field("address").type == pa.uint64(), "address uint64")
    for name in ("frame_type", "mapping_file", "mapping_build_id"):
        check(is_dict_of(loc.field(name).type, pa.string()), f"{name} is {loc.field(name).type}")
    lines = loc.field("lines").type
    check(pa.types.is_list_view(lines), f"lines is {lines}")
    line = lines.value_type
    check(line.field("line").type == pa.uint64() and line.field("column").type == pa.uint64(), f"line {line}")
    fn = line.field("function").type
    check(pa.types.is_dictionary(fn) and pa.types.is_struct(fn.value_type), f"function {fn}")
    fs = fn.value_type
    check(fs.field("system_name").type == pa.string_view(), f"system_name {fs.field('system_name').type}")
    check(is_dict_of(fs.field("filename").type, pa.string()), f"filename {fs.field('filename').type}")
    check(fs.field("start_line").type == pa.uint64(), "start_line uint64")
    sid = schema.field("stacktrace_id").type
    check(isinstance(sid, pa.BaseExtensionType) and sid.extension_name == "arrow.uuid", f"stacktrace_id is {sid}")
    check(sid.storage_type == pa.binary(16), f"stacktrace_id storage {sid.storage_type}")
    check(schema.field("value").type == pa.int64(), "value int64")
    for name in ("producer", "sample_type", "sample_unit", "period_type", "period_unit", "temporality"):
        check_ree(schema.field(name).type, pa.int32(), lambda v: v == pa.string(), name)
    check_ree(schema.field("period").type, pa.int32(), lambda v: v == pa.int64(), "period")
    check_ree(schema.field("duration").type, pa.int32(), lambda v: v == pa.uint64(), "duration")
    check(schema.field("timestamp").type == pa.timestamp("ns", tz="UTC"), f"timestamp {schema.field('timestamp').type}")


def v2_frame(loc):
    lines = loc["lines"]
    if lines:
        return ("L", tuple(l["function"]["system_name"] for l in lines))
    return ("A", loc["address"], loc["mapping_build_id"])


def check_series(row):
    ptype = ":".join([row["sample_type"], row["sample_unit"], row["period_type"], row["period_unit"]])
    if ptype == "samples:count:cpu:nanoseconds":
        check(row["producer"] == "parca_agent", f"a CPU profile must have producer parca_agent: {row}")
        check(row["duration"] > 0 and row["temporality"] == "delta", f"a CPU profile is a delta: {row}")
    else:
        check((row["duration"] != 0) == (row["temporality"] == "delta"), f"temporality {row}")
    return ptype


def read_v2(paths):
    totals, rows = collections.Counter(), 0
    for path in paths:
        schema, batch = read_stream(path)
        check_v2_schema(schema, path)
        n = batch.num_rows
        rows += n
        labels = batch.column("labels")
        label_cols = {labels.type.field(i).name: ree_expand(labels.field(i)) for i in range(labels.type.num_fields)}
        cols = {name: ree_expand(batch.column(name)) for name in
                ("producer", "sample_type", "sample_unit", "period_type", "period_unit", "temporality", "period", "duration")}
        stacks = batch.column("stacktrace").to_pylist()
        ids = batch.column("stacktrace_id").to_pylist()
        values = batch.column("value").to_pylist()
        by_id = {}
        for i in range(n):
            row = {k: v[i] for k, v in cols.items()}
            ptype = check_series(row)
            frames = tuple(v2_frame(loc) for loc in (stacks[i] or []))
            seen = by_id.setdefault(ids[i], frames)
            check(seen == frames, f"one stacktrace_id, two stacks: {ids[i]}")
            labels_i = tuple(sorted((k, v[i]) for k, v in label_cols.items() if v[i] is not None))
            totals[(labels_i, frames, ptype)] += values[i]
    return totals, rows


def check_v1_samples(schema, path):
    meta = schema.metadata or {}
    check(meta.get(SCHEMA_KEY) == b"v1", f"{path}: schema metadata {meta}")
    names = [f.name for f in schema]
    labels = [n for n in names if n.startswith("labels.")]
    check(names[: len(labels)] == sorted(labels), f"label columns first and sorted: {names}")
    fixed = ["stacktrace_id", "value", "producer", "sample_type", "sample_unit", "period_type", "period_unit",
             "temporality", "period", "duration", "timestamp"]
    check(names[len(labels):] == fixed, f"{path}: columns {names}")
    binary = lambda v: is_dict_of(v, pa.binary())
    for n in labels + ["stacktrace_id", "producer", "sample_type", "sample_unit", "period_type", "period_unit", "temporality"]:
        check_ree(schema.field(n).type, pa.int32(), binary, n)
    check(schema.field("value").type == pa.int64(), "value int64")
    for n in ("period", "duration", "timestamp"):
        check_ree(schema.field(n).type, pa.int32(), lambda v: v == pa.int64(), n)


def check_v1_locations(schema, path):
    names = [f.name for f in schema]
    check(names == ["stacktrace_id", "is_complete", "locations"], f"{path}: columns {names}")
    check(schema.field("stacktrace_id").type == pa.binary(), "locations stacktrace_id binary")
    check(schema.field("is_complete").type == pa.bool_(), "is_complete bool")
    locs = schema.field("locations").type
    check(pa.types.is_list(locs), f"locations {locs}")
    loc = locs.value_type
    binary = lambda v: is_dict_of(v, pa.binary())
    check(loc.field("address").type == pa.uint64(), "address")
    for n in ("frame_type", "mapping_file", "mapping_build_id"):
        check_ree(loc.field(n).type, pa.int32(), binary, n)
    for n in ("mapping_start", "mapping_limit", "mapping_offset"):
        check_ree(loc.field(n).type, pa.int32(), lambda v: v == pa.uint64(), n)
    line = loc.field("lines").type.value_type
    check(line.field("line").type == pa.int64() and line.field("column").type == pa.uint64(), f"line {line}")
    check(is_dict_of(line.field("function_name").type, pa.binary()), "function_name")
    check(is_dict_of(line.field("function_system_name").type, pa.binary()), "function_system_name")
    check_ree(line.field("function_filename").type, pa.int32(), binary, "function_filename")
    check(line.field("function_start_line").type == pa.int64(), "function_start_line")


def text(b):
    return b.decode() if isinstance(b, bytes) else b


def v1_frames(locations):
    frames = []
    for loc in locations or []:
        lines = loc["lines"]
        if lines:
            frames.append(("L", tuple(text(l["function_name"]) or text(l["function_system_name"]) for l in lines)))
        else:
            frames.append(("A", loc["address"], text(loc["mapping_build_id"])))
    return tuple(frames)


def read_v1(pairs):
    totals, rows = collections.Counter(), 0
    for samples_path, locations_path in pairs:
        schema, batch = read_stream(samples_path)
        check_v1_samples(schema, samples_path)
        lschema, lbatch = read_stream(locations_path)
        check_v1_locations(lschema, locations_path)
        # The REE columns inside the list are expanded per location before to_pylist.
        stacks = {}
        locs = lbatch.column("locations")
        flat = locs.values
        expanded = {n: ree_expand(flat.field(n)) for n in ("frame_type", "mapping_file", "mapping_build_id")}
        line_list = flat.field("lines")
        line_values = line_list.values
        fname = line_values.field("function_name").to_pylist()
        fsys = line_values.field("function_system_name").to_pylist()
        addresses = flat.field("address").to_pylist()
        offsets = locs.offsets.to_pylist()
        loffsets = line_list.offsets.to_pylist()
        lvalid = line_list.is_valid().to_pylist()
        ids = lbatch.column("stacktrace_id").to_pylist()
        for r, sid in enumerate(ids):
            frames = []
            for li in range(offsets[r], offsets[r + 1]):
                check(expanded["mapping_file"][li] is not None, "v1 mapping_file must not be null")
                if lvalid[li] and loffsets[li + 1] > loffsets[li]:
                    names = tuple(text(fname[j]) or text(fsys[j]) for j in range(loffsets[li], loffsets[li + 1]))
                    frames.append(("L", names))
                else:
                    frames.append(("A", addresses[li], text(expanded["mapping_build_id"][li])))
            stacks[sid] = tuple(frames)
        n = batch.num_rows
        rows += n
        names = [f.name for f in schema]
        label_cols = {n_[len("labels."):]: ree_expand(batch.column(n_)) for n_ in names if n_.startswith("labels.")}
        cols = {name: ree_expand(batch.column(name)) for name in
                ("stacktrace_id", "producer", "sample_type", "sample_unit", "period_type", "period_unit", "temporality", "period", "duration")}
        values = batch.column("value").to_pylist()
        for i in range(n):
            row = {k: (v[i] if k == "stacktrace_id" else text(v[i])) for k, v in cols.items()}
            ptype = check_series(row)
            sid = cols["stacktrace_id"][i]
            check(sid in stacks, f"stacktrace id {sid!r} missing from the locations record")
            labels_i = tuple(sorted((k, text(v[i])) for k, v in label_cols.items() if v[i] is not None))
            totals[(labels_i, stacks[sid], ptype)] += values[i]
    return totals, rows


def main():
    mode, jsonl, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    want = expected(jsonl)
    if mode == "v2":
        got, rows = read_v2(files)
    else:
        check(len(files) % 2 == 0, "v1 takes pairs of files")
        got, rows = read_v1(list(zip(files[::2], files[1::2])))
    if got != want:
        missing = {repr(k): v for k, v in (want - got).items()}
        extra = {repr(k): v for k, v in (got - want).items()}
        fail(f"arrow and OTLP differ: missing {list(missing.items())[:3]} extra {list(extra.items())[:3]}")
    print(json.dumps({
        "streams": len(files),
        "rows": rows,
        "keys": len(got),
        "total_value": sum(got.values()),
        "label_names": sorted({k for key in got for k, _ in key[0]}),
    }))


if __name__ == "__main__":
    main()
