#!/usr/bin/env bash
# scripts/check_structure.sh [ROOT]: the structural rules of the tree, checked
# on the checkout at ROOT (by default the one this script is in):
#   - README.md is at most 400 lines;
#   - docs/ has its page per topic (concepts, each target, formats,
#     authentication, operations with its runbook, privileges,
#     configuration, guarantees, performance);
#   - no include cycle among the modules of src/ (a module is a .c and .h
#     of one name; X depends on Y when X.c or X.h includes Y.h);
#   - no function of src/relay/*.c is longer than 100 lines, counted from
#     its opening brace to its closing one, both at column 0;
#   - no folder is named like one the common .gitignore templates leave
#     out (target/, build/, bin/, node_modules/, .idea/, tmp/, ...);
#   - the user's documentation (README.md, docs/*.md) names no commit and
#     no issue ("issue 37", "#37");
#   - DESIGN.md's file map lists every file of src/ (a .c stands for the
#     .h of its name beside it) and nothing that does not exist;
#   - the packages say the version outbox.control does: META.json is valid
#     JSON whose version and provided outbox version are default_version
#     as semver (1.7 -> 1.7.0) and whose provided file is that version's
#     install script, and debian/changelog's newest entry is that version
#     with a Debian revision (1.7-1).
# The files are those git knows (tracked, and untracked but not ignored, as
# scripts/copy_tree.sh copies); outside git, every file but build products.
# Prints every violation, then "check_structure: N problems" and exits 1,
# or "check_structure: ok".  Run by scripts/test.sh's unit tier.
set -euo pipefail

ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}

exec python3 - "$ROOT" <<'PYTHON'
import json
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1])
os.chdir(root)

README_MAX_LINES = 400
RELAY_FUNCTION_MAX_LINES = 100
DOCS_PAGES = [
    "concepts", "webhooks", "kafka", "nats", "rabbitmq", "formats",
    "authentication", "operations", "privileges", "configuration",
    "guarantees", "performance",
]
# Folder names the common ignore templates (Maven, Gradle, Rust, Node,
# Python, Go, Visual Studio, JetBrains, VS Code, C/C++ builds) leave out.
IGNORED_FOLDERS = {
    "target", "build", "bin", "obj", "out", "dist", "node_modules", ".idea",
    ".vscode", "vendor", "tmp", "temp", "log", "logs", "coverage",
    "__pycache__", ".gradle", ".venv", "venv", ".pytest_cache",
}

problems = []


def problem(kind, message):
    problems.append((kind, message))


def known_files():
    """The repository's files, relative to root, sorted."""
    try:
        out = subprocess.run(
            ["git", "-c", "safe.directory=" + root, "ls-files", "-z", "-co",
             "--exclude-standard"],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
        names = [f for f in out.decode("utf-8", "replace").split("\0") if f]
        return sorted(f for f in names if os.path.isfile(f))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk("."):
            dirs[:] = [x for x in dirs if x != ".git"]
            for f in files:
                if not f.endswith((".o", ".so", ".bc")):
                    found.append(os.path.relpath(os.path.join(d, f)))
        return sorted(found)


FILES = known_files()
FILE_SET = set(FILES)


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


# README.md's length
if "README.md" not in FILE_SET:
    problem("readme", "README.md is missing")
else:
    n = len(read_lines("README.md")) - 1
    if n > README_MAX_LINES:
        problem("readme", "README.md is %d lines, more than %d: move detail to docs/"
                % (n, README_MAX_LINES))

# docs/, a page per topic
for page in DOCS_PAGES:
    path = "docs/%s.md" % page
    if path not in FILE_SET:
        problem("docs", "%s is missing" % path)
if "docs/operations.md" in FILE_SET and not any(
        re.match(r"#+\s.*runbook", l, re.I) for l in read_lines("docs/operations.md")):
    problem("docs", "docs/operations.md has no Runbook section")

# include cycles among the modules of src/
SOURCES = [f for f in FILES if f.startswith("src/") and f.endswith((".c", ".h"))]


def module_of(path):
    return os.path.splitext(os.path.relpath(path, "src"))[0]


deps = {}                       # module -> {module it includes: first include line}
for path in SOURCES:
    mod = module_of(path)
    deps.setdefault(mod, {})
    for lineno, line in enumerate(read_lines(path), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        # As the compiler looks: beside the including file, then in src/.
        for cand in (os.path.join(os.path.dirname(path), m.group(1)),
                     os.path.join("src", m.group(1))):
            cand = os.path.normpath(cand)
            if cand in FILE_SET:
                target = module_of(cand)
                if target != mod:
                    deps[mod].setdefault(target, "%s:%d" % (path, lineno))
                break


def reachable(start):
    seen = set()
    todo = [start]
    while todo:
        for nxt in deps.get(todo.pop(), {}):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


reach = {m: reachable(m) for m in deps}
done = set()
for mod in sorted(deps):
    if mod in done or mod not in reach[mod]:
        continue
    cycle = sorted(m for m in deps if m in reach[mod] and mod in reach[m])
    done.update(cycle)
    edges = ["%s -> %s (%s)" % (a, b, deps[a][b])
             for a in cycle for b in sorted(deps[a]) if b in cycle]
    problem("cycle", "modules that include one another: %s; their includes: %s"
            % (", ".join(cycle), "; ".join(edges)))

# no long function in the relay
for path in SOURCES:
    if not re.match(r"src/relay/[^/]+\.c$", path):
        continue
    name = None
    opened = None
    previous = ""
    for lineno, line in enumerate(read_lines(path), 1):
        m = re.match(r"([A-Za-z_]\w*)\s*\(", line)
        if m and not line.rstrip().endswith(";"):
            name = m.group(1)
        if line.startswith("{") and opened is None:
            if previous.rstrip().endswith(")") and name is not None:
                opened = (lineno, name)
        elif line.startswith("}") and opened is not None:
            length = lineno - opened[0] + 1
            if length > RELAY_FUNCTION_MAX_LINES:
                problem("long function", "%s:%d: %s() is %d lines, more than %d"
                        % (path, opened[0], opened[1], length,
                           RELAY_FUNCTION_MAX_LINES))
            opened = None
            name = None
        if line.strip():
            previous = line

# folders the ignore templates leave out
folders = set()
for f in FILES:
    parts = f.split("/")[:-1]
    for i in range(len(parts)):
        folders.add("/".join(parts[:i + 1]))
for folder in sorted(folders):
    if folder.split("/")[-1].lower() in IGNORED_FOLDERS:
        problem("folder", "%s/ is a name common .gitignore templates ignore: a file "
                "added there may be left out of commits; rename it" % folder)

# no commits or issues in the user's documentation
HEX = re.compile(r"(?<![0-9A-Za-z_-])[0-9a-fA-F]{7,40}(?![0-9A-Za-z_-])")
COMMIT_WORD = re.compile(r"\b(commit(s|ted)?|revision|sha)\b", re.I)
ISSUE = re.compile(r"\bissue\s+#?\d+\b|\b(issues|pull request|PR|bug)\s+#\d+\b"
                   r"|(?<![\w&/#])#\d+\b(?!-)", re.I)
USER_DOCS = [f for f in FILES if f == "README.md" or re.match(r"docs/[^/]+\.md$", f)]
for path in USER_DOCS:
    fenced = False
    for lineno, line in enumerate(read_lines(path), 1):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = re.sub(r"`[^`]*`", " ", line)
        for m in HEX.finditer(line):
            tok = m.group(0)
            if not (re.search(r"[0-9]", tok) and re.search(r"[a-fA-F]", tok)):
                continue
            if tok in prose or COMMIT_WORD.search(line):
                problem("user docs", "%s:%d: names what looks like a commit (%s)"
                        % (path, lineno, tok))
        for m in ISSUE.finditer(prose):
            problem("user docs", "%s:%d: names an issue (%s)"
                    % (path, lineno, m.group(0)))

# DESIGN.md's file map
if "DESIGN.md" not in FILE_SET:
    problem("map", "DESIGN.md is missing")
else:
    in_map = False
    mapped = set()
    for lineno, line in enumerate(read_lines("DESIGN.md"), 1):
        if line.startswith("## "):
            in_map = line.strip() == "## File map"
            continue
        if not in_map or not line.startswith("|"):
            continue
        cells = line.split("|")
        if len(cells) < 3:
            continue
        folder = ""
        for token in re.findall(r"`([^`]+)`", cells[1]):
            path = token if "/" in token.rstrip("/") or token.endswith("/") \
                else os.path.join(folder, token)
            folder = path if path.endswith("/") else os.path.dirname(path)
            mapped.add(path)
            exists = (any(f.startswith(path) for f in FILES) if path.endswith("/")
                      else path in FILE_SET)
            if not exists:
                problem("map", "DESIGN.md:%d: the file map lists %s, which does not exist"
                        % (lineno, path))
    if not mapped:
        problem("map", "DESIGN.md has no \"## File map\" table")
    for f in SOURCES:
        beside = f[:-2] + ".c" if f.endswith(".h") else None
        if f in mapped or (beside in mapped) or \
                any(d.endswith("/") and f.startswith(d) for d in mapped):
            continue
        problem("map", "%s is not in DESIGN.md's file map" % f)

# the packages' versions against outbox.control's
def control_version():
    if "outbox.control" not in FILE_SET:
        problem("version", "outbox.control is missing")
        return None
    for line in read_lines("outbox.control"):
        m = re.match(r"default_version\s*=\s*'([^']*)'", line)
        if m:
            return m.group(1)
    problem("version", "outbox.control has no default_version")
    return None


version = control_version()
if version is not None:
    semver = version + ".0" if re.fullmatch(r"\d+\.\d+", version) else version
    if "META.json" not in FILE_SET:
        problem("version", "META.json is missing")
    else:
        try:
            with open("META.json", encoding="utf-8") as f:
                meta = json.load(f)
        except ValueError as e:
            meta = None
            problem("version", "META.json is not valid JSON: %s" % e)
        if meta is not None:
            provided = meta.get("provides", {}).get("outbox", {})
            for where, found in (("version", meta.get("version")),
                                 ("provides.outbox.version", provided.get("version"))):
                if found != semver:
                    problem("version", "META.json's %s is %r, outbox.control's "
                            "default_version %s makes it %s" % (where, found, version, semver))
            script = "outbox--%s.sql" % version
            if provided.get("file") != script or script not in FILE_SET:
                problem("version", "META.json's provides.outbox.file is %r, the install "
                        "script of %s is %s" % (provided.get("file"), version, script))
    if "debian/changelog" not in FILE_SET:
        problem("version", "debian/changelog is missing")
    else:
        m = re.match(r"\S+ \(([^)]*)\)", read_lines("debian/changelog")[0])
        packaged = m.group(1) if m else None
        if packaged is None or not re.fullmatch(re.escape(version) + r"-\d+", packaged):
            problem("version", "debian/changelog's newest entry is %r, not outbox.control's "
                    "default_version %s with a Debian revision (%s-1)"
                    % (packaged, version, version))

for kind, message in problems:
    print("check_structure: %s: %s" % (kind, message))
if problems:
    print("check_structure: %d problems" % len(problems))
    sys.exit(1)
print("check_structure: ok")
PYTHON
