#!/usr/bin/env python3
"""Test documents: every path that the documents and the source comments name exists.

Usage: check_doc_paths.py [--list] REPO_ROOT

What it reads:
  - Markdown, all of its text: README.md, docs/*.md, bench/*.md, bench/results/*.md and any
    other *.md outside ignored folders, and examples/**/README*;
  - comments: // and /* */ in *.h, *.cpp, *.cu, *.cuh; # in CMakeLists.txt, *.cmake, *.sh,
    *.sbatch and the scripts without an extension that start with a sh or bash #! line (.ci/run,
    scripts/pre-commit); # comments and docstrings in *.py.
  The walk skips .git, what the top-level .gitignore ignores (build*/, runs/, ...), __pycache__
  and test/parity/fixtures (generated data).

What it checks, in the text read:
  - Repository paths: a token whose first component is an entry of the repository's top level
    (listed at run time, less .git and what .gitignore ignores), with at least one slash, that
    ends in a file extension or a slash: `models/train/trainer.h`, `docs/design.md`,
    `kernels/cpu/`. It must exist relative to REPO_ROOT. A token that starts after a / or a
    word character (build/default/tools/..., /usr/include/..., ${DIR}/scripts/...) is not one.
  - Partial paths: a token with a slash whose first component is not a top-level entry and
    that ends in a source extension (.h .cpp .cu .cuh .md .py .sh), such as `train/trainer.h`
    or `../../core/tensor.h`: it must exist relative to the naming file's folder, or be the tail
    of a file's path in the repository.
  - Bare names: a word with no slash that ends in a source extension, such as `timing.h` or
    `design.md`. It passes when a file of that name is in the naming file's folder or anywhere
    else in the repository (ambiguity is not an error: the reader finds the file), or when the
    sources #include it with angle brackets (a system or third-party header: <nccl.h>).
  - Outside the repository: a partial path whose first component is a module that the
    repository's Python imports, and the bare names after it on its line
    ("torch/optim/sgd.py, adam.py"), are another project's files and are not checked; nor are
    the few names in EXTERNAL below, each with its reason.
  - Markdown links [text](target) and reference definitions [id]: target: the target, less
    its #anchor, relative to the .md file's folder. URLs (http:, mailto:, ...) and anchors
    within the page are not checked.
  - "a.h/.cpp" stands for a.h and a.cpp.
  Tokens with a glob or placeholder character (* < > { } $ % ~ @) are examples, not paths, and
  are skipped, as are names whose stem, or its part before the first _, is a placeholder word:
  a single letter or foo, bar, baz, NAME (X.h, X_bodies.h, kernels/foo.cpp, a.cpp). So are the
  names that programs write (predictions.csv, ckpt/...): their first component is not a
  top-level entry and their extension is not a source one.

Prints "FILE:LINE: names PATH, which does not exist" for each missing path and exits 1, or the
number of paths checked and exits 0. --list prints every path checked and what it resolved to.
"""
import fnmatch
import io
import os
import re
import sys
import tokenize

SOURCE_EXTS = (".h", ".cpp", ".cu", ".cuh", ".md", ".py", ".sh")
CPP_EXTS = (".h", ".cpp", ".cu", ".cuh")
PLACEHOLDER = set("*<>{}$%~@")
SKIP_DIRS = ("test/parity/fixtures",)

# A run of characters that can make up a path or a placeholder in one.
WORD = re.compile(r"[\w.\-/+*<>{}$%~@]+")
HAS_EXT = re.compile(r"[\w+\-]+(\.[\w+\-]+)*\.[A-Za-z0-9]+")
MD_LINK = re.compile(r"\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>", re.M)
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
PY_IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.M)
PLACEHOLDER_WORDS = {"foo", "bar", "baz", "NAME"}
# Names of files outside the repository that no rule above recognises, with the reason.
EXTERNAL = {
    "llama.cpp": "a project's name, not a file (docs/design.md)",
    "openblas_config.h": "a header of Debian's libopenblas-openmp-dev (scripts/gpu_deps.sh)",
    "nifti1.h": "a header of Debian's libnifti2-dev (scripts/gpu_deps.sh)",
    "nifti2.h": "a header of Debian's libnifti2-dev (scripts/gpu_deps.sh)",
}


def placeholder(name):
    """Whether a path component is an example's name: X.h, X_bodies.h, foo.cpp, NAME.cpp, a.h."""
    word = name.split(".", 1)[0].split("_", 1)[0]
    return len(word) == 1 or word in PLACEHOLDER_WORDS


def ignored_patterns(root):
    """The top-level .gitignore's patterns, as (anchored to the top level, pattern)."""
    pats = []
    try:
        with open(os.path.join(root, ".gitignore")) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and not line.startswith("!"):
                    pats.append((line.startswith("/"), line.strip("/")))
    except OSError:
        pass
    return pats


def is_ignored(name, top_level, pats):
    return any(fnmatch.fnmatch(name, p) for anchored, p in pats if top_level or not anchored)


def walk(root, pats):
    """The repository's files (relative paths, / separated), less .git and what is ignored."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel = "" if rel == "." else rel
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and not is_ignored(d, rel == "", pats)
                             and (rel + "/" + d).lstrip("/") not in SKIP_DIRS)
        files += [(rel + "/" + f).lstrip("/") for f in sorted(filenames)
                  if f != ".git" and not is_ignored(f, rel == "", pats)]
    return files


def shebang_shell(path):
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and re.search(rb"\b(ba)?sh\b", first) is not None


def kind_of(rel, root):
    """How to read a file: 'md', 'cpp', 'py', 'hash' (# comments), 'cmake', or None."""
    name = rel.rsplit("/", 1)[-1]
    if name.endswith(".md") or (rel.startswith("examples/") and name.startswith("README")):
        return "md"
    if name.endswith(CPP_EXTS):
        return "cpp"
    if name.endswith(".py"):
        return "py"
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "cmake"
    if name.endswith((".sh", ".sbatch")) or ("." not in name and shebang_shell(os.path.join(root, rel))):
        return "hash"
    return None


def cpp_comments(text):
    """(line, text) of each // and /* */ comment, line by line, past strings and characters."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, piece in enumerate(text[i + 2:j].split("\n")):
                out.append((line + k, piece))
            line += text.count("\n", i, j)
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")
                                                             and text[i - 1] not in "uUL8"):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c == "'" and not (i and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def hash_comments(text, cmake):
    """(line, text) of each # comment in a shell or CMake file; CMake's #[[ ]] too."""
    out, quote, heredoc, block = [], None, None, None
    for ln, row in enumerate(text.split("\n"), 1):
        if heredoc:
            if row.strip() == heredoc:
                heredoc = None
            continue
        if block:
            j = row.find(block)
            out.append((ln, row if j < 0 else row[:j]))
            if j < 0:
                continue
            row, block = " " * (j + len(block)) + row[j + len(block):], None
        i = 0
        while i < len(row):
            c = row[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif c == "#" and (cmake or i == 0 or row[i - 1] in " \t;|&("):
                m = re.match(r"#\[(=*)\[", row[i:]) if cmake else None
                if m:
                    close = "]" + m.group(1) + "]"
                    j = row.find(close, i + m.end())
                    if j < 0:
                        out.append((ln, row[i + m.end():]))
                        block = close
                        break
                    out.append((ln, row[i + m.end():j]))
                    i = j + len(close)
                    continue
                out.append((ln, row[i + 1:]))
                break
            elif c == '"' or (c == "'" and not cmake):
                quote = c
            elif not cmake and c == "<":
                m = HEREDOC.match(row, i)
                if m:
                    heredoc = m.group(2)
                    i = m.end()
                    continue
            i += 1
        if not cmake:
            quote = None  # a shell quote across lines is rare; a # in one is rarer still
    return out


def py_comments(text):
    """(line, text) of each # comment and each docstring (a string that is a statement)."""
    out, prev = [], tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string[1:]))
            elif tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                for k, piece in enumerate(tok.string.split("\n")):
                    out.append((tok.start[0] + k, piece))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                prev = tok.type
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


class Checker:
    def __init__(self, root):
        self.root = root
        pats = ignored_patterns(root)
        self.top = {e for e in os.listdir(root) if e != ".git" and not is_ignored(e, True, pats)}
        self.files = walk(root, pats)
        self.names = {f.rsplit("/", 1)[-1] for f in self.files}
        self.external, self.modules = set(), set()
        for f in self.files:
            if f.endswith(CPP_EXTS):
                for inc in INCLUDE.findall(self.read(f)):
                    if not os.path.exists(os.path.join(root, inc)):
                        self.external |= {inc, inc.rsplit("/", 1)[-1]}
            elif f.endswith(".py"):
                self.modules |= set(PY_IMPORT.findall(self.read(f)))
        self.modules -= self.top
        self.checked = []  # (file, line, token, resolved or None)

    def read(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as f:
            return f.read()

    def exists(self, rel):
        rel = os.path.normpath(rel)
        return not rel.startswith("..") and os.path.exists(os.path.join(self.root, rel))

    def record(self, where, line, token, resolved):
        self.checked.append((where, line, token, resolved))

    def link(self, where, line, target):
        if URL.match(target) or target.startswith("#"):
            return
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not path or PLACEHOLDER & set(path):
            return
        rel = path.lstrip("/") if path.startswith("/") else os.path.join(os.path.dirname(where), path)
        rel = os.path.normpath(rel).replace(os.sep, "/")
        self.record(where, line, target, rel if self.exists(rel) else None)

    def resolve(self, where, token):
        """What a path-like token names, or None when that does not exist; False when it is no path."""
        here = os.path.dirname(where)
        comps = token.split("/")
        if token in EXTERNAL:
            return f"(outside the repository: {EXTERNAL[token]}) {token}"
        if "/" not in token:
            if not token.endswith(SOURCE_EXTS) or not HAS_EXT.fullmatch(token) or placeholder(token):
                return False
            if self.exists(os.path.join(here, token)):
                return os.path.join(here, token).replace(os.sep, "/")
            if token in self.names:
                return "(found by name) " + token
            return "(an external header) " + token if token in self.external else None
        if token.startswith("/"):
            return False
        if any(placeholder(c) for c in comps):
            return False
        if comps[0] in self.top:
            if not (token.endswith("/") or HAS_EXT.fullmatch(comps[-1])):
                return False
            return token if self.exists(token) else None
        if not token.endswith(SOURCE_EXTS) or not HAS_EXT.fullmatch(comps[-1]):
            return False
        if token in self.external:
            return "(an external header) " + token
        if comps[0] in self.modules:
            return "(outside the repository) " + token
        rel = os.path.normpath(os.path.join(here, token)).replace(os.sep, "/")
        if self.exists(rel):
            return rel
        if comps[0] in (".", ".."):
            return None
        tails = [f for f in self.files if f.endswith("/" + token)]
        return tails[0] if tails else None

    def words(self, where, line, text):
        outside = False  # a path into another project came earlier on this line
        for m in WORD.finditer(text):
            start, token = m.start(), m.group().rstrip(".,")
            if start and (text[start - 1].isalnum() or text[start - 1] in "_\\:"):
                continue
            if token.startswith("<") and token.endswith(">"):
                token = token[1:-1]
            if token.startswith("-") or PLACEHOLDER & set(token):
                continue
            comps = token.split("/")
            if len(comps) > 1 and re.fullmatch(r"\.[A-Za-z0-9]+", comps[-1]) and HAS_EXT.fullmatch(comps[-2]):
                stem = "/".join(comps[:-1])
                alternatives = [stem, stem.rsplit(".", 1)[0] + comps[-1]]  # a.h/.cpp: a.h and a.cpp
            else:
                alternatives = [token]
            for t in alternatives:
                resolved = self.resolve(where, t)
                if resolved is None and outside and "/" not in t:
                    resolved = "(listed after a path outside the repository) " + t
                if resolved is not False:
                    self.record(where, line, t, resolved)
                    outside = outside or (resolved or "").startswith("(outside the repository) ")

    def check_file(self, rel, kind):
        text = self.read(rel)
        if kind == "md":
            for ln, row in enumerate(text.split("\n"), 1):
                for m in MD_LINK.finditer(row):
                    self.link(rel, ln, m.group(1))
                    row = row[:m.start(1)] + " " * (m.end(1) - m.start(1)) + row[m.end(1):]
                m = MD_REF.match(row)
                if m:
                    self.link(rel, ln, m.group(1))
                    row = row[:m.start(1)] + " " * (m.end(1) - m.start(1)) + row[m.end(1):]
                self.words(rel, ln, row)
            return
        pieces = {"cpp": cpp_comments, "py": py_comments}.get(kind)
        pieces = pieces(text) if pieces else hash_comments(text, kind == "cmake")
        for ln, piece in pieces:
            self.words(rel, ln, piece)

    def run(self):
        for rel in self.files:
            kind = kind_of(rel, self.root)
            if kind:
                self.check_file(rel, kind)


def main():
    args = sys.argv[1:]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    checker = Checker(os.path.abspath(args[0]))
    checker.run()
    missing = 0
    for where, line, token, resolved in checker.checked:
        if listing:
            print(f"{where}:{line}: {token} -> {resolved or 'MISSING'}")
        elif resolved is None:
            print(f"{where}:{line}: names {token}, which does not exist")
        missing += resolved is None
    files = len({c[0] for c in checker.checked})
    if missing:
        print(f"{missing} of {len(checker.checked)} paths named do not exist")
        return 1
    print(f"documents: {len(checker.checked)} paths named in {files} files, all exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
