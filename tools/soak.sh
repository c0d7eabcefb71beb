#!/usr/bin/env bash
# soak.sh - runs a strata server under mixed traffic for a while (tools/soak.py) and
# checks it stays healthy: every minute RSS, open descriptors, slots and latency
# percentiles are printed; at the end the server must be idle, drain on SIGTERM,
# exit 0 and (under ASan) report nothing.
# Usage: tools/soak.sh [--minutes N] [--max-seqs S] [--model DIR]   (BUILD=build-asan
#        for the sanitizer build; defaults: 2 minutes, 4 slots, the tiny checkpoint)
set -u
minutes=2 seqs=4 model=""
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --max-seqs) seqs=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
source "$(dirname "$0")/../tests/http/lib.sh"
[ -n "$model" ] && MODEL=$model
body=262144
http_start --max-seqs "$seqs" --max-queue 64 --max-body-bytes $body --idle-timeout 10 \
    --request-timeout 120
python3 tools/soak.py --base "$BASE" --pid "$SRV_PID" --minutes "$minutes" --clients $((2 * seqs)) \
    --max-body $body || fail "soak traffic"
kill -0 "$SRV_PID" || fail "server died"
http_stop
echo "soak: ok"
