"""Pushes CPU profiles to a Pyroscope-compatible server with the real pyroscope-io client
(it sends POST /push.v1.PusherService/Push about every 10 s), while burning CPU in a
function whose name the test looks for.

usage: pyroscope_push.py SERVER_URL APP_NAME SECONDS
"""
import sys
import time

import pyroscope


def pyroscope_python_burn(until):
    x = 0
    while time.time() < until:
        for i in range(10000):
            x += i * i
    return x


def main(url, app, seconds):
    pyroscope.configure(application_name=app, server_address=url, tags={"region": "test"}, sample_rate=100)
    pyroscope_python_burn(time.time() + seconds)
    pyroscope.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
