"""README.md (the reference) and README_cn.md (its Chinese version): a short front door that stays true.

A command is every line of a fenced ``bash``/``sh``/``shell``/``console`` block (comments,
which the Chinese README translates, and line continuations removed) and every inline code
span outside fences that starts with ``python``, ``pip`` or ``visualdl``. Whitespace is
collapsed and the table escape ``\\|`` read as ``|``. When README.md changes its commands,
this test names the ones README_cn.md lacks or still has. Both READMEs stay at most 15 KB,
open with the two install commands, give commands whose scripts, files and flags exist, and
link only to files (and headings) that exist; so do the pages under docs/, whose commands name
scripts that exist and flags their ``--help`` lists. The numbered
deviations, which code and pages cite by number, keep their numbers (docs/deviations.md), and
the hand-written lists of ``--intrinsic`` choices name every registered module.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shlex
import unicodedata

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
    assert "python mario/train.py --recipe cpu-1-1 --intrinsic none" in found
    assert len(found) >= 8


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


README_MAX_BYTES = 15 * 1024  # `wc -c`: the front door, not the manual (docs/usage.md is the manual)
INSTALL_AND_TRAIN = '```bash\npip install -e ".[cpu]" && python mario/train.py\n```'
INSTALL_AND_TEST = '```bash\npip install -e ".[cpu,test]" && python -m pytest -q\n```'
#: the pages of the project's measured results: the README's results table links each one
RESULT_PAGES = (
    "exploration.md",
    "mario_learning.md",
    "mario_tutorial_hour.md",
    "snd_signal.md",
    "snd_dqn_pong.md",
    "montezuma.md",
    "mario_no_reward.md",
)


def test_readmes_are_a_short_front_door():
    for name in ("README.md", "README_cn.md"):
        text = read(name)
        size = len(text.encode("utf-8"))
        assert size <= README_MAX_BYTES, (
            f"{name} is {size:,} bytes: move detail into docs/ (at most {README_MAX_BYTES:,})"
        )
        blocks = [m.group(0) for m in FENCE.finditer(text)]
        assert blocks[:2] == [INSTALL_AND_TRAIN, INSTALL_AND_TEST], f"{name}: the two install commands come first"
        assert text.index(INSTALL_AND_TRAIN) < text.index("\n## "), f"{name}: the install commands are at the top"
        for page in RESULT_PAGES:
            assert f"(docs/{page})" in text, f"{name}'s results table does not link docs/{page}"
        assert "<!-- zoo-table:start -->" in text and "<!-- zoo-table:end -->" in text, name


def _game_config(script: str):
    """The config class a game's train.py parses its flags with (``mario/train.py`` -> mario.train.SPEC)."""
    module = importlib.import_module(script.removesuffix(".py").replace("/", "."))
    return module.SPEC.config_cls


def test_readme_commands_name_real_scripts_files_and_flags():
    """Each ``python <script>.py`` of the README names a script that exists; a train script accepts the flags
    given (parsed as the run would, nothing run); a ``--checkpoint`` names a file in the checkout."""
    from common.run.config import parse_config

    checked = 0
    for command in sorted(commands(read("README.md"))):
        for part in command.split("&&"):
            argv = shlex.split(part)
            if argv[0] != "python" or not argv[1].endswith(".py"):
                if argv[:2] == ["python", "-m"] and argv[2] != "pytest":
                    assert importlib.util.find_spec(argv[2]) is not None, command
                continue
            script, args = argv[1], argv[2:]
            assert os.path.isfile(os.path.join(ROOT, script)), f"{command}: no {script}"
            if script.endswith("/train.py"):
                parse_config(_game_config(script), args)  # exits (argparse) on a flag the script lacks
            if "--checkpoint" in args:
                path = args[args.index("--checkpoint") + 1]
                assert os.path.isfile(os.path.join(ROOT, path)), f"{command}: no {path}"
            checked += 1
    assert checked >= 5


def _script_flags(script: str) -> set[str]:
    """The ``--flags`` a script's ``--help`` names: its ``main(["--help"])`` run in this process (nothing
    trains; the page is parsed, not the flag's value)."""
    import contextlib
    import io
    import sys

    folder, name = os.path.split(script.removesuffix(".py"))
    if folder in ("benchmarks", "notebooks"):  # script folders, not packages: imported as the tests do
        if os.path.join(ROOT, folder) not in sys.path:
            sys.path.insert(0, os.path.join(ROOT, folder))
        module = importlib.import_module(name)
    else:
        module = importlib.import_module(f"{folder.replace('/', '.')}.{name}")
    page = io.StringIO()
    with contextlib.redirect_stdout(page), contextlib.suppress(SystemExit):
        module.main(["--help"])
    return set(re.findall(r"--[a-z][a-z0-9-]*", page.getvalue()))


def test_commands_in_docs_name_real_scripts_and_flags():
    """Each ``python <script>.py`` command of a docs/ page (or zoo/README.md) names a script that exists and
    only flags its ``--help`` lists, so a page cannot keep a command its script has dropped. Placeholders
    (``<game>/train.py``) are skipped."""
    uses: dict[str, list[tuple[str, str]]] = {}
    pages = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "zoo", "README.md")]
    for page in pages:
        for command in commands(read(page)):
            for part in command.split("&&"):
                argv = shlex.split(part)
                if len(argv) > 1 and argv[0] == "python" and argv[1].endswith(".py") and "<" not in argv[1]:
                    for flag in (a.split("=")[0] for a in argv[2:] if a.startswith("--")):
                        uses.setdefault(argv[1], []).append((os.path.relpath(page, ROOT), flag))
    assert len(uses) >= 20  # guards the extraction: the pages cite most scripts
    wrong = []
    for script, found in sorted(uses.items()):
        if not os.path.isfile(os.path.join(ROOT, script)):
            wrong.append(f"{found[0][0]}: no {script}")
            continue
        known = _script_flags(script)
        wrong += [f"{page}: {script} has no {flag}" for page, flag in found if flag not in known]
    assert not wrong, "\n".join(sorted(set(wrong)))


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _without_code(text: str) -> str:
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, letters, digits, spaces, '-' and '_' kept, spaces to '-'."""
    kept = (c for c in heading.strip().lower() if c in " -_" or unicodedata.category(c)[0] in "LN")
    return "".join(kept).replace(" ", "-")


def _anchors(path: str) -> set[str]:
    found, seen = set(), {}
    with open(path, encoding="utf-8") as f:
        for heading in HEADING.findall(FENCE.sub("", f.read())):
            a = _anchor(heading)
            found.add(a if a not in seen else f"{a}-{seen[a]}")
            seen[a] = seen.get(a, 0) + 1
    return found


def test_anchor_rule():
    assert _anchor("Checkpoints, Ctrl-C and failures") == "checkpoints-ctrl-c-and-failures"
    assert _anchor("3. The RND recipe (Burda, Edwards)") == "3-the-rnd-recipe-burda-edwards"
    assert _anchor("观察智能体：VisualDL 看板") == "观察智能体visualdl-看板"


def test_links_of_the_readmes_and_docs_lead_somewhere():
    pages = ["README.md", "README_cn.md", os.path.join("zoo", "README.md")]
    pages += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    broken = []
    for page in pages:
        here = os.path.join(ROOT, page)
        for target in LINK.findall(_without_code(read(page))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(here), path)) if path else here
            if not os.path.exists(full):
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and full.endswith(".md") and anchor not in _anchors(full):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_deviations_keep_their_numbers():
    """Code and docs cite deviations by number ("Montezuma deviation 21", "SND article item 5"): the tutorial's
    and Montezuma's items run 1-26 in order, the SND article's list 1-8 after them."""
    text = read(os.path.join("docs", "deviations.md"))
    numbers = [int(n) for n in re.findall(r"^(\d+)\. ", text, re.M)]
    assert numbers == list(range(1, 27)) + list(range(1, 9)), numbers
    snd = text.index("## Deviations from the SND article")
    assert text.index("\n21. **The policy network is CleanRL's variant") < snd
    assert "5. **Convolution padding" in text[snd:]


def test_no_benchmark_writes_a_readme():
    """The READMEs' results are written by hand and link the docs; benchmarks write docs/ pages only."""
    for path in glob.glob(os.path.join(ROOT, "benchmarks", "*.py")):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        assert "README.md" not in source and "README_cn.md" not in source, path


def test_the_method_lists_name_every_registered_module():
    """Where the docs list the ``--intrinsic`` choices by hand (both READMEs, usage.md's flag table, the
    module table of intrinsic_modules.md), every registered module is named: a new one cannot be missed."""
    from common.intrinsic import names

    usage = read(os.path.join("docs", "usage.md"))
    row = next(line for line in usage.splitlines() if line.startswith("| `--intrinsic "))
    listed = row.split("`")[1].removeprefix("--intrinsic ").replace("\\|", "|").split("|")
    assert sorted(listed) == sorted(names()), row
    for page in ("README.md", "README_cn.md", os.path.join("docs", "intrinsic_modules.md")):
        text = read(page)
        missing = [name for name in names() if f"`{name}`" not in text]
        assert not missing, f"{page} does not name {missing}"
