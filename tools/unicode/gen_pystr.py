#!/usr/bin/env python3
"""Writes engine/unicode/pystr_tables.c: the character tables the Jinja interpreter needs to
behave like Python's str (upper/lower/title/capitalize, isalpha/isdigit/islower/
isupper/istitle, and which characters repr() escapes).

Run once with the Python whose behaviour the fixtures pin (CPython 3.11, Unicode 14):
    python3 tools/unicode/gen_pystr.py > engine/unicode/pystr_tables.c
The output is committed; CI never runs this.
"""
import sys
import unicodedata

N = 0x110000


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def emit_ranges(name, cps):
    r = ranges(cps)
    print(f"static const uint32_t {name}[][2] = {{")
    line = "   "
    for a, b in r:
        item = f" {{0x{a:X}, 0x{b:X}}},"
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    return len(r)


def case_runs(fn):
    """Single-char mappings as runs (start, count, stride, delta); multi-char apart."""
    single, multi = [], []
    for c in range(N):
        m = fn(chr(c))
        if m == chr(c):
            continue
        if len(m) == 1:
            single.append((c, ord(m) - c))
        else:
            multi.append((c, [ord(x) for x in m]))
    runs, i = [], 0
    while i < len(single):
        c, d = single[i]
        j, stride = i + 1, 1
        if j < len(single) and single[j][1] == d and single[j][0] - c in (1, 2):
            stride = single[j][0] - c
            while j < len(single) and single[j][1] == d and single[j][0] - single[j - 1][0] == stride:
                j += 1
        runs.append((c, j - i, stride, d))
        i = j
    return runs, multi


def emit_case(name, fn):
    runs, multi = case_runs(fn)
    print(f"static const jcase_run {name}_runs[] = {{")
    line = "   "
    for c, n, s, d in runs:
        item = f" {{0x{c:X}, {n}, {s}, {d}}},"
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print(f"static const jcase_multi {name}_multi[] = {{")
    for c, m in multi:
        m = m + [0] * (3 - len(m))
        print(f"    {{0x{c:X}, {{0x{m[0]:X}, 0x{m[1]:X}, 0x{m[2]:X}}}}},")
    if not multi:
        print("    {0, {0, 0, 0}},")
    print("};")


def main():
    chars = [chr(c) for c in range(N)]
    nonprint = [c for c in range(N) if not chars[c].isprintable()]
    alpha = [c for c in range(N) if chars[c].isalpha()]
    digit = [c for c in range(N) if chars[c].isdigit()]
    lower = {c for c in range(N) if chars[c].islower()}
    upper = {c for c in range(N) if chars[c].isupper()}
    title_cat = {c for c in range(N) if unicodedata.category(chars[c]) == "Lt"}
    has_up = {c for c in range(N) if chars[c].upper() != chars[c]}
    has_low = {c for c in range(N) if chars[c].lower() != chars[c]}
    cased = lower | upper | title_cat

    print("/* pystr_tables.c - Python str character tables (GENERATED, do not edit).")
    print(f" * Written by tools/unicode/gen_pystr.py from Python {sys.version.split()[0]}")
    print(f" * unicodedata {unicodedata.unidata_version}, so str methods in templates match CPython. */")
    print('#include <stddef.h>')
    print()
    print('#include "engine/unicode/pystr.h"')
    print()
    print("typedef struct { uint32_t start; uint16_t count, stride; int32_t delta; } jcase_run;")
    print("typedef struct { uint32_t cp; uint32_t to[3]; } jcase_multi;")
    print()
    emit_ranges("nonprint_tab", nonprint)
    emit_ranges("alpha_tab", alpha)
    emit_ranges("digit_tab", digit)
    emit_ranges("cased_tab", cased)
    emit_ranges("title_tab", title_cat)
    # islower(c) is "has an uppercase mapping" with few exceptions; same for isupper.
    emit_ranges("lower_x_tab", lower ^ has_up)
    emit_ranges("upper_x_tab", upper ^ has_low)
    emit_case("up", str.upper)
    emit_case("low", str.lower)
    emit_case("tit", str.title)
    print(TAIL)


TAIL = r"""
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static int in_ranges(const uint32_t (*t)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < t[mid][0]) hi = mid;
        else if (c > t[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int map_case(const jcase_run *runs, size_t nruns, const jcase_multi *multi, size_t nmulti,
                    uint32_t c, uint32_t out[3]) {
    for (size_t i = 0; i < nmulti; i++) {
        if (multi[i].cp == c) {
            int k = 0;
            while (k < 3 && multi[i].to[k]) out[k] = multi[i].to[k], k++;
            return k;
        }
    }
    size_t lo = 0, hi = nruns;
    while (lo < hi) { /* last run with start <= c */
        size_t mid = (lo + hi) / 2;
        if (runs[mid].start <= c) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) {
        const jcase_run *r = &runs[lo - 1];
        uint32_t off = c - r->start;
        if (off % r->stride == 0 && off / r->stride < r->count) {
            out[0] = (uint32_t)((int64_t)c + r->delta);
            return 1;
        }
    }
    out[0] = c;
    return 1;
}

int unicode_py_isprintable(uint32_t c) { return !in_ranges(nonprint_tab, NELEM(nonprint_tab), c); }
int unicode_py_isalpha(uint32_t c) { return in_ranges(alpha_tab, NELEM(alpha_tab), c); }
int unicode_py_isdigit(uint32_t c) { return in_ranges(digit_tab, NELEM(digit_tab), c); }
int unicode_py_iscased(uint32_t c) { return in_ranges(cased_tab, NELEM(cased_tab), c); }
int unicode_py_istitle(uint32_t c) { return in_ranges(title_tab, NELEM(title_tab), c); }

int unicode_py_toupper(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) {
        out[0] = c >= 'a' && c <= 'z' ? c - 32 : c;
        return 1;
    }
    return map_case(up_runs, NELEM(up_runs), up_multi, NELEM(up_multi), c, out);
}

int unicode_py_tolower(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) {
        out[0] = c >= 'A' && c <= 'Z' ? c + 32 : c;
        return 1;
    }
    return map_case(low_runs, NELEM(low_runs), low_multi, NELEM(low_multi), c, out);
}

int unicode_py_totitle(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) return unicode_py_toupper(c, out);
    return map_case(tit_runs, NELEM(tit_runs), tit_multi, NELEM(tit_multi), c, out);
}

int unicode_py_islower(uint32_t c) {
    uint32_t m[3];
    int has_up = unicode_py_toupper(c, m) != 1 || m[0] != c;
    return has_up ^ in_ranges(lower_x_tab, NELEM(lower_x_tab), c);
}

int unicode_py_isupper(uint32_t c) {
    uint32_t m[3];
    int has_low = unicode_py_tolower(c, m) != 1 || m[0] != c;
    return has_low ^ in_ranges(upper_x_tab, NELEM(upper_x_tab), c);
}"""

if __name__ == "__main__":
    main()
