#!/usr/bin/env python3
"""coverage.py - did every kernel instantiation of kernels/cuda run? (README.md)

    coverage.py LIB LAUNCHED SOURCES...

LIB is build/cuda-host/libstrata_cuda.so, LAUNCHED the file the runtime wrote under
HC_COVERAGE (one instantiation a line, from every test that ran), SOURCES the .cu files.
The kernels are the __global__ functions of the sources; their instantiations are what the
library's symbol table holds of them. Prints each one never launched and exits 1 if any.
"""
import re
import subprocess
import sys

GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?([A-Za-z_]\w*)\s*\(")


def instance_name(demangled):
    """'void mm_gemv<2, 3>(float*, ...)' -> 'mm_gemv<2, 3>' (as the runtime names it)."""
    s = demangled[5:] if demangled.startswith("void ") else demangled
    depth = 0
    for i, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return s[:i]
    return s


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: coverage.py LIB LAUNCHED SOURCES...")
    lib, launched_path, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    kernels = set()
    for path in sources:
        with open(path, encoding="utf-8") as f:
            kernels.update(GLOBAL.findall(f.read()))
    nm = subprocess.run(["nm", "-C", "--defined-only", lib], capture_output=True, text=True,
                        check=True).stdout
    built = set()
    for line in nm.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or parts[1] not in "TtWw":
            continue
        name = instance_name(parts[2])
        if re.split(r"[<(]", name, maxsplit=1)[0] in kernels:
            built.add(name)
    with open(launched_path, encoding="utf-8") as f:
        launched = {line.strip() for line in f if line.strip()}
    missed = sorted(built - launched)
    for name in missed:
        print(f"never launched: {name}")
    print(f"kernel coverage: {len(built) - len(missed)} of {len(built)} instantiations of "
          f"{len(kernels)} kernels launched")
    sys.exit(1 if missed or not built else 0)


if __name__ == "__main__":
    main()
