#!/usr/bin/env python3
"""Build a secrets / look-alikes test corpus from the betterleaks rule set.

The betterleaks (gitleaks successor) rule definitions live in Go source files
(cmd/generate/config/rules/*.go).  Every rule function ends with
``utils.Validate(r, tps, fps)``: ``tps`` are true-positive samples the rule must
flag, ``fps`` are look-alikes it must not flag.  This script does not run Go; it
contains a small interpreter for the subset of Go those functions use (string
literals, ``+``, slice/map/struct literals, ``append``, ``fmt.Sprintf`` with
%s/%d/%v, ``strings.Repeat``, base64, ``for ... range``, helper functions of
the same package, ...).  It walks the list of rules that
cmd/generate/config/main.go registers, interprets each rule function and records
the samples passed to ``utils.Validate`` / ``utils.ValidateWithPaths``.

Samples produced by ``secrets.NewSecret(regex)`` /
``secrets.NewSecretWithEntropy(regex, h)`` are random in Go.  Here they are
produced by a small deterministic generator (seeded from the rule and the call
index) that supports the simple regexes those calls use (character classes,
counted repetition, groups, alternation).  Such samples are kept but marked
``"generated": true``.  Anything the interpreter cannot reproduce faithfully is
skipped and counted (see build_stats.json).

Usage:  python3 tools/secrets_corpus.py BETTERLEAKS_GIT_DIR [--out DIR]   (default: benchmarks/secrets_corpus)

stdlib only, deterministic: two runs on the same commit give identical files.
"""
from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from typing import ClassVar

RULES_DIR = "cmd/generate/config/rules"
UTILS_DIR = "cmd/generate/config/utils"
MAIN_GO = "cmd/generate/config/main.go"
GENERATE_GO = "cmd/generate/config/utils/generate.go"
TEST_FRACTION_MOD = 3  # rule is in "test" when hash(rule id) % 3 == 0


# --------------------------------------------------------------------------
# git access
# --------------------------------------------------------------------------
class Repo:
    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self.commit = self._git("rev-parse", "HEAD^{commit}").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args],
                              check=True, capture_output=True).stdout.decode("utf-8")

    def ls(self, prefix: str) -> list[str]:
        out = self._git("ls-tree", "-r", "--name-only", self.commit, "--", prefix)
        return sorted(p for p in out.splitlines() if p)

    def show(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{path}")


# --------------------------------------------------------------------------
# Go lexer (with automatic semicolon insertion)
# --------------------------------------------------------------------------
class Tok:
    __slots__ = ("kind", "line", "val")

    def __init__(self, kind, val, line):
        self.kind, self.val, self.line = kind, val, line

    def __repr__(self):
        return f"{self.kind}:{self.val!r}@{self.line}"


OPS = sorted(["<<=", ">>=", "&^=", "...", "&&", "||", "<-", "++", "--", "==", "!=", "<=", ">=", ":=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<", ">>", "&^", "+", "-", "*", "/", "%", "&", "|", "^", "<", ">", "=", "!", "(", ")", "[", "]", "{", "}", ",", ";", ".", ":", "~"], key=len, reverse=True)
SEMI_AFTER_KW = {"break", "continue", "fallthrough", "return"}
ESC = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34}


def decode_go_interpreted(body: str, quote: str) -> str:
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        n = body[i + 1]
        if n in ESC:
            out.append(ESC[n])
            i += 2
        elif n == "x":
            out.append(int(body[i + 2:i + 4], 16))
            i += 4
        elif n in "01234567":
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        elif n == "u":
            out += chr(int(body[i + 2:i + 6], 16)).encode("utf-8")
            i += 6
        elif n == "U":
            out += chr(int(body[i + 2:i + 10], 16)).encode("utf-8")
            i += 10
        else:
            raise ValueError(f"bad escape \\{n}")
    return out.decode("utf-8", "surrogateescape")


def lex(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, line, n = 0, 1, len(src)

    def need_semi():
        if not toks:
            return False
        t = toks[-1]
        return ((t.kind in ("ident", "str", "num", "char") and t.val not in ("",)) and \
            (t.kind != "ident" or t.val not in {"func", "var", "const", "type", "import", "package",
                                                  "if", "for", "else", "switch", "case", "default",
                                                  "go", "defer", "select", "map", "struct",
                                                  "interface", "chan", "range"}
             or t.val in SEMI_AFTER_KW)) or \
            (t.kind == "op" and t.val in (")", "]", "}", "++", "--"))

    while i < n:
        c = src[i]
        if c == "\n":
            if need_semi():
                toks.append(Tok("op", ";", line))
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.index("*/", i + 2)
            seg = src[i:j + 2]
            if "\n" in seg and need_semi():
                toks.append(Tok("op", ";", line))
            line += seg.count("\n")
            i = j + 2
        elif c == "`":
            j = src.index("`", i + 1)
            raw = src[i + 1:j].replace("\r", "")  # Go drops CRs in raw strings
            toks.append(Tok("str", raw, line))
            line += src[i:j].count("\n")
            i = j + 1
        elif c == '"':
            j = i + 1
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("str", decode_go_interpreted(src[i + 1:j], '"'), line))
            i = j + 1
        elif c == "'":
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            s = decode_go_interpreted(src[i + 1:j], "'")
            toks.append(Tok("char", ord(s) if len(s) == 1 else s, line))
            i = j + 1
        elif c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            m = re.match(r"0[xX][0-9a-fA-F_]+|\d[\d_]*(\.\d*)?([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?", src[i:])
            txt = m.group(0).replace("_", "")
            val = int(txt, 16) if txt[:2].lower() == "0x" else (float(txt) if any(ch in txt for ch in ".eE") else int(txt))
            toks.append(Tok("num", val, line))
            i += len(m.group(0))
        elif c.isalpha() or c == "_" or ord(c) > 127:
            m = re.match(r"[\w]+", src[i:])
            toks.append(Tok("ident", m.group(0), line))
            i += len(m.group(0))
        else:
            for op in OPS:
                if src.startswith(op, i):
                    toks.append(Tok("op", op, line))
                    i += len(op)
                    break
            else:
                raise ValueError(f"lex error at line {line}: {src[i:i+20]!r}")
    if need_semi():
        toks.append(Tok("op", ";", line))
    toks.append(Tok("eof", None, line))
    return toks


# --------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------
class Unsup(Exception):
    """The interpreter cannot faithfully reproduce this construct."""


class S:
    """A Go string; gen=True when (part of) it came from a random generator."""
    __slots__ = ("gen", "text")

    def __init__(self, text: str, gen: bool = False):
        self.text, self.gen = text, gen

    def __repr__(self):
        return f"S({self.text!r}{', gen' if self.gen else ''})"


class Unknown:
    """Placeholder for one sample (or list) we could not reproduce."""
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class GoMap:
    def __init__(self, pairs):
        self.pairs = pairs  # list of (key, value), source order


class Ptr:
    pass


def as_str(v) -> S:
    if isinstance(v, S):
        return v
    if isinstance(v, Unknown):
        raise Unsup(v.reason)
    raise Unsup(f"expected string, got {type(v).__name__}")


def go_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------
# deterministic generator for the simple regexes used by secrets.NewSecret
# --------------------------------------------------------------------------
class DetRng:
    def __init__(self, seed: str):
        self.seed = seed.encode()
        self.ctr = 0
        self.buf = b""

    def _bytes(self, k):
        while len(self.buf) < k:
            self.buf += hashlib.sha256(self.seed + self.ctr.to_bytes(8, "big")).digest()
            self.ctr += 1
        out, self.buf = self.buf[:k], self.buf[k:]
        return out

    def below(self, n: int) -> int:
        if n <= 1:
            return 0
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = int.from_bytes(self._bytes(8), "big")
            if x < limit:
                return x % n


WORD = [chr(c) for c in range(48, 58)] + [chr(c) for c in range(65, 91)] + ["_"] + [chr(c) for c in range(97, 123)]
DIGIT = [chr(c) for c in range(48, 58)]
SPACE = [" ", "\t", "\n", "\r", "\f", "\v"]


class RegexGen:
    """Parses a small RE2 subset into a tree; generates matching strings."""

    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0
        self.tree = self._alt()
        if self.i != len(self.p):
            raise Unsup(f"regex: unexpected {self.p[self.i:]!r}")

    def _peek(self):
        return self.p[self.i] if self.i < len(self.p) else None

    def _alt(self):
        branches = [self._seq()]
        while self._peek() == "|":
            self.i += 1
            branches.append(self._seq())
        return ("alt", branches)

    def _seq(self):
        items = []
        while self._peek() not in (None, "|", ")"):
            atom = self._atom()
            if atom is None:
                continue
            items.append(self._quant(atom))
        return ("seq", items)

    def _quant(self, atom):
        c = self._peek()
        lo = hi = None
        if c == "?":
            lo, hi = 0, 1
            self.i += 1
        elif c == "*":
            lo, hi = 0, -1
            self.i += 1
        elif c == "+":
            lo, hi = 1, -1
            self.i += 1
        elif c == "{":
            m = re.match(r"\{(\d+)(,(\d*))?\}", self.p[self.i:])
            if not m:
                raise Unsup("regex: bad repetition")
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else -1)
            self.i += len(m.group(0))
        if lo is None:
            return atom
        if self._peek() == "?":  # lazy, irrelevant for generation
            self.i += 1
        return ("rep", atom, lo, hi)

    def _escape_set(self, ch):
        if ch == "w":
            return WORD
        if ch == "d":
            return DIGIT
        if ch == "s":
            return SPACE
        if ch.isalnum():
            raise Unsup(f"regex: unsupported escape \\{ch}")
        return [ch]

    def _atom(self):
        c = self.p[self.i]
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?", self.i):
                m = re.match(r"\?([a-zA-Z]*)(:|\))", self.p[self.i:])
                if not m:
                    raise Unsup("regex: unsupported group")
                self.i += len(m.group(0))
                if m.group(2) == ")":  # flag-only group such as (?i): generating as written still matches
                    return None
            node = self._alt()
            if self._peek() != ")":
                raise Unsup("regex: unbalanced group")
            self.i += 1
            return node
        if c == "[":
            return self._class()
        if c == "\\":
            ch = self.p[self.i + 1]
            self.i += 2
            if ch in "bBAz":
                return None  # zero-width assertions
            return ("set", self._escape_set(ch))
        if c in "^$":
            self.i += 1
            return None
        if c == ".":
            raise Unsup("regex: '.' (any char) not reproduced")
        self.i += 1
        return ("set", [c])

    def _class(self):
        self.i += 1
        if self._peek() == "^":
            raise Unsup("regex: negated class")
        chars: list[str] = []
        first = True
        while True:
            c = self._peek()
            if c is None:
                raise Unsup("regex: unterminated class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "[":
                raise Unsup("regex: POSIX class")
            if c == "\\":
                e = self.p[self.i + 1]
                self.i += 2
                s = self._escape_set(e)
                if len(s) > 1:
                    chars.extend(s)
                    continue
                lo = s[0]
            else:
                lo = c
                self.i += 1
            if self._peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                h = self.p[self.i]
                if h == "\\":
                    h = self.p[self.i + 1]
                    self.i += 2
                else:
                    self.i += 1
                if ord(h) < ord(lo):
                    raise Unsup("regex: bad range")
                chars.extend(chr(x) for x in range(ord(lo), ord(h) + 1))
            else:
                chars.append(lo)
        # keep first-occurrence order, drop duplicates
        return ("set", list(dict.fromkeys(chars)))

    def gen(self, rng: DetRng) -> str:
        out: list[str] = []
        self._gen(self.tree, rng, out)
        return "".join(out)

    def _gen(self, node, rng, out):
        kind = node[0]
        if kind == "alt":
            self._gen(node[1][rng.below(len(node[1]))], rng, out)
        elif kind == "seq":
            for it in node[1]:
                self._gen(it, rng, out)
        elif kind == "set":
            out.append(node[1][rng.below(len(node[1]))])
        elif kind == "rep":
            _, atom, lo, hi = node
            if hi == -1:
                hi = lo + 1  # reggen is called with limit 1 for unbounded repeats
            for _ in range(lo + rng.below(hi - lo + 1)):
                self._gen(atom, rng, out)


def check_generated(regex: str, s: str) -> None:
    """Cross-check a generated value with Python's re (RE2 syntax used here is
    compatible for these simple patterns); a mismatch means our generator is wrong."""
    try:
        pat = re.compile(regex.replace(r"\z", r"\Z"))
    except re.error:
        return
    if not pat.fullmatch(s):
        raise Unsup(f"generated value does not match {regex}")


def shannon(s: str) -> float:
    if not s:
        return 0.0
    cnt = collections.Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in cnt.values())


# --------------------------------------------------------------------------
# expression / statement parser producing small AST tuples
# --------------------------------------------------------------------------
class Parser:
    def __init__(self, toks: list[Tok], start: int = 0, end: int | None = None):
        self.t = toks
        self.i = start
        self.end = len(toks) - 1 if end is None else end

    def peek(self, k=0) -> Tok:
        j = self.i + k
        return self.t[j] if j < self.end else Tok("eof", None, -1)

    def next(self) -> Tok:
        t = self.peek()
        self.i += 1
        return t

    def is_op(self, v, k=0):
        t = self.peek(k)
        return t.kind == "op" and t.val == v

    def expect(self, v):
        t = self.next()
        if not (t.kind == "op" and t.val == v):
            raise Unsup(f"parse: expected {v!r} got {t!r}")
        return t

    def skip_balanced(self):
        """Skip from an opening bracket to its matching close (inclusive)."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        open_ = self.next().val
        depth = 1
        stack = [pairs[open_]]
        while stack:
            t = self.next()
            if t.kind == "eof":
                raise Unsup("parse: unbalanced")
            if t.kind == "op" and t.val in pairs:
                stack.append(pairs[t.val])
            elif t.kind == "op" and t.val in (")", "]", "}"):
                stack.pop()
        return depth

    # ---- types ----
    def parse_type(self):
        t = self.peek()
        if t.kind == "op" and t.val == "[":
            self.next()
            if self.is_op("]"):
                self.next()
                return ("slice", self.parse_type())
            self.parse_expr()
            self.expect("]")
            return ("slice", self.parse_type())
        if t.kind == "op" and t.val == "*":
            self.next()
            return ("ptr", self.parse_type())
        if t.kind == "ident" and t.val == "map":
            self.next()
            self.expect("[")
            k = self.parse_type()
            self.expect("]")
            return ("map", k, self.parse_type())
        if t.kind == "ident" and t.val in ("struct", "interface"):
            self.next()
            self.skip_balanced()
            return ("struct", None)
        if t.kind == "ident" and t.val == "func":
            raise Unsup("parse: func type")
        if t.kind == "ident":
            self.next()
            name = t.val
            if self.is_op("."):
                self.next()
                name += "." + self.next().val
            return ("named", name)
        raise Unsup(f"parse: type at {t!r}")

    # ---- expressions ----
    BINPREC: ClassVar[dict[str, int]] = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "|": 4, "^": 4, "*": 5, "/": 5, "%": 5, "<<": 5, ">>": 5, "&": 5}

    def parse_expr(self, minprec=1):
        left = self.parse_unary()
        while True:
            t = self.peek()
            if t.kind == "op" and t.val in self.BINPREC and self.BINPREC[t.val] >= minprec:
                self.next()
                right = self.parse_expr(self.BINPREC[t.val] + 1)
                left = ("bin", t.val, left, right, t.line)
            else:
                return left

    def parse_unary(self):
        t = self.peek()
        if t.kind == "op" and t.val in ("-", "!", "&", "*", "+"):
            self.next()
            return ("unary", t.val, self.parse_unary())
        return self.parse_postfix(self.parse_primary())

    def parse_primary(self):
        t = self.peek()
        if t.kind == "str":
            self.next()
            return ("lit", S(t.val))
        if t.kind == "num":
            self.next()
            return ("lit", t.val)
        if t.kind == "char":
            self.next()
            return ("lit", t.val)
        if t.kind == "op" and t.val == "(":
            self.next()
            e = self.parse_expr()
            self.expect(")")
            return e
        if (t.kind == "op" and t.val == "[") or (t.kind == "ident" and t.val in ("map", "struct")):
            typ = self.parse_type()
            if self.is_op("{"):
                return ("composite", typ, self.parse_elements())
            if self.is_op("("):
                self.next()
                e = self.parse_expr()
                self.expect(")")
                return ("convert", typ, e)
            raise Unsup("parse: bare type")
        if t.kind == "ident" and t.val == "func":
            raise Unsup("parse: function literal")
        if t.kind == "ident":
            self.next()
            return ("name", t.val, t.line)
        raise Unsup(f"parse: unexpected {t!r}")

    def parse_postfix(self, e):
        while True:
            t = self.peek()
            if t.kind != "op":
                return e
            if t.val == ".":
                self.next()
                nt = self.next()
                if nt.kind != "ident":
                    raise Unsup("parse: type assertion")
                e = ("sel", e, nt.val)
            elif t.val == "(":
                self.next()
                args, spread = [], False
                while not self.is_op(")"):
                    args.append(self.parse_expr())
                    if self.is_op("..."):
                        self.next()
                        spread = True
                    if self.is_op(",") or self.is_op(";"):
                        self.next()
                self.expect(")")
                e = ("call", e, args, spread, t.line)
            elif t.val == "[":
                self.next()
                lo = hi = None
                if not self.is_op(":"):
                    lo = self.parse_expr()
                if self.is_op(":"):
                    self.next()
                    if not self.is_op("]"):
                        hi = self.parse_expr()
                    self.expect("]")
                    e = ("slice", e, lo, hi)
                else:
                    self.expect("]")
                    e = ("index", e, lo)
            elif t.val == "{" and e[0] in ("name", "sel") and self._looks_like_type(e):
                e = ("composite", ("named", self._type_name(e)), self.parse_elements())
            else:
                return e

    @staticmethod
    def _looks_like_type(e):
        if e[0] == "name":
            return e[1][:1].isupper() or e[1] in ("string",)
        return e[1][0] == "name" and e[2][:1].isupper()

    @staticmethod
    def _type_name(e):
        return e[1] if e[0] == "name" else f"{e[1][1]}.{e[2]}"

    def parse_elements(self):
        self.expect("{")
        elems = []
        while True:
            while self.is_op(";") or self.is_op(","):
                self.next()
            if self.is_op("}"):
                self.next()
                return elems
            start_line = self.peek().line
            try:
                key = None
                val = self._elem_value()
                if self.is_op(":"):
                    self.next()
                    key, val = val, self._elem_value()
                elems.append((key, val, start_line))
            except Unsup as ex:
                # skip to the end of this element so one odd element does not lose its siblings
                self._skip_element()
                elems.append((None, ("unsup", str(ex)), start_line))

    def _elem_value(self):
        if self.is_op("{"):
            return ("composite", None, self.parse_elements())
        return self.parse_expr()

    def _skip_element(self):
        self._skip_to(",")

    # ---- statements ----
    def parse_block(self):
        """At '{': returns list of statements until matching '}'."""
        self.expect("{")
        stmts = []
        while True:
            while self.is_op(";"):
                self.next()
            if self.is_op("}"):
                self.next()
                return stmts
            if self.peek().kind == "eof":
                raise Unsup("parse: unterminated block")
            stmts.append(self.parse_stmt())

    def _skip_stmt(self):
        start = self.i
        self._skip_to(";")
        return start

    def _skip_to(self, separator):
        """Past tokens up to `separator` or the closing bracket at this depth (not consumed), or the end."""
        depth = 0
        while True:
            t = self.peek()
            if t.kind == "eof":
                return
            if t.kind == "op":
                if t.val in "([{":
                    depth += 1
                elif t.val in ")]}":
                    if depth == 0:
                        return
                    depth -= 1
                elif t.val == separator and depth == 0:
                    return
            self.next()

    def parse_stmt(self):
        start = self.i
        line = self.peek().line
        try:
            return self._parse_stmt()
        except Unsup as ex:
            self.i = start
            self._skip_stmt()
            return ("unsup", str(ex), line)

    def _parse_stmt(self):
        t = self.peek()
        line = t.line
        if t.kind == "ident" and t.val == "return":
            self.next()
            if self.is_op(";") or self.is_op("}"):
                return ("return", None, line)
            return ("return", self.parse_expr(), line)
        if t.kind == "ident" and t.val in ("var", "const"):
            self.next()
            if self.is_op("("):
                self.next()
                specs = []
                while not self.is_op(")"):
                    if self.is_op(";"):
                        self.next()
                        continue
                    specs.append(self._var_spec(line))
                self.next()
                return ("group", specs, line)
            return self._var_spec(line)
        return self._parse_simple_stmt(t, line)

    def _var_spec(self, line):
        name = self.next().val
        typ = None
        if not self.is_op("="):
            typ = self.parse_type()
        if self.is_op("="):
            self.next()
            return ("assign", [("name", name, line)], ":=", self.parse_expr(), line)
        return ("declare", name, typ, line)

    def _parse_simple_stmt(self, t, line):
        if t.kind == "ident" and t.val == "for":
            self.next()
            # only: for [k[, v]] := range EXPR { ... }   or  for _, v := range EXPR { ... }
            names = []
            if self.peek().kind == "ident" and self.peek().val == "range":
                pass
            else:
                while True:
                    nt = self.next()
                    if nt.kind != "ident":
                        raise Unsup("parse: unsupported for loop")
                    names.append(nt.val)
                    if self.is_op(","):
                        self.next()
                        continue
                    break
                if not (self.is_op(":=") or self.is_op("=")):
                    raise Unsup("parse: unsupported for loop")
                self.next()
            rt = self.next()
            if not (rt.kind == "ident" and rt.val == "range"):
                raise Unsup("parse: unsupported for loop")
            iterable = self.parse_expr()
            body = self.parse_block()
            return ("for", names, iterable, body, line)
        if t.kind == "ident" and t.val in ("if", "switch", "select", "go", "defer", "goto"):
            raise Unsup(f"parse: unsupported statement {t.val!r}")
        lhs = [self.parse_expr()]
        while self.is_op(","):
            self.next()
            lhs.append(self.parse_expr())
        t2 = self.peek()
        if t2.kind == "op" and t2.val in (":=", "=", "+="):
            self.next()
            rhs = self.parse_expr()
            if self.is_op(","):
                raise Unsup("parse: multi-value assignment")
            return ("assign", lhs, t2.val, rhs, line)
        if t2.kind == "op" and t2.val in ("++", "--"):
            self.next()
            return ("incdec", lhs[0], t2.val, line)
        if len(lhs) != 1:
            raise Unsup("parse: expression list statement")
        return ("expr", lhs[0], line)


# --------------------------------------------------------------------------
# packages
# --------------------------------------------------------------------------
class Func:
    def __init__(self, name, params, toks, body_start, body_end, file):
        self.name, self.params, self.toks = name, params, toks
        self.body_start, self.body_end, self.file = body_start, body_end, file
        self._body = None

    def body(self):
        if self._body is None:
            p = Parser(self.toks, self.body_start, self.body_end + 1)
            self._body = p.parse_block()
        return self._body


class Package:
    def __init__(self, name):
        self.name = name
        self.funcs: dict[str, Func] = {}
        self.globals_ast: dict[str, tuple] = {}  # name -> (ast, file)
        self.globals: dict[str, object] = {}
        self.imports: dict[str, str] = {}  # alias -> import path (per package, merged)

    def load_file(self, path: str, src: str):
        toks = lex(src)
        p = Parser(toks)
        while p.peek().kind != "eof":
            t = p.peek()
            if t.kind == "ident" and t.val == "import":
                p.next()
                if p.is_op("("):
                    p.next()
                    while not p.is_op(")"):
                        if p.is_op(";"):
                            p.next()
                            continue
                        alias = None
                        if p.peek().kind == "ident" or p.is_op("_") or p.is_op("."):
                            alias = p.next().val
                        ip = p.next().val
                        self.imports[alias or ip.rsplit("/", 1)[-1]] = ip
                    p.next()
                else:
                    alias = None
                    if p.peek().kind == "ident":
                        alias = p.next().val
                    ip = p.next().val
                    self.imports[alias or ip.rsplit("/", 1)[-1]] = ip
            elif t.kind == "ident" and t.val == "func":
                p.next()
                if p.is_op("("):  # method: skip
                    p.skip_balanced()
                    name = None
                    p.next()
                else:
                    name = p.next().val
                if p.is_op("["):
                    p.skip_balanced()  # type params
                # params
                pstart = p.i
                p.skip_balanced()
                params = self._param_names(toks[pstart + 1:p.i - 1])
                # results until '{'
                while not p.is_op("{"):
                    if p.is_op("(") or p.is_op("["):
                        p.skip_balanced()
                    else:
                        p.next()
                bstart = p.i
                p.skip_balanced()
                if name:
                    self.funcs[name] = Func(name, params, toks, bstart, p.i - 1, path)
            elif t.kind == "ident" and t.val in ("var", "const"):
                p.next()
                if p.is_op("("):
                    p.next()
                    while not p.is_op(")"):
                        if p.is_op(";"):
                            p.next()
                            continue
                        self._global_spec(p, path)
                    p.next()
                else:
                    self._global_spec(p, path)
            elif t.kind == "ident" and t.val == "type":
                p.next()
                p.next()
                if p.is_op("{") or p.peek().val in ("struct", "interface"):
                    if not p.is_op("{"):
                        p.next()
                    p.skip_balanced()
                else:
                    p._skip_stmt()
            else:
                p.next()

    @staticmethod
    def _param_names(toks):
        groups, cur, depth = [], [], 0
        for t in toks:
            if t.kind == "op" and t.val in "([{":
                depth += 1
            elif t.kind == "op" and t.val in ")]}":
                depth -= 1
            if t.kind == "op" and t.val == "," and depth == 0:
                groups.append(cur)
                cur = []
            else:
                cur.append(t)
        if cur:
            groups.append(cur)
        return [g[0].val for g in groups if g and g[0].kind == "ident"]

    def _global_spec(self, p: Parser, path):
        names = [p.next().val]
        while p.is_op(","):
            p.next()
            names.append(p.next().val)
        if not p.is_op("="):
            try:
                p.parse_type()
            except Unsup:
                p._skip_stmt()
                return
        if p.is_op("="):
            p.next()
            if len(names) != 1:
                p._skip_stmt()
                return
            try:
                self.globals_ast[names[0]] = (p.parse_expr(), path)
            except Unsup as ex:
                self.globals_ast[names[0]] = (("unsup", str(ex)), path)
                p._skip_stmt()


# --------------------------------------------------------------------------
# interpreter
# --------------------------------------------------------------------------
RULE_ZERO_FIELDS = {"Entropy": 0.0}  # config.Rule fields read by rule functions when left unset


class Return(Exception):
    def __init__(self, value):
        self.value = value


class Interp:
    def __init__(self, rules_pkg: Package, utils_pkg: Package, sample_templates: list[str]):
        self.pkgs = {"rules": rules_pkg, "utils": utils_pkg}
        self.templates = sample_templates
        self.seed_key = ""
        self.gen_counter = 0
        self.records = []  # (rule dict, tps, fps, file, kind)
        self.stmt_skips = []  # (func, file, line, reason)
        self.cur_file = None

    # ---- helpers ----
    def next_rng(self, regex: str) -> DetRng:
        self.gen_counter += 1
        return DetRng(f"{self.seed_key}|{self.gen_counter}|{regex}")

    def new_secret(self, regex: str, min_entropy: float | None = None) -> S:
        g = RegexGen(regex)
        for _ in range(200):
            s = g.gen(self.next_rng(regex))
            if min_entropy is None or shannon(s) >= min_entropy:
                check_generated(regex, s)
                return S(s, True)
        raise Unsup(f"could not reach entropy {min_entropy} for {regex}")

    def sample_secrets(self, ident: S, secret) -> list:
        if isinstance(secret, Unknown) or not isinstance(secret, S):
            reason = secret.reason if isinstance(secret, Unknown) else "non-string secret"
            return [Unknown(reason) for _ in self.templates]
        out = []
        for tpl in self.templates:
            txt = re.sub(r"\{[iIs]\}", lambda m: {"{i}": ident.text, "{I}": ident.text.upper(),
                                                   "{s}": secret.text}[m.group(0)], tpl)
            out.append(S(txt, ident.gen or secret.gen))
        return out

    def global_value(self, pkg: Package, name: str):
        if name in pkg.globals:
            return pkg.globals[name]
        if name not in pkg.globals_ast:
            raise Unsup(f"unknown name {name}")
        ast, _ = pkg.globals_ast[name]
        try:
            v = self.eval(ast, {}, pkg)
        except Unsup as ex:
            v = Unknown(str(ex))
        pkg.globals[name] = v
        return v

    # ---- statements ----
    def call_func(self, pkg: Package, fn: Func, args: list):
        env = dict(zip(fn.params, args, strict=False))
        prev_file = self.cur_file
        self.cur_file = fn.file
        try:
            self.exec_block(fn.body(), env, pkg, fn)
        except Return as r:
            return r.value
        finally:
            self.cur_file = prev_file
        return None

    def exec_block(self, stmts, env, pkg, fn):
        for st in stmts:
            self.exec_stmt(st, env, pkg, fn)

    def exec_stmt(self, st, env, pkg, fn):
        kind = st[0]
        if kind == "unsup":
            self.stmt_skips.append((fn.name, fn.file, st[2], st[1]))
            return
        try:
            if kind == "return":
                raise Return(None if st[1] is None else self.eval(st[1], env, pkg))
            if kind == "declare":
                typ = st[2]
                env[st[1]] = [] if typ and typ[0] == "slice" else (GoMap([]) if typ and typ[0] == "map" else (0 if typ == ("named", "int") else S("")))
                return
            if kind == "assign":
                _, lhs, op, rhs, line = st
                try:
                    val = self.eval(rhs, env, pkg)
                except Unsup as ex:
                    val = Unknown(str(ex))
                    self.stmt_skips.append((fn.name, fn.file, line, f"assignment: {ex}"))
                if len(lhs) != 1:
                    raise Unsup("multi assign")
                target = lhs[0]
                if op == "+=":
                    cur = self.eval(target, env, pkg)
                    val = self.binop("+", cur, val)
                if target[0] == "name":
                    if target[1] != "_":
                        env[target[1]] = val
                elif target[0] == "sel":
                    obj = self.eval(target[1], env, pkg)
                    if isinstance(obj, dict):
                        obj[target[2]] = val
                    else:
                        raise Unsup("field assignment on non-struct")
                elif target[0] == "index":
                    obj = self.eval(target[1], env, pkg)
                    idx = self.eval(target[2], env, pkg)
                    if isinstance(obj, list) and isinstance(idx, int):
                        obj[idx] = val
                    else:
                        raise Unsup("index assignment")
                else:
                    raise Unsup("assignment target")
                return
            if kind == "group":
                for sub in st[1]:
                    self.exec_stmt(sub, env, pkg, fn)
                return
            if kind == "incdec":
                raise Unsup("++/--")
            if kind == "expr":
                self.eval(st[1], env, pkg)
                return
            if kind == "for":
                _, names, iterable, body, line = st
                it = self.eval(iterable, env, pkg)
                if isinstance(it, GoMap):
                    seq = it.pairs  # Go randomises map order; source order is used here
                elif isinstance(it, list):
                    seq = list(enumerate(it))
                else:
                    raise Unsup("range over non-collection")
                for k, v in seq:
                    if len(names) >= 1 and names[0] != "_":
                        env[names[0]] = k
                    if len(names) >= 2 and names[1] != "_":
                        env[names[1]] = v
                    self.exec_block(body, env, pkg, fn)
                return
        except Unsup as ex:
            self.stmt_skips.append((fn.name, fn.file, st[-1], str(ex)))
            return
        raise Unsup(f"statement kind {kind}")

    # ---- expressions ----
    def binop(self, op, a, b):
        if op == "+":
            if isinstance(a, int) and isinstance(b, int):
                return a + b
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                return a + b
            sa, sb = as_str(a), as_str(b)
            return S(sa.text + sb.text, sa.gen or sb.gen)
        if isinstance(a, int) and isinstance(b, int):
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if op == "%":
                return a - b * self.binop("/", a, b)
        if op in ("==", "!="):
            ta = a.text if isinstance(a, S) else a
            tb = b.text if isinstance(b, S) else b
            return (ta == tb) == (op == "==")
        raise Unsup(f"operator {op}")

    def eval(self, e, env, pkg: Package):
        k = e[0]
        if k == "lit":
            return e[1]
        if k == "unsup":
            raise Unsup(e[1])
        if k == "name":
            n = e[1]
            if n in env:
                return env[n]
            if n == "nil":
                return None
            if n in ("true", "false"):
                return n == "true"
            if n in pkg.globals_ast:
                return self.global_value(pkg, n)
            raise Unsup(f"unknown name {n}")
        if k == "bin":
            return self.binop(e[1], self.eval(e[2], env, pkg), self.eval(e[3], env, pkg))
        if k == "unary":
            v = self.eval(e[2], env, pkg)
            if e[1] == "&":
                return v
            if e[1] == "-" and isinstance(v, (int, float)):
                return -v
            raise Unsup(f"unary {e[1]}")
        if k == "composite":
            return self.composite(e[1], e[2], env, pkg)
        if k == "convert":
            v = self.eval(e[2], env, pkg)
            return v
        if k == "index":
            obj = self.eval(e[1], env, pkg)
            idx = self.eval(e[2], env, pkg)
            if isinstance(obj, list) and isinstance(idx, int):
                return obj[idx]
            if isinstance(obj, GoMap):
                key = idx.text if isinstance(idx, S) else idx
                for kk, vv in obj.pairs:
                    if (kk.text if isinstance(kk, S) else kk) == key:
                        return vv
                raise Unsup("missing map key")
            raise Unsup("index")
        if k == "slice":
            obj = self.eval(e[1], env, pkg)
            lo = 0 if e[2] is None else self.eval(e[2], env, pkg)
            if isinstance(obj, S):
                b = go_bytes(obj.text)
                hi = len(b) if e[3] is None else self.eval(e[3], env, pkg)
                return S(b[lo:hi].decode("utf-8", "surrogateescape"), obj.gen)
            if isinstance(obj, list):
                hi = len(obj) if e[3] is None else self.eval(e[3], env, pkg)
                return obj[lo:hi]
            raise Unsup("slice")
        if k == "sel":
            base = e[1]
            if base[0] == "name" and base[1] not in env and (base[1] in pkg.imports or base[1] in self.pkgs):
                raise Unsup(f"package value {base[1]}.{e[2]}")
            obj = self.eval(base, env, pkg)
            if isinstance(obj, dict):
                if e[2] in obj:
                    return obj[e[2]]
                if obj.get("__type__") == "config.Rule" and e[2] in RULE_ZERO_FIELDS:
                    return RULE_ZERO_FIELDS[e[2]]  # Go zero value of an unset field
                raise Unsup(f"missing field {e[2]}")
            raise Unsup(f"selector .{e[2]}")
        if k == "call":
            return self.call(e, env, pkg)
        raise Unsup(f"expr {k}")

    def composite(self, typ, elems, env, pkg):
        tk = typ[0] if typ else None
        if tk == "map" or (tk is None and elems and elems[0][0] is not None and elems[0][0][0] != "name"):
            pairs = []
            for key, val, _ in elems:
                kv = self.eval(key, env, pkg) if key is not None else None
                try:
                    vv = self.eval(val, env, pkg)
                except Unsup as ex:
                    vv = Unknown(str(ex))
                pairs.append((kv, vv))
            return GoMap(pairs)
        if tk == "named" or (tk is None and elems and elems[0][0] is not None):
            d = {"__type__": typ[1] if typ else None}
            for key, val, _ in elems:
                if key is None or key[0] != "name":
                    raise Unsup("positional struct literal")
                try:
                    d[key[1]] = self.eval(val, env, pkg)
                except Unsup as ex:
                    d[key[1]] = Unknown(str(ex))
            return d
        out = []
        for _, val, _ in elems:
            try:
                out.append(self.eval(val, env, pkg))
            except Unsup as ex:
                out.append(Unknown(str(ex)))
        return out

    def call(self, e, env, pkg):
        _, fexpr, arg_asts, spread, _line = e
        if fexpr[0] == "sel" and fexpr[2] == "String" and not arg_asts and fexpr[1][0] == "sel":
            v = self.eval(fexpr[1], env, pkg)  # (*regexp.Regexp).String() on a regexp.MustCompile(literal)
            if isinstance(v, S):
                return v
            raise Unsup("String() on non-string")
        fname = None
        if fexpr[0] == "name":
            fname = fexpr[1]
        elif fexpr[0] == "sel":
            if fexpr[1][0] == "name":
                fname = f"{fexpr[1][1]}.{fexpr[2]}"
            elif fexpr[1][0] == "sel" and fexpr[1][1][0] == "name":
                fname = f"{fexpr[1][1][1]}.{fexpr[1][2]}.{fexpr[2]}"
        if fname is None:
            raise Unsup("call of complex expression")

        # calls whose arguments are evaluated leniently (element-wise)
        if fname == "append":
            base = self.eval(arg_asts[0], env, pkg)
            if isinstance(base, Unknown):
                base = [base]
            if base is None:
                base = []
            out = list(base)
            rest = arg_asts[1:]
            for j, a in enumerate(rest):
                try:
                    v = self.eval(a, env, pkg)
                except Unsup as ex:
                    v = Unknown(str(ex))
                if spread and j == len(rest) - 1:
                    out.extend(v if isinstance(v, list) else [v])
                else:
                    out.append(v)
            return out
        if fname in ("utils.Validate", "utils.ValidateWithPaths"):
            r = self.eval(arg_asts[0], env, pkg)
            vals = []
            for a in arg_asts[1:3]:
                try:
                    vals.append(self.eval(a, env, pkg))
                except Unsup as ex:
                    vals.append(Unknown(str(ex)))
            self.records.append((r, vals[0], vals[1], self.cur_file, fname))
            return r

        args = [self.eval(a, env, pkg) for a in arg_asts]

        if fname == "utils.GenerateSampleSecrets":
            return self.sample_secrets(as_str(args[0]), args[1])
        if fname == "secrets.NewSecret":
            return self.new_secret(as_str(args[0]).text)
        if fname == "secrets.NewSecretWithEntropy":
            return self.new_secret(as_str(args[0]).text, float(args[1]))
        if fname == "newPlausibleSecret" and pkg.name == "rules":
            return self.plausible_secret(as_str(args[0]).text, pkg)
        if fname in ("len",):
            v = args[0]
            return len(go_bytes(v.text)) if isinstance(v, S) else len(v)
        if fname in ("string", "int", "int64", "float64"):
            return args[0]
        if fname == "fmt.Sprintf":
            return self.sprintf(args)
        if fname == "strings.Repeat":
            s = as_str(args[0])
            return S(s.text * args[1], s.gen)
        if fname == "strings.ToUpper":
            s = as_str(args[0])
            return S(s.text.upper(), s.gen)
        if fname == "strings.ToLower":
            s = as_str(args[0])
            return S(s.text.lower(), s.gen)
        if fname == "strings.Join":
            parts = [as_str(x) for x in args[0]]
            sep = as_str(args[1])
            return S(sep.text.join(p.text for p in parts), any(p.gen for p in parts))
        if fname == "strconv.Itoa":
            return S(str(args[0]))
        if fname == "strconv.FormatInt":
            n, b = args
            digits = "0123456789abcdefghijklmnopqrstuvwxyz"
            if n == 0:
                return S("0")
            neg, n, out = n < 0, abs(n), ""
            while n:
                out = digits[n % b] + out
                n //= b
            return S(("-" if neg else "") + out)
        if fname.endswith(".EncodeToString"):
            enc = fname.split(".")[-2]
            s = as_str(args[0])
            raw = go_bytes(s.text)
            if enc == "StdEncoding":
                o = base64.b64encode(raw)
            elif enc == "RawStdEncoding":
                o = base64.b64encode(raw).rstrip(b"=")
            elif enc == "URLEncoding":
                o = base64.urlsafe_b64encode(raw)
            elif enc == "RawURLEncoding":
                o = base64.urlsafe_b64encode(raw).rstrip(b"=")
            else:
                raise Unsup(f"encoding {enc}")
            return S(o.decode(), s.gen)
        if fname in ("regexp.MustCompile", "utils.Ptr"):
            return args[0]
        # user functions
        if "." not in fname:
            if fname in pkg.funcs:
                return self.call_func(pkg, pkg.funcs[fname], args)
            raise Unsup(f"unknown function {fname}")
        qual, name = fname.split(".", 1)
        if qual in self.pkgs and "." not in name and name in self.pkgs[qual].funcs:
            return self.call_func(self.pkgs[qual], self.pkgs[qual].funcs[name], args)
        raise Unsup(f"unsupported call {fname}")

    def sprintf(self, args):
        fmt = as_str(args[0])
        rest = list(args[1:])
        gen = fmt.gen
        out = []
        i = 0
        t = fmt.text
        while i < len(t):
            c = t[i]
            if c != "%":
                out.append(c)
                i += 1
                continue
            verb = t[i + 1]
            i += 2
            if verb == "%":
                out.append("%")
                continue
            if verb not in "sdv":
                raise Unsup(f"Sprintf verb %{verb}")
            v = rest.pop(0)
            if isinstance(v, S):
                out.append(v.text)
                gen = gen or v.gen
            elif isinstance(v, bool):
                out.append("true" if v else "false")
            elif isinstance(v, int):
                out.append(str(v))
            else:
                raise Unsup("Sprintf argument")
        if rest:
            raise Unsup("Sprintf extra args")
        return S("".join(out), gen)

    def plausible_secret(self, regex, pkg):
        """Mirror of rules.newPlausibleSecret (generic.go): retry until the value
        contains a digit 1-9 and no DefaultStopWords entry (case-insensitive)."""
        words = self.global_value(pkg, "DefaultStopWords")
        if not isinstance(words, list) or any(not isinstance(w, S) for w in words):
            raise Unsup("DefaultStopWords not available")
        wl = [w.text.lower() for w in words]
        g = RegexGen(regex)
        for _ in range(5000):
            s = g.gen(self.next_rng(regex))
            check_generated(regex, s)
            if not re.search(r"[1-9]", s):
                continue
            ls = s.lower()
            if any(w in ls for w in wl):
                continue
            return S(s, True)
        raise Unsup("newPlausibleSecret: no candidate without stop words")


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------
def load_templates(repo: Repo) -> list[str]:
    """The sample templates of utils.GenerateSampleSecrets, read from the mirror."""
    src = repo.show(GENERATE_GO)
    toks = lex(src)
    for j, t in enumerate(toks):
        if t.kind == "ident" and t.val == "samples" and toks[j + 1].val == ":=":
            p = Parser(toks, j + 2)
            ast = p.parse_expr()
            m = Interp(Package("x"), Package("y"), []).eval(ast, {}, Package("z"))
            return [v.text for _, v in m.pairs]
    raise SystemExit("could not find GenerateSampleSecrets templates")


def registered_rules(repo: Repo) -> list[str]:
    src = repo.show(MAIN_GO)
    m = re.search(r"configRules\s*:=\s*\[\]\*config\.Rule\{(.*?)\n\t\}", src, re.S)
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return re.findall(r"rules\.(\w+)\(\)", body)


def split_of(rule_id: str) -> str:
    h = int.from_bytes(hashlib.sha256(("secrets-corpus-split|" + rule_id).encode()).digest()[:8], "big")
    return "test" if h % TEST_FRACTION_MOD == 0 else "dev"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mirror", help="bare git dir of betterleaks (from the fetch tool)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                 "benchmarks", "secrets_corpus"))
    args = ap.parse_args()

    repo = Repo(args.mirror)
    rules_pkg, utils_pkg = Package("rules"), Package("utils")
    for path in repo.ls(RULES_DIR):
        if path.endswith(".go") and not path.endswith("_test.go"):
            rules_pkg.load_file(path, repo.show(path))
    for path in repo.ls(UTILS_DIR):
        if path.endswith(".go") and not path.endswith("_test.go"):
            utils_pkg.load_file(path, repo.show(path))
    templates = load_templates(repo)
    interp = Interp(rules_pkg, utils_pkg, templates)

    skipped = collections.Counter()       # reason -> count of sample expressions
    skipped_by_rule = collections.defaultdict(collections.Counter)
    not_found = []
    no_validate = []  # registered rule functions that publish no samples
    for fn_name in registered_rules(repo):
        fn = rules_pkg.funcs.get(fn_name)
        if fn is None:
            not_found.append(fn_name)
            continue
        interp.seed_key = fn_name
        interp.gen_counter = 0
        before = len(interp.records)
        try:
            interp.call_func(rules_pkg, fn, [])
        except Unsup as ex:
            skipped[f"rule function failed: {ex}"] += 1
            skipped_by_rule[fn_name][str(ex)] += 1
        if len(interp.records) == before:
            no_validate.append(fn_name)

    source_prefix = f"betterleaks@{repo.commit}:"
    out = {"secrets": [], "lookalikes": []}
    seen = {"secrets": set(), "lookalikes": set()}
    dup = collections.Counter()
    rules_seen = {"secrets": set(), "lookalikes": set()}
    for r, tps, fps, file, _how in interp.records:
        rid = r.get("RuleID") if isinstance(r, dict) else None
        if not isinstance(rid, S):
            n = (len(tps) if isinstance(tps, list) else 1) + (len(fps) if isinstance(fps, list) else 0)
            skipped["rule id not reproducible"] += n
            continue
        rid = rid.text
        for kind, coll in (("secrets", tps), ("lookalikes", fps)):
            if coll is None:
                continue
            items = []
            if isinstance(coll, GoMap):
                items = [(v, k) for k, v in coll.pairs]
            elif isinstance(coll, list):
                items = [(v, None) for v in coll]
            else:
                items = [(coll, None)]
            for v, path_hint in items:
                if isinstance(v, Unknown):
                    skipped[f"{kind}: {v.reason}"] += 1
                    skipped_by_rule[rid][v.reason] += 1
                    continue
                if not isinstance(v, S):
                    skipped[f"{kind}: non-string sample"] += 1
                    continue
                try:
                    v.text.encode("utf-8")
                except UnicodeEncodeError:
                    skipped[f"{kind}: not valid UTF-8"] += 1
                    continue
                if v.text == "":
                    skipped[f"{kind}: empty text (rule decides by file path only)"] += 1
                    continue
                if v.text in seen[kind]:
                    dup[kind] += 1
                    continue
                seen[kind].add(v.text)
                rules_seen[kind].add(rid)
                row = {"rule": rid, "text": v.text, "source": source_prefix + file,
                       "split": split_of(rid), "generated": v.gen}
                if isinstance(path_hint, S):
                    row["path"] = path_hint.text
                out[kind].append(row)

    # A text published as a true positive of one rule and a false positive of another
    # (or of the same rule under a different file path) is a secret for our purposes.
    overlap = seen["secrets"] & seen["lookalikes"]
    out["lookalikes"] = [r for r in out["lookalikes"] if r["text"] not in overlap]
    rules_seen["lookalikes"] = {r["rule"] for r in out["lookalikes"]}
    skipped["lookalikes: same text is a published true positive (kept in secrets only)"] += len(overlap)

    for kind in out:
        with open(os.path.join(args.out, f"{kind}.jsonl"), "w", encoding="utf-8", newline="\n") as f:
            for row in out[kind]:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    stats = {
        "commit": repo.commit,
        "registered_rule_functions": len(registered_rules(repo)),
        "rule_functions_not_found": not_found,
        "validate_calls": len(interp.records),
        "rule_functions_without_samples": no_validate,
        "templates_per_GenerateSampleSecrets": len(templates),
    }
    for kind in out:
        rows = out[kind]
        stats[kind] = {
            "samples": len(rows),
            "rules": len(rules_seen[kind]),
            "generated": sum(r["generated"] for r in rows),
            "literal": sum(not r["generated"] for r in rows),
            "duplicates_dropped": dup[kind],
            "per_split": {s: {"samples": sum(r["split"] == s for r in rows),
                              "rules": len({r["rule"] for r in rows if r["split"] == s})}
                          for s in ("dev", "test")},
        }
    all_rules = rules_seen["secrets"] | rules_seen["lookalikes"]
    stats["distinct_rules_total"] = len(all_rules)
    stats["rules_per_split"] = {s: sum(split_of(r) == s for r in all_rules) for s in ("dev", "test")}
    stats["lookalikes_dropped_as_published_true_positives"] = len(overlap)
    stats["skipped_samples_total"] = sum(skipped.values())
    stats["skipped_samples_by_reason"] = dict(sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))
    stats["skipped_by_rule"] = {k: dict(v) for k, v in sorted(skipped_by_rule.items())}
    stats["unsupported_statements"] = sorted({f"{f}:{ln} ({fn}): {why}" for fn, f, ln, why in interp.stmt_skips})
    with open(os.path.join(args.out, "build_stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(json.dumps({k: v for k, v in stats.items() if k not in ("skipped_by_rule",)}, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
