"""The documentation holds: every relative link in README.md, docs/*.md and bench/RESULTS.md resolves
(a file or folder, and an #anchor to a heading by GitHub's slug rules), every command shown in
README.md and docs/ names a program, module or make target that exists and only flags that the
program defines, the Python examples compile and import names that exist (those that need no TFF
run), and the README stays short.

The programs' flags are read once, in one child process that imports each program module in turn
(absl's FLAGS are global, so a program's flags are removed before the next one is imported): what
`--helpfull` lists, without starting a program.
"""

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*DOCS, ROOT / "bench" / "RESULTS.md"]
README_MAX_LINES = 250

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`([^`]+)`")


def _without_code(text: str) -> str:
    """The Markdown text with fenced blocks and inline code spans blanked (links there are not links)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return INLINE_CODE.sub("``", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link syntax and backticks dropped, lower case, every character
    but letters, digits, '_', '-' and spaces removed, spaces made '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in _without_code(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_follows_github():
    assert slug("Table I at the paper's budget (nu = 3)") == "table-i-at-the-papers-budget-nu--3"
    assert slug("Denser clients (--rem_size=512), one seed") == "denser-clients---rem_size512-one-seed"
    assert slug("The TFF worker: no orphans") == "the-tff-worker-no-orphans"
    assert slug("`main.md`, the ± column") == "mainmd-the--column"


def link_problems(path: Path) -> list[str]:
    """The relative links of a Markdown file that lead nowhere."""
    broken = []
    for target in LINK.findall(_without_code(path.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    broken = link_problems(path)
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n## Twice\n## Twice\n[a](#twice-1) [b](#nowhere) [c](missing.md) `[d](missing.md)`\n"
        "```sh\n# not a heading\n```\n[e](#not-a-heading) [f](https://example.org/x)\n"
    )
    assert link_problems(page) == [
        "#nowhere: no heading with anchor #nowhere",
        "missing.md: no such file",
        "#not-a-heading: no heading with anchor #not-a-heading",
    ]


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


# -- commands -----------------------------------------------------------------------------------

_FLAGS_SCRIPT = r"""
import importlib, json, pkgutil, sys
from absl import app, flags, logging
import tensorflow_federated
import programs

FLAGS = flags.FLAGS
baseline = set(FLAGS)  # absl's own (--helpfull, --verbosity, ...), which every program accepts
out = {"_absl": sorted(baseline), "_bool": sorted(n for n in baseline if FLAGS[n].boolean)}
for info in pkgutil.iter_modules(programs.__path__):
    for name in set(FLAGS) - baseline:
        delattr(FLAGS, name)
    for module in [m for m in sys.modules if m.startswith("programs.")]:
        del sys.modules[module]
    importlib.import_module("programs." + info.name)
    own = set(FLAGS) - baseline
    out[info.name] = {"flags": sorted(own), "bool": sorted(n for n in own if FLAGS[n].boolean)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def program_flags():
    """{program: {"flags": [...], "bool": [...]}} for every module of programs/, plus absl's own."""
    proc = subprocess.run(
        [sys.executable, "-c", _FLAGS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))


def shown_commands(path: Path) -> list[str]:
    """The shell commands a Markdown file shows: lines of its shell code blocks (continuations
    joined) and inline code spans that start like a command."""
    text = path.read_text()
    commands = []
    for lang, body in FENCE.findall(text):
        if lang in ("sh", "bash", "shell", "console"):
            commands += [line.strip() for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    prose = FENCE.sub("", text)
    commands += [" ".join(span.split()) for span in INLINE_CODE.findall(prose)]
    starts = re.compile(r"^([A-Z_]+=\S+\s+)*(make\b|\S*python3?(\.\d+)?\s+-m\s|bash\s)")
    return [c for c in commands if starts.match(c)]


def _tokens(command: str) -> list[str]:
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in a shortened inline command
        tokens = command.split()
    while tokens and re.match(r"^[A-Z_]+=", tokens[0]):  # VAR=value before the command
        tokens.pop(0)
    return tokens


def _flag_names(tokens: list[str]) -> list[str]:
    return [t[2:].split("=", 1)[0] for t in tokens if re.match(r"^--[A-Za-z_]\w*", t)]


def _unknown_flags(names, program, program_flags) -> list[str]:
    known = set(program_flags[program]["flags"]) | set(program_flags["_absl"])
    bools = set(program_flags[program]["bool"]) | set(program_flags["_bool"])
    return [n for n in names if n not in known and not (n.startswith("no") and n[2:] in bools)]


def command_problems(command: str, program_flags, targets) -> list[str]:
    tokens = _tokens(command)
    if not tokens:
        return []
    if tokens[0] == "make":
        problems = []
        for token in tokens[1:]:
            if "=" in token:  # make VAR=value: DEMO_ARGS are the demo's flags
                var, _, value = token.partition("=")
                if var == "DEMO_ARGS":
                    problems += [f"--{n}: not a flag of programs.demo" for n in _unknown_flags(_flag_names(value.split()), "demo", program_flags)]
            elif not token.startswith("-") and token not in targets:
                problems.append(f"make {token}: no such target in the Makefile")
        return problems
    if tokens[0] == "bash":
        return [] if (ROOT / tokens[1]).exists() else [f"{tokens[1]}: no such file"]
    module = tokens[2]
    if module.startswith("programs."):
        program = module.split(".", 1)[1]
        if program.isupper():  # programs.NAME: a placeholder
            return []
        if program not in program_flags:
            return [f"{module}: no such program"]
        return [f"--{n}: not a flag of {module}" for n in _unknown_flags(_flag_names(tokens[3:]), program, program_flags)]
    parts = module.split(".")
    if not ((ROOT.joinpath(*parts).with_suffix(".py")).exists() or (ROOT.joinpath(*parts) / "__init__.py").exists()):
        return [f"{module}: no such module"]
    return []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shown_command_exists_with_its_flags(path, program_flags):
    targets = _make_targets()
    problems = [f"`{c}`: {p}" for c in shown_commands(path) for p in command_problems(c, program_flags, targets)]
    assert not problems, "\n".join(problems)


def test_the_command_check_can_fail(program_flags):
    targets = _make_targets()
    assert command_problems("python -m programs.privacy_front --output_dir=x --noise_multiplier=0.1", program_flags, targets) == [
        "--noise_multiplier: not a flag of programs.privacy_front"
    ]
    assert command_problems("python -m programs.no_such --x=1", program_flags, targets) == ["programs.no_such: no such program"]
    assert command_problems("make deploy", program_flags, targets) == ["make deploy: no such target in the Makefile"]
    assert command_problems("python -m programs.privacy_front --noreport --out=x", program_flags, targets) == ["--out: not a flag of programs.privacy_front"]
    assert command_problems("python -m programs.remnet_tables --out=x --nooverwrite", program_flags, targets) == []  # the alias
    assert shown_commands(README)  # the README shows commands at all


# -- Python examples ------------------------------------------------------------------------------


def python_blocks(path: Path) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang == "python"]


def _missing_imports(source: str) -> list[str]:
    """`from tff_radiomap... import name` whose name the module neither defines nor imports, nor has
    as a submodule (read from the source files, without importing TensorFlow)."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tff_radiomap")):
            continue
        base = ROOT.joinpath(*node.module.split("."))
        module_file = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module_file.exists():
            missing.append(node.module)
            continue
        defined = module_file.read_text()
        for alias in node.names:
            if not ((base / alias.name).is_dir() or (base / f"{alias.name}.py").exists() or re.search(rf"\b{alias.name}\b", defined)):
                missing.append(f"{node.module}.{alias.name}")
    return missing


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_compile_and_import_what_exists(path):
    for source in python_blocks(path):
        compile(source, str(path), "exec")
        assert not _missing_imports(source), _missing_imports(source)


def test_python_examples_without_tensorflow_run():
    """The examples that need no TensorFlow (the accountant's) run here and print what they say;
    the TFF pipelines are run by hand (README: the Uniform Noise pipeline and the keyed upload)."""
    light = [b for p in DOCS for b in python_blocks(p) if not re.search(r"import (tensorflow|tensorflow_federated)\b|aggregators|runtime", b)]
    assert light, "the README's accountant example is no longer found"
    for source in light:
        proc = subprocess.run([sys.executable, "-c", source], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for expected in re.findall(r"print\(.*\)\s+#\s*([-+0-9.e]+)", source):
            assert expected in proc.stdout, (expected, proc.stdout)
