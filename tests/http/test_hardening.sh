#!/usr/bin/env bash
# The hardening issue's defects against real servers (hardening_test.py says what
# each case checks): request framing, half-closed clients, slow clients and the
# connection reserve, the per-address limit, request preparation off the HTTP
# threads, refused output-changing fields, and memory after huge chat bodies.
source "$(dirname "$0")/lib.sh"
H=tests/http/hardening_test.py

http_start --max-seqs 4
for c in framing halfclose refused prepare; do
    timeout 300 python3 $H $c || fail "$c"
done
kill -0 "$SRV_PID" || fail "server died"
http_stop

http_start --max-seqs 4 --max-connections 16 --header-timeout 2 --idle-timeout 30
timeout 120 python3 $H slowloris || fail "slowloris"
http_stop

http_start --max-seqs 4 --max-connections-per-ip 3 --header-timeout 30
timeout 60 python3 $H perip || fail "perip"
http_stop

MODEL=models/demo http_start --max-seqs 4
BUILD=$BUILD timeout 300 python3 $H memory "$SRV_PID" || fail "memory"
http_stop
echo "test_hardening: ok"
