#!/usr/bin/env bash
# bench_llamacpp.sh - strata against llama.cpp on the CPU, same shapes, interleaved rounds.
#
#   tools/bench_llamacpp.sh [LLAMA_BIN]        (or LLAMA_BIN=DIR tools/bench_llamacpp.sh)
#
# LLAMA_BIN is the directory holding llama.cpp's llama-bench, built beside the project
# (e.g. /work/llama/build/bin). This script builds nothing of llama.cpp and downloads
# nothing: the GGUF files of the real shapes come from tools/gguf_shapes.py.
#
# Per round and model: strata's `bench` with dummy weights of the preset's shapes (bf16),
# once per prompt length, and llama-bench on the GGUF file of the same shapes, at the same
# prompt lengths and decode length, with the same thread count. strata's decode follows its
# prompt of DECODE_AT tokens, so llama-bench decodes at depth (-d) DECODE_AT as well. Which
# system goes first alternates from round to round (ABBA), and every figure is one run
# (-r 1 for llama-bench; both systems warm up first); the table gives the median over the
# rounds, the range, and strata / llama.cpp of the medians.
#
# Environment (defaults):
#   MODELS      "Qwen/Qwen3.5-0.8B Qwen/Qwen3.5-2B google/gemma-4-E2B-it
#                nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"
#   GGUF_DIR    /work/llama/gguf     files <short name>-<type>.gguf
#   LLAMA_TYPES "bf16"               also "bf16 q8_0": one llama.cpp column per type
#   STRATA_TYPES "bf16"              also q8_0 / q4_k (strata's --quantization of the dummy
#                                    bf16 weights: llama.cpp's blocks), or gguf-<type>: strata
#                                    loads the very GGUF file llama.cpp runs (GGUF_DIR)
#   ROUNDS 3   THREADS 2   PP "128 1024"   GEN 64   DECODE_AT 128 (must be one of PP)
#   STRATA      build/strata         LOG  /tmp/bench_llamacpp.<pid>.tsv (raw figures)
#   TIMEOUT     1200                 seconds per run
#   LLAMA_ARGS  ""                   extra llama-bench options (e.g. "-mmp 0")
#   SUMMARY_ONLY                     set: print the table of an existing LOG, run nothing
#   QUIET 0.10  QUIET_WAIT 600       before each run, wait (at most QUIET_WAIT s) until the
#                                    other jobs use at most this share of the CPUs
#   CLEAN 0.25                       the table's medians take the runs during which the
#                                    other jobs used at most this share (all, marked *,
#                                    where none did)
#
# The machine is shared: for every run the script records the share of all CPUs that
# other processes used while it ran (busy time in /proc/stat less the run's own CPU time)
# and the load average. Both systems' thread pools wait at a barrier after every op, so a
# run that shared the cores measures the contention more than the kernels (llama.cpp's
# spinning pool loses most): the table keeps such runs out of its medians (CLEAN).
set -u
cd "$(dirname "$0")/.." || exit 2

LLAMA_BIN=${1:-${LLAMA_BIN:-}}
if [ -z "$LLAMA_BIN" ] || [ ! -x "$LLAMA_BIN/llama-bench" ]; then
    echo "usage: tools/bench_llamacpp.sh LLAMA_BIN_DIR   (the directory with llama-bench)" >&2
    echo "       or LLAMA_BIN=DIR tools/bench_llamacpp.sh" >&2
    exit 2
fi
MODELS=${MODELS:-"Qwen/Qwen3.5-0.8B Qwen/Qwen3.5-2B google/gemma-4-E2B-it nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"}
GGUF_DIR=${GGUF_DIR:-/work/llama/gguf}
LLAMA_TYPES=${LLAMA_TYPES:-bf16}
STRATA_TYPES=${STRATA_TYPES:-bf16}
SUMMARY_ONLY=${SUMMARY_ONLY:-}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
PP=${PP:-"128 1024"}
GEN=${GEN:-64}
DECODE_AT=${DECODE_AT:-128}
STRATA=${STRATA:-build/strata}
LOG=${LOG:-/tmp/bench_llamacpp.$$.tsv}
TIMEOUT=${TIMEOUT:-1200}
LLAMA_ARGS=${LLAMA_ARGS:-}
QUIET=${QUIET:-0.10}
QUIET_WAIT=${QUIET_WAIT:-600}
CLEAN=${CLEAN:-0.25}
HZ=$(getconf CLK_TCK)
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

[ -z "$SUMMARY_ONLY" ] || [ -f "$LOG" ] || { echo "bench_llamacpp: SUMMARY_ONLY needs LOG=FILE" >&2; exit 2; }
[ -n "$SUMMARY_ONLY" ] || [ -x "$STRATA" ] || { echo "bench_llamacpp: $STRATA is not built (make build/strata)" >&2; exit 2; }
case " $PP " in *" $DECODE_AT "*) ;; *) echo "bench_llamacpp: DECODE_AT must be one of PP" >&2; exit 2 ;; esac
for m in $MODELS; do
    for ty in $LLAMA_TYPES $(echo " $STRATA_TYPES" | grep -o ' gguf-[^ ]*' | sed 's/ gguf-//'); do
        f="$GGUF_DIR/${m##*/}-$ty.gguf"
        [ -f "$f" ] || { echo "bench_llamacpp: $f is missing (python3 tools/gguf_shapes.py --type $ty $m)" >&2; exit 2; }
    done
done
pp_list=$(echo "$PP" | tr ' ' ',')

loadavg() { cut -d' ' -f1 /proc/loadavg; }

# Busy and total jiffies of all CPUs; the CPU seconds of this shell's reaped children
# (`times` has to run in this shell, not in a command substitution's subshell).
stat_busy() { awk '/^cpu / {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat; }
CH=0
children_cpu() {  # sets CH
    times >"$TMP"
    CH=$(awk 'NR == 2 {n = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); n += a[1] * 60 + a[2]}; print n}' "$TMP")
}
SHARE=0
B0=""
C0=""
run_begin() { B0=$(stat_busy); children_cpu; C0=$CH; }
run_end() {  # SHARE: the other processes' share of all CPUs since run_begin
    local b1 c1
    b1=$(stat_busy)
    children_cpu
    c1=$CH
    SHARE=$(echo "$B0 $b1 $C0 $c1" | awk -v hz="$HZ" '{
        busy = ($3 - $1) / hz; total = ($4 - $2) / hz; own = $6 - $5
        s = total > 0 ? (busy - own) / total : 0; if (s < 0) s = 0; printf "%.2f", s}')
}
wait_quiet() {  # until the other jobs use at most QUIET of the CPUs over 3 s, or QUIET_WAIT s
    local waited=0
    while :; do
        run_begin; sleep 3; run_end
        awk -v s="$SHARE" -v q="$QUIET" 'BEGIN {exit !(s <= q)}' && return
        if [ "$waited" -ge "$QUIET_WAIT" ]; then
            echo "bench_llamacpp: other jobs use $SHARE of the CPUs; running anyway" >&2
            return
        fi
        sleep 17
        waited=$((waited + 20))
    done
}

# record round model system metric value (with the run's other-jobs share and load average)
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$SHARE" "$(loadavg)" >>"$LOG"; }

run_strata() {  # round model
    local r=$1 m=$2 ty n g q out pre dec
    for ty in $STRATA_TYPES; do
        case $ty in
        bf16) q="--model $m --load-format dummy" ;;
        gguf-*) q="--model $GGUF_DIR/${m##*/}-${ty#gguf-}.gguf" ;;
        *) q="--model $m --load-format dummy --quantization $ty" ;;
        esac
        for n in $PP; do
            g=2
            [ "$n" = "$DECODE_AT" ] && g=$GEN
            wait_quiet
            run_begin
            # shellcheck disable=SC2086
            out=$(timeout "$TIMEOUT" "$STRATA" bench $q --device cpu \
                --threads "$THREADS" --prompt-len "$n" --gen-len "$g" 2>&1)
            run_end
            pre=$(echo "$out" | sed -n 's/^prefill .*(\([0-9.]*\) tok\/s).*/\1/p')
            dec=$(echo "$out" | sed -n 's/^decode  *[0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
            if [ -z "$pre" ]; then
                echo "bench_llamacpp: strata failed on $m (prompt $n, $ty):" >&2
                echo "$out" | tail -5 >&2
                record "$r" "$m" "strata-$ty" "pp$n" fail
                continue
            fi
            record "$r" "$m" "strata-$ty" "pp$n" "$pre"
            if [ "$n" = "$DECODE_AT" ]; then record "$r" "$m" "strata-$ty" "tg$GEN" "$dec"; fi
        done
    done
}

# llama-bench -o csv: one line per test, fields looked up by name in the header
record_csv() {  # round model system csv-text
    local r=$1 m=$2 sys=$3 np ng ts
    echo "$4" | python3 -c '
import csv, sys
for row in csv.DictReader(sys.stdin):
    print(row["n_prompt"], row["n_gen"], row["avg_ts"])' | while read -r np ng ts; do
        if [ "$ng" = 0 ]; then record "$r" "$m" "$sys" "pp$np" "$ts"; else record "$r" "$m" "$sys" "tg$ng" "$ts"; fi
    done
}

run_llama() {  # round model
    local r=$1 m=$2 ty f out
    for ty in $LLAMA_TYPES; do
        f="$GGUF_DIR/${m##*/}-$ty.gguf"
        wait_quiet
        run_begin
        # shellcheck disable=SC2086
        out=$(timeout "$TIMEOUT" "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p "$pp_list" -n 0 \
            -r 1 -o csv $LLAMA_ARGS 2>/dev/null)
        run_end
        if [ -n "$(echo "$out" | sed -n 2p)" ]; then
            record_csv "$r" "$m" "llama-$ty" "$out"
        else
            echo "bench_llamacpp: llama-bench failed on $f; its log:" >&2
            timeout 600 "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 16 -n 0 -r 1 2>&1 | tail -8 >&2
            record "$r" "$m" "llama-$ty" "pp${PP%% *}" fail
            continue
        fi
        wait_quiet
        run_begin
        # shellcheck disable=SC2086
        out=$(timeout "$TIMEOUT" "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 0 -n "$GEN" \
            -d "$DECODE_AT" -r 1 -o csv $LLAMA_ARGS 2>/dev/null)
        run_end
        if [ -n "$(echo "$out" | sed -n 2p)" ]; then
            record_csv "$r" "$m" "llama-$ty" "$out"
        else
            record "$r" "$m" "llama-$ty" "tg$GEN" fail
        fi
    done
}

if [ -z "$SUMMARY_ONLY" ]; then
dirty=""
git diff --quiet HEAD 2>/dev/null || dirty=" + uncommitted changes"
echo "# bench_llamacpp $(date -u '+%Y-%m-%d %H:%M UTC'): strata $(git rev-parse --short HEAD 2>/dev/null)$dirty;" \
    "llama.cpp $("$LLAMA_BIN/llama-bench" --version 2>&1 | head -1)"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $THREADS threads," \
    "$ROUNDS rounds, prompts $PP, decode $GEN tokens after $DECODE_AT;" \
    "llama-bench -t $THREADS -r 1 $LLAMA_ARGS; raw figures: $LOG"
: >"$LOG"
for r in $(seq 1 "$ROUNDS"); do
    echo "# round $r: load average $(cut -d' ' -f1-3 /proc/loadavg), $(free -g | awk '/^Mem:/ {print $7}') GiB available" >&2
    for m in $MODELS; do
        if [ $((r % 2)) -eq 1 ]; then
            run_strata "$r" "$m"; run_llama "$r" "$m"
        else
            run_llama "$r" "$m"; run_strata "$r" "$m"
        fi
    done
done
fi

python3 - "$LOG" "$MODELS" "$LLAMA_TYPES" "$PP" "$GEN" "$CLEAN" "$STRATA_TYPES" <<'PYEOF'
import statistics, sys
log, models, types, pp, gen = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), \
    sys.argv[4].split(), sys.argv[5]
clean, stypes = float(sys.argv[6]), sys.argv[7].split()
vals, shares, loads = {}, [], []
for line in open(log):
    r, m, system, metric, v, share, load = line.rstrip("\n").split("\t")
    system = "strata-bf16" if system == "strata" else system  # logs before STRATA_TYPES
    shares.append(float(share))
    loads.append(float(load))
    vals.setdefault((m, system, metric), []).append((None if v == "fail" else float(v), float(share)))

marked = []
def cell(m, system, metric):
    """Median and range over the runs that other jobs left nearly alone (share <= clean);
    over all runs, marked *, where there were none."""
    runs = [(x, sh) for x, sh in vals.get((m, system, metric), []) if x is not None]
    if not runs:
        return ("failed" if (m, system, metric) in vals else "-"), None
    xs = [x for x, sh in runs if sh <= clean]
    mark = ""
    if not xs:
        xs, mark = [x for x, _ in runs], "*"
        marked.append(1)
    med = statistics.median(xs)
    spread = f" ({min(xs):.1f}-{max(xs):.1f})" if len(xs) > 1 else ""
    return f"{med:.1f}{mark}{spread}", med

# ratios: strata against llama.cpp with the same weight type, or against every llama.cpp
# type when strata ran one type only
pairs = [(s, t) for s in stypes for t in types
         if s.removeprefix("gguf-") == t or len(stypes) == 1]
cols = [f"strata {s}" for s in stypes] + [f"llama.cpp {t}" for t in types] + \
    [f"strata {s} / llama.cpp {t}" for s, t in pairs]
print("| model | tok/s | " + " | ".join(cols) + " |")
print("|---|---|" + "---|" * len(cols))
for m in models:
    for metric in [f"pp{n}" for n in pp] + [f"tg{gen}"]:
        label = f"prefill {metric[2:]}" if metric.startswith("pp") else f"decode {gen}"
        sc = {s: cell(m, f"strata-{s}", metric) for s in stypes}
        lc = {t: cell(m, f"llama-{t}", metric) for t in types}
        row = [sc[s][0] for s in stypes] + [lc[t][0] for t in types]
        for s, t in pairs:
            a, b = sc[s][1], lc[t][1]
            row.append(f"**{a / b:.2f}**" if a and b else "-")
        print(f"| {m.split('/')[-1]} | {label} | " + " | ".join(row) + " |")
if shares:
    n_clean = sum(1 for x in shares if x <= clean)
    print(f"\nmedians (and ranges) over the runs during which other jobs used at most {clean:.2f} "
          f"of the CPUs: {n_clean} of {len(shares)} figures" +
          ("; * marks a cell with no such run: median of all its runs" if marked else ""))
    print(f"other jobs' share of the CPUs during the runs: {min(shares):.2f}-{max(shares):.2f} "
          f"(median {statistics.median(shares):.2f}); load average (1 min) after the runs: "
          f"{min(loads):.2f}-{max(loads):.2f}")
PYEOF
