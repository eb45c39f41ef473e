#!/usr/bin/env python3
"""The project's structure rules, checked from the source text alone (no cargo, no build):

1. No import circle among the files of any crate: file A depends on file B when A names an
   item of B's module (`use crate::…`, an inline `crate::…` path, `super::…`, or a child
   module it declares, `child::…`). A circle means no file of it can be read, tested or
   changed without all the others; the files' order from the top down is what
   docs/architecture.md describes.
2. No function over MAX_FN_LINES lines in the crates that hold the server's logic (mds,
   journal, client): past that a function is doing several things, each of which deserves
   a name.

Test code is left out of both (files named tests.rs or *_tests.rs, and everything from a
file's `#[cfg(test)]` module on). Prints every finding and exits 1 if there is one.

    scripts/check-structure.py            # the whole workspace
    scripts/check-structure.py --list     # also each crate's count of files and imports
    scripts/check-structure.py --self-test  # the checker on a made-up crate
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["mds", "journal", "client", "proto", "cluster", "mount", "loadgen", "reply", "testkit"]
LONG_FN_CRATES = ["mds", "journal", "client"]
MAX_FN_LINES = 120


def is_test_file(path: Path) -> bool:
    return path.name == "tests.rs" or path.name.endswith("_tests.rs") or "tests" in path.parts


def strip_code(text: str) -> str:
    """The text with comments, string and char literals blanked (newlines kept), and cut
    where the file's test module begins."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    cut = re.search(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code)
    return code[: cut.start()] if cut else code


class Crate:
    def __init__(self, src: Path):
        self.src = src
        # A crate's own files: not those of a binary under src/bin/NAME/ (a crate of its own,
        # checked as one), nor its tests.
        self.files = sorted(
            p for p in src.rglob("*.rs")
            if not is_test_file(p.relative_to(src))
            and not (p.relative_to(src).parts[0] == "bin" and len(p.relative_to(src).parts) > 2)
        )
        self.code = {p: strip_code(p.read_text()) for p in self.files}

    def module_of(self, path: Path) -> list:
        rel = path.relative_to(self.src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            return None
        return parts

    def file_of(self, module: list):
        """The file of the longest prefix of `module` that is a module of this crate."""
        for k in range(len(module), -1, -1):
            base = self.src.joinpath(*module[:k]) if k else self.src
            for cand in ([base.with_suffix(".rs"), base / "mod.rs"] if k else [self.src / "lib.rs", self.src / "main.rs"]):
                if cand in self.code:
                    return cand
        return None

    def edges(self):
        graph = {p: set() for p in self.files}
        for path, code in self.code.items():
            me = self.module_of(path)
            if me is None:
                continue
            children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M))
            targets = []
            for use in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
                if use.group(1):
                    continue  # a re-export: followed where it is used (`reexports`)
                for p in expand_use(use.group(2).replace("\n", " ")):
                    # `use child::X` in the file that declares `mod child;`.
                    targets.append(["self"] + p if p and p[0] in children else p)
            # Re-exports are not uses (see `reexports`), and `use` lines were read above.
            code = re.sub(r"\b(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", " ", code)
            for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
                targets.append(m.group(1).split("::"))
            for m in re.finditer(r"(?<![\w:])(\w+)::", code):
                if m.group(1) in children:
                    targets.append(["self", m.group(1)])
            for t in targets:
                module = resolve(me, t)
                if module is None:
                    continue
                f = self.follow(module)
                if f is not None and f != path:
                    graph[path].add(f)
        return graph

    def reexports(self, path: Path) -> dict:
        """What `pub use` in `path` makes visible there: name → module path it came from."""
        me = self.module_of(path) or []
        found = {}
        for use in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", self.code[path]):
            for p in expand_use(use.group(1).replace("\n", " ")):
                if p and p[-1] != "*":
                    target = resolve(me, p)
                    if target is None and p[0] not in ("crate", "super", "self"):
                        target = me + p  # a child module's item: `pub use child::Item`
                    if target is not None:
                        found[p[-1]] = target
        return found

    def follow(self, module: list, depth: int = 0):
        """The file that defines what `module` names, through re-exports."""
        f = self.file_of(module)
        if f is None or depth > 8:
            return f
        where = self.module_of(f)
        if where is not None and len(module) > len(where):
            item = module[len(where)]
            again = self.reexports(f).get(item)
            if again is not None and again != module:
                return self.follow(again + module[len(where) + 1:], depth + 1) or f
        return f


def expand_use(tree: str):
    """`a::{b, c::{d, e}}` → [[a,b],[a,c,d],[a,c,e]] (glob and `self` kept as segments)."""
    tree = tree.strip()
    tree = re.sub(r"^pub(\([^)]*\))?\s+", "", tree)
    out = []

    def walk(prefix, s):
        s = s.strip()
        if not s:
            return
        i = s.find("{")
        if i < 0:
            path = [x.strip() for x in s.split(" as ")[0].split("::") if x.strip()]
            out.append(prefix + path)
            return
        head = [x for x in s[:i].split("::") if x.strip()]
        body = s[i + 1: s.rfind("}")]
        depth, start = 0, 0
        for j, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                walk(prefix + [h.strip() for h in head], body[start:j])
                start = j + 1
        walk(prefix + [h.strip() for h in head], body[start:])

    walk([], tree)
    return out


def resolve(me: list, path: list):
    """The module path (from the crate root) a `use` or inline path names, or None for
    another crate's."""
    path = [p for p in path if p != "self" or path.index(p) == 0]
    if not path:
        return None
    # The module a file's `super` means: a mod.rs is its folder's module.
    here = list(me)
    if path[0] == "crate":
        return [p for p in path[1:] if p not in ("self", "*")]
    if path[0] == "self":
        return here + [p for p in path[1:] if p not in ("self", "*")]
    if path[0] == "super":
        k = 0
        while k < len(path) and path[k] == "super":
            k += 1
        if k > len(here):
            return None
        return here[: len(here) - k] + [p for p in path[k:] if p not in ("self", "*")]
    return None


def circles(graph):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def long_functions(path: Path, code: str):
    """(name, first line, lines) of every function body longer than MAX_FN_LINES."""
    found = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        j = m.end()
        depth = 0
        # The body's `{`: the first one outside the signature's parentheses and generics.
        while j < len(code):
            ch = code[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        start, depth = j, 0
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        first = code.count("\n", 0, m.start()) + 1
        lines = code.count("\n", start, j) + 1
        if lines > MAX_FN_LINES:
            found.append((m.group(1), first, lines))
    return found


def self_test():
    """The checker on a made-up crate: it must find the circle and the long function that are
    there, and nothing in the same crate once they are gone."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        (src / "a").mkdir(parents=True)
        (src / "lib.rs").write_text("mod a;\nmod b;\npub use a::Thing;\n")
        (src / "a" / "mod.rs").write_text("mod child;\nuse child::Leaf;\npub struct Thing;\n")
        (src / "a" / "child.rs").write_text("pub struct Leaf;\n")
        body = "\n".join("    let _ = 1;" for _ in range(MAX_FN_LINES + 5))
        (src / "b.rs").write_text(
            "// crate::a::Thing in a comment is no import\n"
            "fn long() {\n" + body + "\n}\n"
            "#[cfg(test)]\nmod tests {\n    use crate::a::Thing;\n}\n"
        )
        crate = Crate(src)
        assert circles(crate.edges()) == [], "no circle yet"
        assert [f for f, _, _ in long_functions(src / "b.rs", crate.code[src / "b.rs"])] == ["long"]
        # The child takes something of its parent, which uses the child: a circle.
        (src / "a" / "child.rs").write_text("use super::Thing;\npub struct Leaf(Thing);\n")
        found = circles(Crate(src).edges())
        assert [[p.name for p in c] for c in found] == [["child.rs", "mod.rs"]], found
        # A re-export is followed to where the item is defined: b -> a/mod.rs, not lib.rs.
        (src / "b.rs").write_text("use crate::Thing;\n")
        graph = Crate(src).edges()
        assert graph[src / "b.rs"] == {src / "a" / "mod.rs"}, graph[src / "b.rs"]
    print("check-structure: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    listing = "--list" in sys.argv
    problems = []
    roots = []
    for name in CRATES:
        src = ROOT / name / "src"
        if src.is_dir():
            roots.append((name, src))
            # A binary with modules of its own (src/bin/NAME/main.rs) is a crate of its own.
            bins = src / "bin"
            if bins.is_dir():
                roots += [(f"{name}/bin/{b.name}", b) for b in sorted(bins.iterdir()) if (b / "main.rs").exists()]
    for name, src in roots:
        crate = Crate(src)
        graph = crate.edges()
        for comp in circles(graph):
            rel = [str(p.relative_to(ROOT)) for p in comp]
            ties = []
            for a in comp:
                for b in sorted(graph[a]):
                    if b in comp:
                        ties.append(f"    {a.relative_to(ROOT)} -> {b.relative_to(ROOT)}")
            problems.append(f"import circle in {name}: {len(comp)} files: {', '.join(rel)}\n" + "\n".join(ties))
        if listing:
            print(f"{name}: {len(crate.files)} files, {sum(len(v) for v in graph.values())} edges")
        if name.split("/")[0] in LONG_FN_CRATES:
            for path, code in crate.code.items():
                for fn, line, lines in long_functions(path, code):
                    problems.append(f"{path.relative_to(ROOT)}:{line}: fn {fn} is {lines} lines (most: {MAX_FN_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"check-structure: {len(problems)} finding(s)", file=sys.stderr)
        sys.exit(1)
    print("check-structure: no import circle, no function over "
          f"{MAX_FN_LINES} lines in {', '.join(LONG_FN_CRATES)}")


if __name__ == "__main__":
    main()
