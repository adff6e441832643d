#!/usr/bin/env bash
# A mixed workload for the wire-size corpus: native C with a known chain, a syscall-heavy
# program, a Go binary, Python, compression and hashing tools, and shell pipelines.
end=$((SECONDS + ${1:-240}))
while [ $SECONDS -lt $end ]; do
  ./burner 3 &
  ./syscaller 2 &
  ./gospin 3 &
  python3 -c 'import json,hashlib
d=[{"k":i,"v":str(i)*20} for i in range(200000)]
s=json.dumps(d); hashlib.sha256(s.encode()).hexdigest(); sorted(d,key=lambda x:-x["k"])' &
  head -c 50000000 /dev/urandom | gzip -1 > /dev/null &
  find /usr -type f -name '*.so*' 2>/dev/null | head -2000 | xargs -r sha1sum > /dev/null &
  wait
done
