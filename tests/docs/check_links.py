"""Checks the relative links of the documentation: every Markdown link in README.md,
CONTRIBUTING.md and docs/*.md that is not a URL must name a file or directory that exists and,
when it has a #fragment into a Markdown file, a heading of that file (GitHub's anchors: the
heading's text in lower case, punctuation dropped, spaces made hyphens, "-1", "-2", ... added to
repeats).

    check_links.py [SOURCE_DIR]

SOURCE_DIR defaults to the repository this file is in. Before the repository, it checks itself on
a small tree of known good and broken links held in memory, so a checker that finds nothing
cannot pass. Exits 0 when every link resolves, 1 otherwise (one line per broken link: FILE:LINE:
what is wrong).
"""

import glob
import os
import re
import sys

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target><[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(?P<target>\S+)", re.M)
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def blank_fences(text):
    """The text with every line of a fenced code block (fences included) made empty, so line
    numbers stay as they are and nothing in a code block counts as a link or a heading."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def blank_code_spans(text):
    """The text with each inline code span's content replaced by x's of the same length (its
    newlines kept), paragraph by paragraph: a code span holds no link, but a link's text may hold
    a code span."""
    def one(m):
        return m.group(1) + re.sub(r"[^\n]", "x", m.group(2)) + m.group(1)
    paras = re.split(r"(\n\s*\n)", text)
    return "".join(re.sub(r"(`+)(.+?)\1", one, p, flags=re.S) for p in paras)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    t = t.replace("`", "")
    t = t.replace("*", "").strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


class Disk:
    """The files as they are."""

    def read(self, path):
        with open(path, encoding="utf-8") as f:
            return f.read()

    exists = staticmethod(os.path.exists)
    isfile = staticmethod(os.path.isfile)

    def docs(self, root):
        return sorted(glob.glob(os.path.join(root, "docs", "*.md")))


class Memory:
    """Files held in a dict {path: text}; a directory exists when a file lies below it."""

    def __init__(self, files):
        self.files = files

    def read(self, path):
        return self.files[path]

    def exists(self, path):
        return path in self.files or any(p.startswith(path.rstrip("/") + "/") for p in self.files)

    def isfile(self, path):
        return path in self.files

    def docs(self, root):
        d = os.path.join(root, "docs") + "/"
        return sorted(p for p in self.files if p.startswith(d) and p.endswith(".md")
                      and "/" not in p[len(d):])


def anchors(fs, path):
    """The anchors a Markdown file defines: its headings' slugs and explicit <a name/id>."""
    text = blank_fences(fs.read(path))
    seen, out = {}, set(HTML_ID.findall(text))
    for line in text.split("\n"):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def check_file(fs, path, root):
    """The broken links of one Markdown file, as "FILE:LINE: message" strings."""
    text = blank_code_spans(blank_fences(fs.read(path)))
    targets = [(m.start(), m.group("target")) for m in LINK.finditer(text)]
    targets += [(m.start(), m.group("target")) for m in REFDEF.finditer(text)]
    errors = []
    rel = os.path.relpath(path, root)
    for pos, target in sorted(targets):
        target = target.strip("<>")
        line = text.count("\n", 0, pos) + 1
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue   # a URL (https:, mailto:, ...)
        file_part, _, fragment = target.partition("#")
        dest = path if not file_part else os.path.normpath(
            os.path.join(os.path.dirname(path), file_part))
        if not fs.exists(dest):
            errors.append("%s:%d: link to %s: no such file or directory" % (rel, line, target))
            continue
        if fragment and dest.endswith(".md") and fs.isfile(dest):
            if fragment not in anchors(fs, dest):
                errors.append("%s:%d: link to %s: %s has no heading with the anchor #%s"
                              % (rel, line, target, os.path.relpath(dest, root), fragment))
    return errors


def check_tree(fs, root):
    """The files checked, and the broken links of them all."""
    files = [os.path.join(root, "README.md"), os.path.join(root, "CONTRIBUTING.md")]
    files += fs.docs(root)
    errors = []
    for path in files:
        if not fs.isfile(path):
            errors.append("%s: missing" % os.path.relpath(path, root))
            continue
        errors += check_file(fs, path, root)
    return files, errors


def self_test():
    """The checker on a tree with known links: each broken one found, no good one reported."""
    d = "/selftest"
    files = {
        "README.md": "# Top\n\n## What each op means in `distributed_epoch`\n\n"
                     "See [a](docs/a.md#limits), [b](docs/a.md), [here](#top),\n"
                     "[ops](#what-each-op-means-in-distributed_epoch), [web](https://x.y/z),\n"
                     "[broken file](docs/nope.md), [broken anchor](docs/a.md#nope),\n"
                     "[a link\nover two lines](docs/a.md#repeat-1), [fenced](#not-a-heading)\n"
                     "and `[code](nope.md)`.\n\n"
                     "```sh\n[fenced](nope.md)\n# Not a heading\n```\n",
        "CONTRIBUTING.md": "# C\n\n[bad](#not-a-heading) [dir](docs/)\n",
        "docs/a.md": "# A — title\n\n## Limits\n\n## Repeat\n\n## Repeat\n\n"
                     "[up](../README.md#top) [self](#a--title) [gone](../gone.md)\n",
    }
    fs = Memory({os.path.join(d, name): text for name, text in files.items()})
    _, errors = check_tree(fs, d)
    want = ["README.md:7: link to docs/nope.md: no such file or directory",
            "README.md:7: link to docs/a.md#nope: docs/a.md has no heading with the anchor "
            "#nope",
            "README.md:9: link to #not-a-heading: README.md has no heading with the anchor "
            "#not-a-heading",
            "CONTRIBUTING.md:3: link to #not-a-heading: CONTRIBUTING.md has no heading with "
            "the anchor #not-a-heading",
            "docs/a.md:9: link to ../gone.md: no such file or directory"]
    if errors != want:
        sys.exit("check_links.py: self-test failed:\n  found:\n    %s\n  expected:\n    %s"
                 % ("\n    ".join(errors), "\n    ".join(want)))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    self_test()
    files, errors = check_tree(Disk(), root)
    for e in errors:
        print(e)
    if errors:
        print("check_links.py: %d broken link(s) in %d file(s)" % (len(errors), len(files)))
        return 1
    print("check_links.py: every relative link of %d file(s) resolves" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
