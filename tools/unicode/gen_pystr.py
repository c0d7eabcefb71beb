#!/usr/bin/env python3
"""Writes engine/unicode/pystr_tables.c: the character tables the Jinja interpreter needs to
behave like Python's str (upper/lower/title/capitalize, isalpha/isdigit/islower/
isupper/istitle, and which characters repr() escapes). The tables are declared in
pystr_tables.h and looked up by pystr.c.

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


def emit_items(items):
    """Initializer items packed into lines of at most 98 columns."""
    line = "   "
    for item in items:
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)


def emit_ranges(name, cps):
    r = ranges(cps)
    print(f"static const uint32_t {name}[][2] = {{")
    emit_items(f" {{0x{a:X}, 0x{b:X}}}," for a, b in r)
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
    emit_items(f" {{0x{c:X}, {n}, {s}, {d}}}," for c, n, s, d in runs)
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
    print('#include "engine/unicode/pystr_tables.h"')
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


TAIL = """
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define RANGES(t) {t, NELEM(t)}
#define CASE(p) {p##_runs, NELEM(p##_runs), p##_multi, NELEM(p##_multi)}

const pystr_ranges pystr_nonprint = RANGES(nonprint_tab), pystr_alpha = RANGES(alpha_tab),
                   pystr_digit = RANGES(digit_tab), pystr_cased = RANGES(cased_tab),
                   pystr_title = RANGES(title_tab), pystr_lower_x = RANGES(lower_x_tab),
                   pystr_upper_x = RANGES(upper_x_tab);
const pystr_case pystr_up = CASE(up), pystr_low = CASE(low), pystr_tit = CASE(tit);"""

if __name__ == "__main__":
    main()
