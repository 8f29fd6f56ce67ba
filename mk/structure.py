#!/usr/bin/env python3
"""How big the host's shared pieces are: the measures issue 37 is judged by.

`make structure` prints them; run it before and after a restructuring and
compare. Every figure is computed from the sources under host/src, by
reading them as text (no compiler), so the counts are close, not exact:

- methods on `Runtime` (the front), on `Runs` and `Catalog` (what it owns
  most of), their `impl` blocks and the files they span;
- fields of the shared host state (`struct Host`) and the files that touch
  one of them (`host.field`);
- for five questions a newcomer asks, the files whose code (comments and
  strings left out) takes part in the answer, found by the names it uses:
  a proxy for the files a reader opens;
- public items of the embedder's API: the pages rustdoc writes for it
  (`make structure` runs `cargo doc` first; without its output, the
  `pub` items in the files of the modules public without the `internals`
  feature, a rougher count) and public modules;
- import cycles between files (`use crate::...`, `use super::...`): there
  must be none, so the script fails on one (`make test` runs it);
- tasks spawned with a bare `tokio::spawn` outside `task.rs`, which would
  lose their process's clock and seams in a simulation: there must be
  none (host/src/task.rs), so the script fails on one;
- the fixed `Duration` constants, each of which docs/ARCHITECTURE.md's
  "Fixed timings" must list (and nothing else), and the numeric constants
  named for a maximum, each of which its "Fixed limits" must list (and
  nothing the code lacks): the script fails otherwise.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "host" / "src"
ARCHITECTURE = ROOT.parent.parent / "docs" / "ARCHITECTURE.md"

# The five questions, each with the names whose definitions or uses answer it.
QUESTIONS = {
    "where a journal entry is written": r"\.append\(|fn append\b|keys\.entry\(|\.entry\(seq",
    "where a step's fuel comes from": r"(?i)\bfuel",
    "where a tenant's quota is enforced": r"(?i)quota|TenantPolicy",
    "where the lease is checked before an attempt": r"check_claim|confirm_start|\bClaim\b",
    "where an outgoing HTTP request is allowed or refused": r"(?i)allowlist|\begress::",
}


def sources():
    return sorted(p for p in ROOT.rglob("*.rs") if "scaffold" not in p.parts)


def strip_tests(text):
    """The file without its `#[cfg(test)] mod tests { ... }` (at the end, by convention)."""
    cut = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    return text[: cut.start()] if cut else text


def rel(path):
    return str(path.relative_to(ROOT))


def methods_of(files, type_name):
    methods, blocks, spanned = 0, 0, set()
    for path, text in files.items():
        for block in re.finditer(r"^impl " + type_name + r" \{\n(.*?)^\}", text, re.M | re.S):
            blocks += 1
            spanned.add(rel(path))
            methods += len(re.findall(r"^    (?:pub(?:\([a-z]+\))? )?(?:async )?fn ", block.group(1), re.M))
    return methods, blocks, spanned


def host_state(files):
    for path, text in files.items():
        found = re.search(r"^pub(?:\((?:crate|super)\))? struct Host \{\n(.*?)^\}", text, re.M | re.S)
        if found:
            fields = re.findall(r"^    (pub(?:\([a-z]+\))? )?([a-z_]+):", found.group(1), re.M)
            break
    else:
        return [], 0, {}
    names = [name for _, name in fields]
    public = sum(1 for vis, _ in fields if vis.strip() == "pub")
    touching = defaultdict(int)
    pattern = re.compile(r"\bhost\.(" + "|".join(names) + r")\b")
    for path, text in files.items():
        count = len(pattern.findall(text))
        if count:
            touching[rel(path)] += count
    return names, public, touching


def code_only(text):
    """The file's code: its comments (doc comments included) and string
    literals blanked, so a word in a message or an explanation is no answer."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def answers(files):
    code = {path: code_only(text) for path, text in files.items()}
    return {
        question: sorted(rel(p) for p, text in code.items() if re.search(pattern, text))
        for question, pattern in QUESTIONS.items()
    }


def public_items(files):
    """Items declared `pub` (not `pub(crate)`) in the modules of the
    embedder's API (`pub mod` in lib.rs; those lib.rs declares through
    `internal_modules!` are public only with the `internals` feature, and
    not counted), each name a `pub use` exports counted."""
    lib = (ROOT / "lib.rs").read_text()
    modules = re.findall(r"^pub mod (\w+)", lib, re.M)
    internal = re.search(r"internal_modules!\((.*?)\);", lib, re.S)
    internal = re.findall(r"\w+", internal.group(1)) if internal else []
    private = re.findall(r"^mod (\w+)", lib, re.M)
    items = 0
    for path, text in files.items():
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[0] not in modules:
            continue
        items += len(re.findall(r"^\s*pub (?:async |const |unsafe )*(?:fn|struct|enum|trait|const|static|type|mod) ", text, re.M))
        for statement in re.findall(r"^\s*pub use ([^;]+);", text, re.M):
            items += sum(1 for _ in expand(re.sub(r"\s+", "", statement)))
    return items, len(modules), len(modules) + len(internal) + len(private)


def documented_items():
    """The items rustdoc documents for the library built without the
    `internals` feature: one page each (structs, enums, traits, functions,
    constants), not counting the redirects it writes for re-exports."""
    docs = ROOT.parent.parent / "target" / "doc" / "stepstone"
    if not docs.is_dir():
        return None
    return sum(1 for page in docs.glob("*/*.html") if page.name.split(".")[0] in ITEM_PAGES)


ITEM_PAGES = {"struct", "enum", "trait", "fn", "constant", "static", "type", "macro", "union"}


def module_of(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def file_of(module):
    """The file that holds `module` (a list of names), or of its nearest parent."""
    for length in range(len(module), -1, -1):
        prefix = module[:length]
        for candidate in (ROOT.joinpath(*prefix).with_suffix(".rs") if prefix else None,
                          ROOT.joinpath(*prefix, "mod.rs"),
                          ROOT / "lib.rs" if not prefix else None):
            if candidate and candidate.exists():
                return candidate
    return None


def use_paths(text):
    """Every path a `use` names, its groups expanded: `a::{b, c::d}` gives a::b, a::c::d."""
    for statement in re.findall(r"^\s*(?:pub(?:\([a-z]+\))? )?use ([^;]+);", text, re.M):
        yield from expand(re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", statement)))


def expand(tree):
    if "{" not in tree:
        yield tree
        return
    head, _, rest = tree.partition("{")
    body = rest[: rest.rfind("}")]
    depth, start = 0, 0
    for i, ch in enumerate(body + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            part = body[start:i]
            start = i + 1
            if part:
                yield from expand(head + part)


def imports(path, text):
    here = module_of(path)
    targets = set()
    for used in use_paths(text):
        parts = [p for p in re.split(r"::", used) if p and p != "self" and p != "*"]
        if not parts:
            continue
        if parts[0] == "crate":
            module = parts[1:]
        elif parts[0] == "super":
            module = here
            while parts and parts[0] == "super":
                parts, module = parts[1:], module[:-1]
            module = module + parts
        else:
            continue
        target = file_of(module)
        if target and target != path:
            targets.add(target)
    return targets


def cycles(files):
    graph = {path: imports(path, text) for path, text in files.items()}
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(rel(p) for p in component))

    sys.setrecursionlimit(10_000)
    for node in graph:
        if node not in index:
            visit(node)
    return found


def bare_spawns(files):
    """The files spawning tasks with `tokio::spawn` instead of `task::spawn`."""
    return sorted(rel(path) for path, text in files.items() if path.name != "task.rs" and "tokio::spawn(" in text)


def timings(files):
    """The fixed `Duration` constants of the sources (module-level or
    associated, not a function's own), and those the architecture's
    "Fixed timings" table names: the two must be the same."""
    in_code = set()
    for text in files.values():
        in_code.update(re.findall(r"^(?:pub(?:\([a-z]+\))? )?const ([A-Z_]+): \(?Duration\b", text, re.M))
        in_code.update(re.findall(r"^    pub const ([A-Z_]+): \(?Duration\b", text, re.M))
    doc = ARCHITECTURE.read_text()
    section = doc.split("## Fixed timings", 1)[-1].split("\n## ", 1)[0]
    in_table = set()
    for row in re.findall(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \|", section, re.M):
        in_table.update(re.findall(r"`([A-Z_]+)`", row))
    return in_code, in_table


def limits(files):
    """The numeric constants named for a maximum, every numeric constant,
    and those the architecture's "Fixed limits" table names: the first
    must all be in the table, and the table only names the second."""
    named_max, every = set(), set()
    for text in files.values():
        for name in re.findall(r"^(?:pub(?:\([a-z]+\))? )?const ([A-Z_]+): (?:u8|u16|u32|u64|usize|i64|f64)\b", text, re.M):
            every.add(name)
            if "MAX" in name:
                named_max.add(name)
    doc = ARCHITECTURE.read_text()
    section = doc.split("## Fixed limits", 1)[-1].split("\n## ", 1)[0]
    in_table = set()
    for row in re.findall(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \|", section, re.M):
        in_table.update(re.findall(r"`([A-Z_]+)`", row))
    return named_max, every, in_table


def main():
    files = {path: strip_tests(path.read_text()) for path in sources()}
    for type_name in ("Runtime", "Runs", "Catalog"):
        methods, blocks, spanned = methods_of(files, type_name)
        print(f"{type_name}: {methods} methods in {blocks} impl blocks over {len(spanned)} files")
    names, public, touching = host_state(files)
    print(f"Host: {len(names)} fields ({public} pub), touched {sum(touching.values())} times from {len(touching)} files")
    for question, found in answers(files).items():
        print(f"{question}: {len(found)} files ({', '.join(found)})")
    items, public_modules, modules = public_items(files)
    pages = documented_items()
    counted = f"{pages} documented by rustdoc" if pages is not None else f"{items} declared pub (rustdoc not run)"
    print(f"public items of the embedder's API: {counted}; public modules: {public_modules} of {modules}")
    found = cycles(files)
    print(f"import cycles (strongly connected groups of files): {len(found)}")
    for group in found:
        print(f"  {' <-> '.join(group)}")
    spawning = bare_spawns(files)
    print(f"files spawning tasks without their process: {len(spawning)}")
    in_code, in_table = timings(files)
    print(f"fixed timings: {len(in_code)} in the code, {len(in_table)} in docs/ARCHITECTURE.md")
    named_max, every, limits_table = limits(files)
    print(f"fixed limits: {len(named_max)} named for a maximum in the code, {len(limits_table)} in docs/ARCHITECTURE.md")
    if found:
        sys.exit("import cycles between files of host/src: break each by moving what both sides use below them")
    if spawning:
        sys.exit(f"tasks spawned with tokio::spawn in {', '.join(spawning)}: use crate::task::spawn (host/src/task.rs)")
    if in_code != in_table:
        sys.exit(
            "docs/ARCHITECTURE.md's Fixed timings and the code disagree: "
            f"not in the table: {sorted(in_code - in_table) or 'none'}; not in the code: {sorted(in_table - in_code) or 'none'}"
        )

    if not named_max <= limits_table or not limits_table <= every:
        sys.exit(
            "docs/ARCHITECTURE.md's Fixed limits and the code disagree: "
            f"not in the table: {sorted(named_max - limits_table) or 'none'}; not in the code: {sorted(limits_table - every) or 'none'}"
        )


if __name__ == "__main__":
    main()
