#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_<name>.c with libFuzzer + ASan + UBSan and runs it for a
# bounded time over a copy of its seed corpus tests/fuzz/corpus/<name>/ (the committed
# corpus is never modified). The library sources and link flags a harness needs are
# read from its own comment lines:
#   // fuzz-sources: engine/text/tokenizer.c engine/base/err.c   (.cc files: clang++)
#   // fuzz-libs: -ljansson
#   // fuzz-lib: strata       (links the whole library, built once by the Makefile with
#                              clang + the same sanitizers into build-fuzz/lib)
# An optional tests/fuzz/fuzz_<name>.dict is passed as the libFuzzer dictionary.
# Usage: tests/fuzz/run.sh [name...]   (default: every harness)
# Env: FUZZ_SECONDS (default 20) per harness. Crash inputs go to build-fuzz/artifacts/.
#      FUZZ_RUNS=N (set by default when CI=true): a fixed seed and N inputs per harness,
#      so a CI verdict is reproducible; FUZZ_SECONDS then only bounds a slow run.
#      Without it each run explores from a new random seed for FUZZ_SECONDS.
set -u
cd "$(dirname "$0")/../.."
[ "${CI:-}" = true ] && FUZZ_RUNS=${FUZZ_RUNS:-10000}
if [ -n "${FUZZ_RUNS:-}" ]; then
    SECS=${FUZZ_SECONDS:-180}
    mode=(-seed=1 -runs="$FUZZ_RUNS")
else
    SECS=${FUZZ_SECONDS:-20}
    mode=()
fi
OUT=build-fuzz
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
CFLAGS="-g -O1 $SAN -std=c11 -D_GNU_SOURCE -I."
CXXFLAGS="-g -O1 $SAN -std=c++17 -I."
mkdir -p "$OUT" build
pass=0; fail=0

summary() {
    echo "fuzz: $pass passed, $fail failed"
    echo "fuzz $pass $fail" >> build/test-summary
    [ "$fail" -eq 0 ]
    exit
}

# libFuzzer ships in clang's runtime package (libclang-rt-14-dev on Debian 12).
probe=$OUT/probe
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    > "$probe.c"
if ! clang $SAN "$probe.c" -o "$probe" > "$probe.log" 2>&1; then
    echo "FAIL fuzz: clang with libFuzzer is not usable (run tools/install-deps.sh)"
    cat "$probe.log"
    fail=$((fail + 1)); summary
fi

if [ $# -gt 0 ]; then
    harnesses=(); for n in "$@"; do harnesses+=("tests/fuzz/fuzz_$n.c"); done
else
    harnesses=(tests/fuzz/fuzz_*.c)
fi

# The whole library, for harnesses that drive the server's own code paths. At -O0: with
# the sanitizers and coverage, clang -O1 takes about 15x as long to build it (8.5 min
# against 36 s on 2 cores), more than the fixed-count runs ever gain back.
strata_lib() {
    [ -n "${STRATA_LIB_BUILT:-}" ] && return "$STRATA_LIB_BUILT"
    make -s -j"$(nproc)" CC=clang CXX=clang++ BUILD="$OUT/lib" OPT=-O0 \
        SAN="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
        "$OUT/lib/libstrata.a" > "$OUT/lib.log" 2>&1
    STRATA_LIB_BUILT=$?
    return "$STRATA_LIB_BUILT"
}
STRATA_LDLIBS="-ljansson -luv -lmicrohttpd -lcurl -lcrypto -lonig -lsentencepiece -lstdc++ -lm -lpthread -ldl"

for h in "${harnesses[@]}"; do
    [ -f "$h" ] || { echo "FAIL $h: no such harness"; fail=$((fail + 1)); continue; }
    name=$(basename "$h" .c); name=${name#fuzz_}
    bin=$OUT/fuzz_$name; log=$OUT/fuzz_$name.log; obj=$OUT/obj/$name
    srcs=$(sed -n 's|^// fuzz-sources:||p' "$h" | tr '\n' ' ')
    libs=$(sed -n 's|^// fuzz-libs:||p' "$h" | tr '\n' ' ')
    rm -rf "$obj"; mkdir -p "$obj"
    objs=(); link=clang; ok=1
    : > "$log"
    if grep -q '^// fuzz-lib: strata' "$h"; then
        if ! strata_lib; then
            echo "FAIL fuzz_$name (library build)"; tail -n 30 "$OUT/lib.log"; fail=$((fail + 1)); continue
        fi
        libs="$OUT/lib/libstrata.a $STRATA_LDLIBS $libs"; link=clang++
    fi
    for s in "$h" $srcs; do
        o=$obj/$(echo "$s" | tr '/' '_').o
        case "$s" in
            *.cc|*.cpp) link=clang++; cmd="clang++ $CXXFLAGS" ;;
            *) cmd="clang $CFLAGS" ;;
        esac
        # shellcheck disable=SC2086
        if ! $cmd -c "$s" -o "$o" >> "$log" 2>&1; then ok=0; break; fi
        objs+=("$o")
    done
    # shellcheck disable=SC2086
    if [ $ok -eq 0 ] || ! $link $SAN "${objs[@]}" -o "$bin" $libs >> "$log" 2>&1; then
        echo "FAIL fuzz_$name (build)"; tail -n 30 "$log"; fail=$((fail + 1)); continue
    fi
    corpus=$OUT/corpus/$name; art=$OUT/artifacts/$name/
    rm -rf "$corpus"; mkdir -p "$corpus" "$art"
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$corpus/"
    dict=(); [ -f "tests/fuzz/fuzz_$name.dict" ] && dict=(-dict="tests/fuzz/fuzz_$name.dict")
    # The outer timeout only guards against a hang libFuzzer itself cannot stop.
    if timeout $((SECS + 120)) "$bin" "${mode[@]}" -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" "$corpus" >> "$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        echo "PASS fuzz_$name (${runs:-?} runs${FUZZ_RUNS:+, seed 1})"; pass=$((pass + 1))
    else
        echo "FAIL fuzz_$name (crash input in $art; log $log)"; tail -n 40 "$log"
        fail=$((fail + 1))
    fi
done
summary
