"""README.md (the reference) and README_cn.md (its Chinese version) give the same commands.

A command is every line of a fenced ``bash``/``sh``/``shell``/``console`` block (comments,
which the Chinese README translates, and line continuations removed) and every inline code
span outside fences that starts with ``python``, ``pip`` or ``visualdl``. Whitespace is
collapsed and the table escape ``\\|`` read as ``|``. When README.md changes its commands,
this test names the ones README_cn.md lacks or still has.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL_FENCES = ("bash", "sh", "shell", "console")
PROGRAMS = ("python", "pip", "visualdl")

FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def normalize(command: str) -> str:
    command = command.replace("\\|", "|")
    command = re.sub(r"(^|\s)#.*$", "", command)  # a shell comment: a "#" that starts a word
    return " ".join(command.split())


def commands(markdown: str) -> set[str]:
    found = set()
    for lang, body in FENCE.findall(markdown):
        if lang.lower() not in SHELL_FENCES:
            continue
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            line = normalize(line.removeprefix("$ "))
            if line:
                found.add(line)
    for span in SPAN.findall(FENCE.sub("", markdown)):
        span = normalize(span)
        if span.split(" ", 1)[0] in PROGRAMS:
            found.add(span)
    return found


def test_command_extraction():
    text = (
        "Run `python a.py --x 1` or `--flag`; `pip install -e .`\n\n"
        "```bash\n# a comment\npython b.py --y 2   # trailing comment\npython c.py \\\n    --z 3\n```\n\n"
        "```\npython not_shell.py\n```\n\n| `python d.py --m a\\|b` | table |\n"
    )
    assert commands(text) == {
        "python a.py --x 1",
        "pip install -e .",
        "python b.py --y 2",
        "python c.py --z 3",
        "python d.py --m a|b",
    }


def test_readme_commands_are_found():
    # Guards the extraction itself: an empty set on both sides would compare equal.
    found = commands(read("README.md"))
    assert 'pip install -e ".[cpu]" && python mario/train.py' in found
    assert 'pip install -e ".[cpu,test]" && python -m pytest -q' in found
    assert "visualdl --logdir runs --language en" in found
    assert "python mario/train.py --intrinsic none" in found
    assert len(found) >= 15


def test_readmes_give_the_same_commands():
    english, chinese = commands(read("README.md")), commands(read("README_cn.md"))
    missing, stale = sorted(english - chinese), sorted(chinese - english)
    assert not missing and not stale, (
        "README_cn.md must give README.md's commands (README.md is the reference):\n"
        + "".join(f"  missing in README_cn.md: {c}\n" for c in missing)
        + "".join(f"  not in README.md:        {c}\n" for c in stale)
    )


def test_readmes_link_each_other():
    english, chinese = read("README.md"), read("README_cn.md")
    assert "(README_cn.md)" in "\n".join(english.splitlines()[:5])
    assert "(README.md)" in "\n".join(chinese.splitlines()[:5])
    assert "英文 README 是基准版本" in chinese  # the Chinese README says which one is the reference
