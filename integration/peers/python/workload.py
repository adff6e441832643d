"""A Python program for the profiler's CPython tests, the same on 3.8 to 3.13.

    python workload.py SECONDS

Three threads burn CPU for SECONDS: the main thread in a three-deep chain under a
method of a class, a second thread in a generator, a third in zlib (a C extension
that releases the GIL). Once all run it prints one JSON line with each thread's
native id, and "done" when they have finished. Lines the tests look for end in a
`# line:NAME` comment."""
import json
import sys
import threading
import time
import zlib


def chain_c(until):
    total = 0
    while time.time() < until:  # line:chain_c
        for i in range(2000):
            total += i * i  # line:chain_c_body
    return total


def chain_b(until):
    return chain_c(until) + 1  # line:chain_b


def chain_a(until):
    return chain_b(until) + 1  # line:chain_a


class Klass:
    def method(self, until):
        return chain_a(until)  # line:method


def generator(until):
    while time.time() < until:
        total = 0
        for i in range(2000):
            total += i ^ (i << 1)  # line:generator_body
        yield total  # line:generator


def gen_consumer(until, ready):
    ready.set()
    count = 0
    for _ in generator(until):  # line:gen_consumer
        count += 1
    return count


def zlib_caller(until, ready):
    data = bytes(range(256)) * 20000
    ready.set()
    while time.time() < until:
        zlib.compress(data, 9)  # line:zlib_caller


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    until = time.time() + seconds
    ids = {"main": threading.get_native_id()}
    started = []
    for name, target in (("gen", gen_consumer), ("zlib", zlib_caller)):
        ready = threading.Event()
        thread = threading.Thread(target=target, args=(until, ready))
        thread.start()
        ready.wait()
        ids[name] = thread.native_id
        started.append(thread)
    print(json.dumps(ids), flush=True)
    Klass().method(until)  # line:main
    for thread in started:
        thread.join()
    print("done", flush=True)


main()  # line:module
