"""An independent OTLP profiles peer built on the official opentelemetry-proto and grpcio
packages: a gRPC sink that records what profcol exports, and a client that sends to
profcol's receiver.

  otlp_peer.py sink PORT OUT_FILE   serve ProfilesService/Export on 127.0.0.1:PORT; after each
                                    request, rewrite OUT_FILE with JSON totals
  otlp_peer.py send PORT SERVICE N  send one request with N samples for service.name SERVICE
"""
import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as svc_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2
from opentelemetry.proto.resource.v1 import resource_pb2


def sink(port, out_file):
    lock = threading.Lock()
    totals = {"requests": 0, "samples": 0, "services": {}, "functions": []}

    class Sink(svc_grpc.ProfilesServiceServicer):
        def Export(self, request, context):
            d = request.dictionary
            with lock:
                totals["requests"] += 1
                for rp in request.resource_profiles:
                    name = ""
                    for kv in rp.resource.attributes:
                        if kv.key == "service.name":
                            name = kv.value.string_value
                    for sp in rp.scope_profiles:
                        for p in sp.profiles:
                            n = len(p.samples)
                            totals["samples"] += n
                            totals["services"][name] = totals["services"].get(name, 0) + n
                            for s in p.samples:
                                for li in d.stack_table[s.stack_index].location_indices:
                                    for line in d.location_table[li].lines:
                                        fn = d.string_table[d.function_table[line.function_index].name_strindex]
                                        if fn not in totals["functions"]:
                                            totals["functions"].append(fn)
                with open(out_file + ".tmp", "w") as f:
                    json.dump(totals, f)
                import os
                os.replace(out_file + ".tmp", out_file)
            return svc.ExportProfilesServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    svc_grpc.add_ProfilesServiceServicer_to_server(Sink(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def send(port, service, n):
    d = profiles_pb2.ProfilesDictionary()
    d.string_table.extend(["", "samples", "count", "python.peer.main", "python.peer.work"])
    d.mapping_table.add()
    d.location_table.add()
    d.function_table.add()
    d.link_table.add()
    d.attribute_table.add()
    d.stack_table.add()
    for name in (3, 4):
        d.function_table.add(name_strindex=name)
        d.location_table.add().lines.add(function_index=len(d.function_table) - 1)
    d.stack_table.add(location_indices=[2, 1])
    req = svc.ExportProfilesServiceRequest(dictionary=d)
    rp = req.resource_profiles.add()
    rp.resource.attributes.add(key="service.name", value=common_pb2.AnyValue(string_value=service))
    p = rp.scope_profiles.add().profiles.add()
    p.sample_type.type_strindex = 1
    p.sample_type.unit_strindex = 2
    for i in range(n):
        p.samples.add(stack_index=1, values=[1], timestamps_unix_nano=[1700000000000000000 + i])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = svc_grpc.ProfilesServiceStub(ch)
        resp = stub.Export(req, timeout=10)
    print(json.dumps({"rejected": resp.partial_success.rejected_profiles}))


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "send":
        send(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
