"""The CPU kernels' code stays readable: no function of cc/core/cpu longer than 100 lines, but
the micro-kernels (microkernels*), whose bodies are unrolled register tiles."""
import pathlib
import re

import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 100


def _code(text):
    """text with comments, string and character literals and preprocessor lines blanked, line
    breaks kept."""
    text = re.sub(r"(?m)^\s*#.*$", "", text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'", '""', text)


def long_functions(text, limit=MAX_LINES):
    """(first line, lines, head) of each function body in C++ `text` longer than `limit` lines:
    an outermost brace block (namespaces and classes aside) whose head has a parameter list,
    lambdas and nested blocks counted in their function."""
    found = []
    stack = []  # (kind, first line, head) of each open brace
    head, line = "", 1
    for ch in _code(text):
        if ch == "\n":
            line += 1
        if ch == "{":
            h = " ".join(head.split())
            in_function = any(kind == "function" for kind, _, _ in stack)
            is_function = (not in_function and ")" in h and not re.match(r"(namespace|struct|class|enum|union)\b", h)
                           and not re.search(r"\b(if|for|while|switch|catch)\s*\(", h) and not h.endswith("="))
            stack.append(("function" if is_function else "block", line, h))
            head = ""
        elif ch == "}":
            kind, first, h = stack.pop() if stack else ("block", line, "")
            if kind == "function" and line - first + 1 > limit:
                found.append((first, line - first + 1, h[-80:]))
            head = ""
        elif ch == ";":
            head = ""
        else:
            head += ch
    return found


class SourceShapeTest(tf.test.TestCase):

    def test_the_check_finds_a_long_function(self):
        body = "\n".join(f"  x += {i};" for i in range(MAX_LINES))
        text = ("namespace a {\nstruct S { int f() const { return 1; } };\n"
                f"template <typename T>\nvoid Long(int x,\n          int y) {{\n{body}\n  auto l = [&] {{ return x; }};\n}}\n"
                "inline int Short(int x) { if (x) { return 1; } return 0; }\n}  // namespace a\n")
        found = long_functions(text)
        self.assertEqual(len(found), 1, found)
        self.assertEqual(found[0][1], MAX_LINES + 3)
        self.assertIn("Long(int x", found[0][2])
        self.assertEqual(long_functions(text, limit=MAX_LINES + 3), [])

    def test_no_long_function_in_the_cpu_kernels(self):
        files = sorted(p for p in (ROOT / "cc" / "core" / "cpu").iterdir()
                       if p.suffix in (".h", ".cc", ".inc") and not p.name.startswith("microkernels"))
        self.assertGreater(len(files), 10)
        long = [f"{p.relative_to(ROOT)}:{first}: {lines} lines ({head})"
                for p in files for first, lines, head in long_functions(p.read_text())]
        self.assertEqual(long, [], f"functions over {MAX_LINES} lines: split them")


if __name__ == "__main__":
    tf.test.main()
