"""bible.py - the King James Bible the demo model is trained on (train_demo.py) and
measured on (perplexity.py), from Debian's bible-kjv (`bible`)."""
import subprocess


def read_bible():
    """[(book chapter heading, [verse, ...])] in canonical order: 1189 chapters, 31102
    verses (asserted)."""
    out = subprocess.run(["bible", "-l1000", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, check=True).stdout
    chapters = []
    for line in out.split("\n"):
        if not line.strip():
            continue
        if not line.startswith(" "):
            chapters.append((line.strip(), []))
            continue
        num, _, verse = line.strip().partition(" ")
        assert num.isdigit() and chapters, line
        chapters[-1][1].append(verse.strip())
    assert len(chapters) == 1189, len(chapters)
    assert sum(len(v) for _, v in chapters) == 31102
    return chapters
