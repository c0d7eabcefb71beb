#!/usr/bin/env python3
"""hc_rewrite.py - makes a CUDA source compilable by g++ for the host runtime (README.md).

    hc_rewrite.py IN OUT

Two mechanical rewrites, nothing else, and no line is added or removed (a #line directive
keeps compiler messages pointing at the original file):

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> hc_launch(hc_cfg(grid, block[, smem[, stream]]), "kernel", kernel, args)
     (template kernels, configurations built by macros and launches inside #define
      bodies included);
  extern __shared__ T name[];
      -> T *name = (T *)hc_dynamic_smem();
"""
import re
import sys

SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+|alignas\(\s*\d+\s*\)\s+)?"
    r"([A-Za-z_][\w:]*(?:\s*<[^;]*?>)?(?:\s*\*)*)\s*([A-Za-z_]\w*)\s*\[\s*\]\s*;")


def fail(path, text, at, why):
    line = text.count("\n", 0, at) + 1
    sys.exit(f"{path}:{line}: hc_rewrite: {why}")


def kernel_start(text, end):
    """Start of the kernel expression that ends just before `end` (the `<<<`)."""
    i = end
    while i > 0 and text[i - 1] in " \t\r\n":  # clang-format may break before the <<<
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: walk back to the matching <
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and text[i - 1] in " \t":
            i -= 1
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def config_end(text, start):
    """Index of the `>>>` closing a launch configuration that starts at `start`."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(">>>", i):
            return i
        i += 1
    return -1


def rewrite(path, text):
    text = SHARED.sub(lambda m: f"{m[1]} *{m[2]} = ({m[1]} *)hc_dynamic_smem();", text)
    out, pos = [], 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            break
        k0 = kernel_start(text, at)
        kernel = text[k0:at].strip()
        if not kernel:
            fail(path, text, at, "a launch without a kernel name")
        close = config_end(text, at + 3)
        if close < 0:
            fail(path, text, at, "a launch configuration without its >>>")
        cfg = text[at + 3:close].strip()
        p = close + 3
        while p < len(text) and text[p] in " \t\\\n":
            p += 1
        if p >= len(text) or text[p] != "(":
            fail(path, text, at, "a launch configuration not followed by the arguments")
        q = p + 1
        while q < len(text) and text[q] in " \t":
            q += 1
        empty = q < len(text) and text[q] == ")"
        name = " ".join(kernel.replace("\\", " ").replace('"', "").split())
        out.append(text[pos:k0])
        out.append(f'hc_launch(hc_cfg({cfg}), "{name}", {kernel}' + ("" if empty else ", "))
        out.append(text[close + 3:p])  # whatever stood between >>> and (: line breaks stay
        pos = p + 1
    out.append(text[pos:])
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hc_rewrite.py IN OUT")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    body = rewrite(src, text)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{src}"\n' + body)


if __name__ == "__main__":
    main()
