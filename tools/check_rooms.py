#!/usr/bin/env python3
"""check_rooms.py - the house rules docs/design.md states, checked on the tree.

1. Rooms and doors: every C, C++ and CUDA file of a room includes only its own room's
   files, the doors of the rooms its row of the room table allows, and system headers.
   The table is read from docs/design.md (section "Rooms and doors"), so the document
   and the check cannot drift apart.
2. Comments name only files that exist: a path (`engine/text/tokenizer.c`) or a bare
   file name (`tok_bpe.c`) in a comment of a source, script or the Makefile must be
   found in the tree.

Exits 1 and lists every violation; prints one summary line either way.
Usage: tools/check_rooms.py [--root DIR]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC_EXT = (".c", ".h", ".cc", ".cu", ".cuh")
NAMED_EXT = r"(?:c|h|cc|cu|cuh|py|sh|md|json|jsonc|yaml|safetensors|service|env|dict)"


def tracked_files():
    out = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                  cwd=ROOT).decode()
    return [f for f in out.split("\n") if f and os.path.isfile(os.path.join(ROOT, f))]


def read_table():
    text = open(os.path.join(ROOT, "docs/design.md")).read()
    sec = text.split("## Rooms and doors", 1)
    if len(sec) < 2:
        sys.exit("check_rooms: docs/design.md has no 'Rooms and doors' section")
    rooms = {}
    for line in sec[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        room = cells[0].strip("`").rstrip("/")
        doors = re.findall(r"`([^`]+)`", cells[2])
        allowed = [a.rstrip("/") for a in re.findall(r"`([^`]+)`", cells[3])]
        rooms[room] = (doors, allowed)
    return rooms


def room_of(path, rooms):
    best = None
    for r in rooms:
        if path.startswith(r + "/") and "/" not in path[len(r) + 1:]:
            best = r
    return best


def check_includes(files, rooms):
    bad = []
    doors = {r: {r + "/" + d if "/" not in d else d for d in rooms[r][0]} for r in rooms}
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for f in files:
        if not f.endswith(SRC_EXT):
            continue
        r = room_of(f, rooms)
        if r is None:
            continue
        allowed = rooms[r][1]
        for target in inc.findall(open(os.path.join(ROOT, f), errors="replace").read()):
            if not os.path.isfile(os.path.join(ROOT, target)):
                bad.append(f"{f}: includes \"{target}\", which does not exist (paths are from the root)")
                continue
            tr = room_of(target, rooms)
            if tr == r:
                continue
            if tr is None:
                bad.append(f"{f}: includes \"{target}\", which is in no room")
            elif tr not in allowed:
                bad.append(f"{f} (room {r}): may not include room {tr} (\"{target}\")")
            elif target not in doors[tr]:
                bad.append(f"{f} (room {r}): \"{target}\" is not a door of {tr} (doors: "
                           f"{', '.join(sorted(doors[tr]))})")
    return bad


def comments(path, text):
    if path.endswith(SRC_EXT):
        # block and line comments, with string literals blanked first
        text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
        return re.findall(r"/\*.*?\*/|//[^\n]*", text, re.S)
    if path.endswith((".sh", ".py")) or os.path.basename(path) in ("Makefile", "Dockerfile"):
        text = re.sub(r"'(\\.|[^'\\\n])*'", "''", re.sub(r'"(\\.|[^"\\\n])*"', '""', text))
        return re.findall(r"#[^\n]*", text)
    return []


# Files a comment may name that are not in the tree: what the device script writes at
# run time.
RUNTIME_OUTPUTS = {"peer.md", "peer.json", "summary.md"}


# The team's shared documents (the specs, the style guide, the design card), kept beside
# a developer's checkout in ../shared, not in the tree: a clean CI checkout has no copy,
# so the names are listed here and checked against ../shared wherever it exists.
SHARED_DOCS = {"design.md", "style.md", "qwen35.md", "gemma4.md", "nemotron_h.md",
               "tokenizers.md", "perf-anchors.md", "server-anchors.md", "cuda-on-cpu.md"}


def shared_names():
    """SHARED_DOCS, and any listed name that ../shared (where present) lacks."""
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    if not os.path.isdir(shared):
        return SHARED_DOCS, []
    found = set()
    for _, _, fs in os.walk(shared):
        found.update(fs)
    return SHARED_DOCS | found, sorted(SHARED_DOCS - found)


def check_named_files(files):
    shared, stale = shared_names()
    names = {os.path.basename(f) for f in files} | shared | RUNTIME_OUTPUTS
    paths = set(files)
    dirs = {os.path.dirname(f) for f in files}
    bad = [f"tools/check_rooms.py: SHARED_DOCS names {n}, which ../shared does not have"
           for n in stale]
    tops = ("server", "engine", "models", "kernels", "config", "deploy", "tests", "tools", "docs")
    ref = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\." + NAMED_EXT + r")(?![\w/])")
    for f in files:
        try:
            text = open(os.path.join(ROOT, f)).read()
        except UnicodeDecodeError:
            continue
        for c in comments(f, text):
            for m in ref.findall(c):
                if "/" in m:
                    if m.split("/")[0] not in tops or "*" in m or "%" in m:
                        continue
                    if m not in paths and m.rstrip("/") not in dirs:
                        bad.append(f"{f}: a comment names {m}, which does not exist")
                elif m.startswith("_") or m in names or os.path.isfile("/usr/include/" + m):
                    continue  # a name pattern ("_golden" files), or a system header
                elif re.search(r"\w's " + re.escape(m), c):
                    continue  # another project's file ("SQLite's ...")
                elif not re.match(r"^(model|config|tokenizer|tokenizer_config|chat_template|"
                                  r"generation_config|special_tokens_map)\.", m):
                    bad.append(f"{f}: a comment names {m}, which is nowhere in the tree")
    return bad


def main():
    files = tracked_files()
    rooms = read_table()
    bad = check_includes(files, rooms) + check_named_files(files)
    for b in bad:
        print("check_rooms:", b)
    n_src = sum(1 for f in files if f.endswith(SRC_EXT) and room_of(f, rooms))
    print(f"check_rooms: {len(rooms)} rooms, {n_src} files, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
