"""Build a corpus of harmless technical look-alikes: lines a secret redactor must leave unchanged.

What: real lines of text that hold strings which look random or numeric like a secret but are none:
git commit SHAs, UUIDs, hex digests, base64 digests, base64 blobs, version strings, phone numbers,
product/shipping numbers (ISBN, EAN, GS1-128, container codes, ...) and timestamps. We write no case:
every line is taken, unchanged except for trimming, from a public source on this machine, and its
provenance is recorded in the row's "source".

Where from (all read-only):
- a bare git clone of github:betterleaks/betterleaks (the command's argument): `git log --all` output (commit hashes
  with their real subject lines, subjects that name commits) and, at HEAD, go.mod, go.sum, the GitHub
  workflows, the Dockerfiles and report_templates/README.md (never the rule set, its config or tests);
- the distributions installed in this venv's site-packages, file by file as each RECORD lists them
  (provenance: distribution==version), except the secret scanners, credential/JWT/seed-phrase
  libraries, Faker, phonenumbers and python-stdnum (used below only for their published examples)
  and this project itself;
- the standard library of the venv's base interpreter (CPython 3.11.7; no site-packages, no tests);
- a few Debian packages' shipped files: the Node.js docs and changelogs (Markdown only; the crypto, TLS
  and HTTPS pages left out), CMake's modules and help, util-linux's mount examples, Vim's docs and
  tutors, Tk's Tcl library, and the md5sums control files of those packages (dpkg's database);
- PyPI `phonenumbers` (Google's libphonenumber metadata): example_number_for_type(region, type) for
  every supported region, fixed-line, mobile and toll-free, formatted INTERNATIONAL/NATIONAL/E164;
- PyPI `python-stdnum`: the doctest lines (inputs and outputs) of the module docstrings of book, music,
  product, shipping and chemical number formats only (no bank, card, tax or personal ids).

How selected:
- a file path (relative to its root) that contains test, fixture, secret, token, key, auth, credential or
  password is not read;
- a line is dropped when it holds a credential-ish word (BAD_WORDS), a known credential prefix
  (CRED_PREFIX), an e-mail address or a URL with user:password, or when a base64 blob decodes to text
  holding such a word; lines longer than 2000 characters are not read;
- each kind has its detector (see DETECTORS and the special sources); a line is stripped of surrounding
  whitespace and, when longer than 300 characters, trimmed to at most 300 characters around the
  look-alike, cut at whitespace (dropped when that is not possible);
- duplicates are dropped; a text goes to the first kind (in KINDS order) that selects it;
- per kind, candidates are grouped by family (betterleaks, pypi, cpython, debian, phonenumbers,
  stdnum) and, within a family, by sub-source (git log format or file, distribution, file, region,
  module). Within a sub-source they rank by sha256(text) and at most SUB_CAP are kept. Each family's
  list takes every sub-source's best candidate (in sha256 order), then every second best, and so on;
  the families then take turns (sorted by name) until the kind's TARGET is reached. No randomness:
  same machine, same inputs, same bytes.
- split: "test" when int(sha256("lookalikes-split|" + text), 16) % 3 == 0, else "dev".

Run from the project root: `python -m tools.lookalike_corpus BETTERLEAKS_GIT_DIR [--out DIR]` (needs
`phonenumbers` and `python-stdnum` installed). Writes lookalikes.jsonl and build_stats.json to DIR
(default: benchmarks/lookalike_corpus, where the benchmarks and tests read them).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import cast

import phonenumbers
import stdnum

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "lookalike_corpus"
MIRROR_NAME = "betterleaks/betterleaks"
MIRROR_FILES = (
    "go.mod", "go.sum", "Dockerfile", "goreleaser.Dockerfile", ".goreleaser.yml",
    "report_templates/README.md",
)
MIRROR_DIRS = (".github/workflows/",)
SITE = Path(sysconfig.get_paths()["purelib"])
STDLIB = Path(sysconfig.get_paths()["stdlib"])
DEBIAN_ROOTS = (
    # (root, file name suffixes read or () for all, file names left out)
    ("/usr/share/doc/nodejs", (".md",), ("crypto.md", "webcrypto.md", "tls.md", "https.md")),
    ("/usr/share/cmake-3.25", (), ()),
    ("/usr/share/doc/mount", (), ()),
    ("/usr/share/vim/vim90/doc", (), ()),
    ("/usr/share/vim/vim90/tutor", (), ()),
    ("/usr/share/tcltk/tk8.6", (), ()),
)
DPKG_INFO = Path("/var/lib/dpkg/info")
DPKG_STATUS = Path("/var/lib/dpkg/status")

# distributions never read from site-packages: secret scanners, credential/JWT/seed-phrase code, fake
# data, this project; phonenumbers and python-stdnum are read only through their published examples.
EXCLUDED_DISTS = {
    "detect-secrets", "pybetterleaks", "pyjwt", "mnemonic", "faker", "memory-proxy", "phonenumbers",
    "python-stdnum", "tokenizers",
}
STDNUM_MODULES = (
    "casrn", "ean", "grid", "gs1_128", "imo", "isan", "isbn", "isil", "ismn", "iso6346", "isrc", "issn",
)
PHONE_TYPES = ("FIXED_LINE", "MOBILE", "TOLL_FREE")
PHONE_FORMATS = ("INTERNATIONAL", "NATIONAL", "E164")

KINDS = (
    "git_sha", "uuid", "hex_digest", "base64_digest", "base64_blob", "version", "phone",
    "product_number", "timestamp_id",
)
TARGET = 100  # lines per kind at most
# lines per kind from one sub-source (file, distribution, region, module) at most; base64 blobs come from
# few files (CA bundles, Tk's icons), so they may take more from each; timestamps fewer (long change logs)
SUB_CAP = {"base64_blob": 45, "timestamp_id": 10}
SUB_CAP_DEFAULT = 20
MAX_LINE = 2000  # longer lines (minified code, data) are not read
MAX_TEXT = 300  # a kept line is trimmed to this many characters around the look-alike
MAX_FILE = 4 * 1024 * 1024

BAD_PATH = re.compile(r"test|fixture|secret|token|key|auth|credential|password", re.I)
BAD_WORDS = re.compile(
    r"passw|secret|token|api[_-]?key|apikey|private|credential|bearer|authori[sz]|auth(?!or)|key|salt"
    r"|nonce|hmac|cookie|session|signature|\bsigned\b|\bseed|mnemonic|wallet|login|jwt|\botp\b|client[_-]id",
    re.I,
)
CRED_PREFIX = re.compile(
    r"AKIA|ASIA[A-Z0-9]{12}|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|\bsk-|sk_live|rk_live|pk_live"
    r"|\bhf_[A-Za-z]|AIza|ya29\.|npm_[A-Za-z0-9]{20}|pypi-Ag|eyJ|-----BEGIN"
)
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
URL_USERINFO = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
DIGIT = re.compile(r"\d")

HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{7,128}(?![0-9A-Za-z])")
GIT_CONTEXT = re.compile(
    r"/(?:commit|commits|blob|tree|raw|file|compare)/|[?&;]id=|drc=|raw\.githubusercontent\.com/"
    r"|\bcommit\b|\brevision\b|\brevert|\bmerge\b|\bsha\b|git_revision|\brev\b|uses: \S+@",
    re.I,
)
DIGEST_CONTEXT = re.compile(
    r"sha-?(?:1|224|256|384|512)|md5|hash|digest|checksum|\"content\"|blobs/|etag|\bcrc|fingerprint"
    r"|integrity",
    re.I,
)
DIGEST_LENGTHS = {32, 40, 56, 64, 96, 128}
COLON_HEX = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}:){15,63}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:])")
UUID = re.compile(
    r"(?<![0-9A-Za-z-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"(?![0-9A-Za-z-])"
)
RECORD_LINE = re.compile(r"^[^,\s]+,sha256=[A-Za-z0-9_-]{43},\d+$")
B64_DIGEST = re.compile(
    r"(?<![A-Za-z0-9])h1:[A-Za-z0-9+/]{43}="
    r"|\bsha(?:256|384|512)-[A-Za-z0-9+/]{43,86}={0,2}"
    r"|\bsha(?:1|256|384|512)[=:][A-Za-z0-9+/_-]{27,86}={0,2}"
)
B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_.%=-])[A-Za-z0-9+/]{20,}={0,2}(?![A-Za-z0-9+/_.%=-])")
VERSION_LINE = re.compile(
    r"^Version: \S*\d"  # METADATA header (only read there)
    r"|^Requires-Dist: .*\d+\.\d+"  # METADATA header (only read there)
    r"|^\S+ v\d+\.\d+\.\d+\S*(?: // indirect)?$"  # go.mod require
    r"|^## \d{4}-\d{2}-\d{2}, Version \d+\.\d+\.\d+"  # Node.js changelog heading
    r"|^(?:__version__|VERSION|version)\s*(?::\s*\w+\s*)?=\s*['\"]v?\d+\.\d+"
)
VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?:[-.+]?[A-Za-z0-9]+(?:\.\d+)*)*")
ISO_TIME = re.compile(
    r"\b\d{4}-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
RFC_TIME = re.compile(
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" \d{4} \d{2}:\d{2}:\d{2}"
)
EPOCH = re.compile(r"(?<![\w.])1\d{9}(?:\d{3})?(?:\.\d+)?(?![\w.])")
EPOCH_CONTEXT = re.compile(r"time|stamp|epoch|created|modified|expires", re.I)
TRACE_ID = re.compile(r"Root=1-[0-9a-f]{8}-[0-9a-f]{24}")
DEBIAN_SOURCE = re.compile(r"debian:(.+?):(?:/|DEBIAN/)")
ISBN_REF = re.compile(r"ISBN[-: ]*(?:1[03][: ]*)?[0-9][0-9 -]{8,}[0-9Xx]")


@dataclass(frozen=True)
class Candidate:
    kind: str
    text: str
    family: str
    sub: str
    source: str


Span = tuple[int, int]
Detector = Callable[[str, str], "Span | None"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(text: str) -> str:
    return "test" if int(hashlib.sha256(("lookalikes-split|" + text).encode()).hexdigest(), 16) % 3 == 0 else "dev"


def mixed(s: str, lower: int = 1, upper: int = 0, digit: int = 1) -> bool:
    return (sum(c.islower() for c in s) >= lower and sum(c.isupper() for c in s) >= upper
            and sum(c.isdigit() for c in s) >= digit)


# ---- detectors: (stripped line, file name) -> span of the look-alike, or None -------------------------
def git_sha(line: str, where: str) -> Span | None:
    if not GIT_CONTEXT.search(line):
        return None
    for m in HEX_RUN.finditer(line):
        run = m.group()
        if len(run) <= 40 and run == run.lower() and mixed(run):
            return m.span()
    return None


def uuid(line: str, where: str) -> Span | None:
    m = UUID.search(line)
    return m.span() if m else None


def hex_digest(line: str, where: str) -> Span | None:
    if where.endswith(".md5sums"):
        if BAD_PATH.search(line.split(maxsplit=1)[-1]):
            return None
    elif GIT_CONTEXT.search(line) or not DIGEST_CONTEXT.search(line):
        return None
    for m in HEX_RUN.finditer(line):
        run = m.group()
        if len(run) in DIGEST_LENGTHS and run in (run.lower(), run.upper()) and mixed(run, lower=0):
            return m.span()
    m2 = COLON_HEX.search(line)
    return m2.span() if m2 else None


def base64_digest(line: str, where: str) -> Span | None:
    if where == "RECORD":
        ok = RECORD_LINE.match(line) and not BAD_PATH.search(line.split(",", 1)[0])
        return (0, len(line)) if ok else None
    for m in B64_DIGEST.finditer(line):
        value = re.split(r"[-=:]", m.group(), maxsplit=1)[1]
        if not re.fullmatch(r"[0-9a-fA-F]+", value) and mixed(value, upper=1):
            return m.span()
    return None


def _decoded_is_clean(run: str) -> bool:
    try:
        raw = base64.b64decode(run, validate=True)
    except (binascii.Error, ValueError):
        return False
    text = raw.decode("latin-1")
    return not (BAD_WORDS.search(text) or CRED_PREFIX.search(text))


def base64_blob(line: str, where: str) -> Span | None:
    low = line.lower()
    context = "base64" in low or "b64" in low or "data:" in low
    for m in B64_RUN.finditer(line):
        run = m.group()
        if len(run) % 4 or not mixed(run, lower=2, upper=2, digit=2):
            continue
        whole = m.span() == (0, len(line)) and len(run) >= 40
        if not (whole or context) or not (context or re.search(r"[+/=]", run)):
            continue
        if _decoded_is_clean(run):
            return m.span()
    return None


def version(line: str, where: str) -> Span | None:
    m = VERSION_LINE.search(line)
    if not m or (line.startswith(("Version: ", "Requires-Dist: ")) and where != "METADATA-header"):
        return None
    v = VERSION.search(line, m.start() + (len("Requires-Dist: ") if line.startswith("Requires-Dist") else 0))
    return v.span() if v else None


def timestamp_id(line: str, where: str) -> Span | None:
    for pattern in (ISO_TIME, RFC_TIME, TRACE_ID):
        m = pattern.search(line)
        if m:
            return m.span()
    m = EPOCH.search(line)
    if m and EPOCH_CONTEXT.search(line) and not GIT_CONTEXT.search(line):
        return m.span()
    return None


def isbn_reference(line: str, where: str) -> Span | None:
    m = ISBN_REF.search(line)
    return m.span() if m else None


DETECTORS: dict[str, Detector] = {
    "git_sha": git_sha, "uuid": uuid, "hex_digest": hex_digest, "base64_digest": base64_digest,
    "base64_blob": base64_blob, "version": version, "product_number": isbn_reference,
    "timestamp_id": timestamp_id,
}


# ---- line handling ------------------------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.candidates: list[Candidate] = []
        self.dropped: Counter[str] = Counter()
        self.files_read: Counter[str] = Counter()

    def clean(self, line: str) -> str | None:
        """The stripped line, or None (counted) when it must not enter the corpus."""
        s = line.strip()
        if not s:
            return None
        for reason, pattern in (("credential word", BAD_WORDS), ("credential prefix", CRED_PREFIX),
                                ("e-mail address", EMAIL), ("URL with user:password", URL_USERINFO)):
            if pattern.search(s):
                self.dropped[reason] += 1
                return None
        return s

    def add(self, kind: str, text: str, span: Span, family: str, sub: str, source: str) -> None:
        trimmed = trim(text, *span)
        if trimmed is None:
            self.dropped["look-alike cannot be trimmed to 300 characters at whitespace"] += 1
            return
        self.candidates.append(Candidate(kind, trimmed, family, sub, source))

    def scan(self, lines: Iterable[str], family: str, sub: str, source: str, where: str,
             kinds: Iterable[str] = DETECTORS) -> None:
        self.files_read[family] += 1
        for line in lines:
            if len(line) > MAX_LINE or not DIGIT.search(line):
                continue
            s = self.clean(line)
            if s is None:
                continue
            for kind in kinds:
                span = DETECTORS[kind](s, where)
                if span is not None:
                    self.add(kind, s, span, family, sub, source)


def trim(line: str, start: int, end: int) -> str | None:
    if len(line) <= MAX_TEXT:
        return line
    if end - start > MAX_TEXT:
        return None
    slack = MAX_TEXT - (end - start)
    a = max(0, start - slack // 2)
    b = min(len(line), a + MAX_TEXT)
    a = max(0, b - MAX_TEXT)
    if a > 0:
        ws = [i for i in range(a, start) if line[i].isspace()]
        if not ws:
            return None
        a = ws[0] + 1
    if b < len(line):
        ws = [i for i in range(end, b + 1) if i < len(line) and line[i].isspace()]
        if not ws:
            return None
        b = ws[-1]
    out = line[a:b].strip()
    return out if len(out) <= MAX_TEXT else None


def read_text(path: Path) -> list[str] | None:
    try:
        if path.stat().st_size > MAX_FILE:
            return None
        raw = path.read_bytes()
    except OSError:
        return None
    if b"\0" in raw[:8192]:
        return None
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


# ---- sources ------------------------------------------------------------------------------------------
def git(mirror: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(mirror), *args], check=True, capture_output=True,
                          ).stdout.decode("utf-8")


def from_mirror(mirror: Path, sink: Sink, info: dict[str, object]) -> None:
    head = git(mirror, "rev-parse", "HEAD^{commit}").strip()
    info["betterleaks"] = {"mirror": str(mirror), "head": head,
                           "commits_all_refs": int(git(mirror, "rev-list", "--all", "--count").strip())}
    prefix = f"git:{MIRROR_NAME}@{head}"
    log = git(mirror, "log", "--all", "--format=%H%x00%h%x00%s")
    sink.files_read["betterleaks"] += 1
    for row in sorted(set(log.splitlines())):
        full, short, subject = row.split("\0")
        s = sink.clean(subject)
        if s is None:
            continue
        for fmt, text in (("%H %s", f"{full} {s}"), ("%h %s", f"{short} {s}")):
            sink.add("git_sha", text, (0, len(full if fmt == "%H %s" else short)), "betterleaks",
                     f"git log {fmt}", f"{prefix} (all refs): git log --format='{fmt}'")
        span = git_sha(s, "")
        if span is not None and HEX_RUN.search(s):
            sink.add("git_sha", s, span, "betterleaks", "git log %s", f"{prefix} (all refs): git log --format='%s'")
    paths = git(mirror, "ls-tree", "-r", "--name-only", head).splitlines()
    for path in sorted(paths):
        if path in MIRROR_FILES or (path.startswith(MIRROR_DIRS) and path.endswith((".yml", ".yaml"))):
            lines = git(mirror, "show", f"{head}:{path}").splitlines()
            sink.scan(lines, "betterleaks", path, f"{prefix}:{path}", path.rsplit("/", 1)[-1])


def from_site_packages(sink: Sink, info: dict[str, object]) -> None:
    owners: dict[str, metadata.Distribution] = {}
    for dist in sorted(metadata.distributions(path=[str(SITE)]), key=lambda d: d.metadata["Name"].lower()):
        for f in dist.files or ():
            rel = str(f)
            if not rel.startswith("..") and rel not in owners:
                owners[rel] = dist
    used: dict[str, dict[str, str | None]] = {}
    for rel in sorted(owners):
        dist = owners[rel]
        name = dist.metadata["Name"]
        if name.lower().replace("_", "-") in EXCLUDED_DISTS or "__pycache__" in rel:
            continue
        if BAD_PATH.search(rel):
            continue
        lines = read_text(SITE / rel)
        if lines is None:
            continue
        label = f"{name}=={dist.version}"
        used[label] = {"license": license_of(dist)}
        source = f"pypi:{label}:{rel}"
        fname = rel.rsplit("/", 1)[-1]
        if fname == "RECORD":
            sink.scan(lines, "pypi", label, source, "RECORD", kinds=("base64_digest",))
        elif fname == "METADATA" and rel.endswith(".dist-info/METADATA"):
            cut = lines.index("") if "" in lines else len(lines)
            sink.scan(lines[:cut], "pypi", label, source, "METADATA-header", kinds=("version",))
            sink.scan(lines[cut:], "pypi", label, source, "METADATA")
        else:
            sink.scan(lines, "pypi", label, source, fname)
    info["pypi_distributions_read"] = dict(sorted(used.items()))


def license_of(dist: metadata.Distribution) -> str | None:
    """License-Expression, else License (first line), else the license classifiers."""
    for field in ("License-Expression", "License"):
        values = dist.metadata.get_all(field, [])
        if values and values[0].strip():
            return values[0].strip().splitlines()[0][:80]
    classifiers = [c.rsplit(" :: ", 1)[-1] for c in dist.metadata.get_all("Classifier", [])
                   if c.startswith("License ::")]
    return "; ".join(classifiers) or None


def walk(root: Path, skip_dirs: tuple[str, ...] = ()) -> Iterator[Path]:
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if x != "__pycache__" and os.path.join(rel, x).lstrip("./") not in skip_dirs)
        for f in sorted(files):
            yield Path(d) / f


def from_stdlib(sink: Sink, info: dict[str, object]) -> None:
    ver = ".".join(map(str, sys.version_info[:3]))
    info["cpython"] = {"version": ver, "stdlib": str(STDLIB)}
    for path in walk(STDLIB, skip_dirs=("site-packages", "lib-dynload")):
        rel = str(path.relative_to(STDLIB))
        if BAD_PATH.search(rel):
            continue
        lines = read_text(path)
        if lines is not None:
            sink.scan(lines, "cpython", rel, f"cpython:{ver}:Lib/{rel}", path.name)


def dpkg_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for block in DPKG_STATUS.read_text(encoding="utf-8").split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", block, re.M))
        if "Package" in fields and "Version" in fields and "installed" in fields.get("Status", ""):
            versions[fields["Package"]] = fields["Version"]
    return versions


def dpkg_owners() -> dict[str, str]:
    owners: dict[str, str] = {}
    for lst in sorted(DPKG_INFO.glob("*.list")):
        pkg = lst.name[: -len(".list")].split(":")[0]
        for p in lst.read_text(encoding="utf-8", errors="replace").splitlines():
            owners.setdefault(p, pkg)
    return owners


def from_debian(sink: Sink, info: dict[str, object]) -> None:
    owners, versions = dpkg_owners(), dpkg_versions()
    used: set[str] = set()
    for root, suffixes, left_out in DEBIAN_ROOTS:
        for path in walk(Path(root)):
            rel = str(path.relative_to(root))
            if BAD_PATH.search(rel) or (suffixes and not path.name.endswith(suffixes)) or path.name in left_out:
                continue
            pkg = owners.get(str(path))
            lines = read_text(path) if pkg else None
            if pkg is None or lines is None:
                continue
            used.add(pkg)
            sink.scan(lines, "debian", str(path), f"debian:{pkg}={versions[pkg]}:{path}", path.name)
    for pkg in sorted(used):
        md5 = next((p for p in (DPKG_INFO / f"{pkg}.md5sums", *DPKG_INFO.glob(f"{pkg}:*.md5sums")) if p.exists()),
                   None)
        if md5 is not None:
            sink.scan(md5.read_text(encoding="utf-8").splitlines(), "debian", "DEBIAN/md5sums",
                      f"debian:{pkg}={versions[pkg]}:DEBIAN/md5sums", md5.name, kinds=("hex_digest",))
    info["debian_packages_read"] = {pkg: versions[pkg] for pkg in sorted(used)}


def from_phonenumbers(sink: Sink, info: dict[str, object]) -> None:
    ver = metadata.version("phonenumbers")
    info["phonenumbers"] = ver
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for tname in PHONE_TYPES:
            num = phonenumbers.example_number_for_type(region, getattr(phonenumbers.PhoneNumberType, tname))
            if num is None:
                continue
            for fname in PHONE_FORMATS:
                text = phonenumbers.format_number(num, getattr(phonenumbers.PhoneNumberFormat, fname))
                sink.add("phone", text, (0, len(text)), "phonenumbers", region,
                         f"pypi:phonenumbers=={ver}:example_number_for_type({region}, {tname}) as {fname}")


def from_stdnum(sink: Sink, info: dict[str, object]) -> None:
    ver = stdnum.__version__
    info["python-stdnum"] = {"version": ver, "modules": list(STDNUM_MODULES)}
    for name in STDNUM_MODULES:
        doc = importlib.import_module(f"stdnum.{name}").__doc__ or ""
        source = f"pypi:python-stdnum=={ver}:stdnum/{name}.py docstring (doctest)"
        in_example = False
        for raw in doc.splitlines():
            s = raw.strip()
            if not s:
                in_example = False
                continue
            prompt = s.startswith(">>> ")
            in_example = in_example or prompt
            if not in_example or len(re.findall(r"\d", s)) < 6 or re.search(r"Error|Traceback", s):
                continue
            cleaned = sink.clean(s)
            if cleaned is not None:
                sink.add("product_number", cleaned, (0, len(cleaned)), "stdnum", name, source)


# ---- selection ----------------------------------------------------------------------------------------
def family_order(cands: list[Candidate], cap: int) -> list[Candidate]:
    """Every sub-source's best (lowest sha256) candidate, in sha256 order, then every second best, ..."""
    by_sub: dict[str, list[Candidate]] = defaultdict(list)
    for c in cands:
        by_sub[c.sub].append(c)
    ranked = [sorted(v, key=lambda c: (sha(c.text), c.source))[:cap] for _, v in sorted(by_sub.items())]
    out: list[Candidate] = []
    for r in range(max((len(v) for v in ranked), default=0)):
        out.extend(sorted((v[r] for v in ranked if len(v) > r), key=lambda c: (sha(c.text), c.source)))
    return out


def select(cands: list[Candidate]) -> tuple[list[Candidate], dict[str, int]]:
    taken: set[str] = set()
    chosen: list[Candidate] = []
    pool: dict[str, int] = {}
    for kind in KINDS:
        fams: dict[str, list[Candidate]] = defaultdict(list)
        seen: set[str] = set()
        for c in sorted((c for c in cands if c.kind == kind), key=lambda c: (c.text, c.source)):
            if c.text not in taken and c.text not in seen:  # one row per text: the first source by name
                seen.add(c.text)
                fams[c.family].append(c)
        pool[kind] = len(seen)
        queues = [family_order(v, SUB_CAP.get(kind, SUB_CAP_DEFAULT)) for _, v in sorted(fams.items())]
        picked: list[Candidate] = []
        r = 0
        while len(picked) < TARGET and any(len(q) > r for q in queues):
            for q in queues:
                if len(q) > r and len(picked) < TARGET:
                    picked.append(q[r])
            r += 1
        taken.update(c.text for c in picked)
        chosen.extend(picked)
    return chosen, pool


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("mirror", type=Path, help="bare git dir of github:betterleaks/betterleaks")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the corpus goes (default: {OUT})")
    args = parser.parse_args(argv)
    sink = Sink()
    info: dict[str, object] = {}
    from_mirror(args.mirror, sink, info)
    for step in (from_site_packages, from_stdlib, from_debian, from_phonenumbers, from_stdnum):
        step(sink, info)
    chosen, pool = select(sink.candidates)
    rows = sorted(({"kind": c.kind, "text": c.text, "source": c.source, "split": split_of(c.text)}
                   for c in chosen), key=lambda r: (KINDS.index(r["kind"]), r["source"], r["text"]))
    assert len({r["text"] for r in rows}) == len(rows) and all(r["text"] for r in rows)
    with open(args.out / "lookalikes.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def debian_label(row: dict[str, str]) -> str:
        m = DEBIAN_SOURCE.match(row["source"])
        return m.group(1) if m else ""

    def count(key: Callable[[dict[str, str]], str]) -> dict[str, int]:
        return dict(sorted(Counter(key(r) for r in rows).items()))

    families = {c.source: c.family for c in chosen}
    pypi = cast(dict[str, dict[str, str | None]], info.get("pypi_distributions_read", {}))
    pypi = {**pypi, f"phonenumbers=={info['phonenumbers']}": {"license": license_of(metadata.distribution("phonenumbers"))},
            f"python-stdnum=={stdnum.__version__}": {"license": license_of(metadata.distribution("python-stdnum"))}}
    stats = {
        "total": len(rows),
        "per_split": count(lambda r: r["split"]),
        "per_kind": {k: {"all": sum(r["kind"] == k for r in rows),
                         "dev": sum(r["kind"] == k and r["split"] == "dev" for r in rows),
                         "test": sum(r["kind"] == k and r["split"] == "test" for r in rows),
                         "candidates": pool[k]} for k in KINDS},
        "per_kind_family_split": count(lambda r: f"{r['kind']} | {families[r['source']]} | {r['split']}"),
        "per_family": count(lambda r: families[r["source"]]),
        "per_source": count(lambda r: f"{r['kind']} | {r['source']} | {r['split']}"),
        "pypi_distributions_in_corpus": {
            label: {"rows": n, "license": pypi.get(label, {}).get("license")}
            for label, n in count(lambda r: r["source"].split(":")[1] if r["source"].startswith("pypi:") else "").items()
            if label
        },
        "debian_packages_in_corpus": {
            label: n for label, n in count(debian_label).items() if label
        },
        "lines_dropped_by_filter": dict(sorted(sink.dropped.items())),
        "files_read_per_family": dict(sorted(sink.files_read.items())),
        "inputs": info,
        "target_per_kind": TARGET,
        "git_sha_lengths": dict(sorted(Counter(
            "full (40 hex)" if any(len(h) == 40 for h in HEX_RUN.findall(r["text"])) else "short (7-39 hex)"
            for r in rows if r["kind"] == "git_sha").items())),
    }
    with open(args.out / "build_stats.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(stats, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(json.dumps({"total": stats["total"], "per_split": stats["per_split"], "per_kind": stats["per_kind"]},
                     indent=2))


if __name__ == "__main__":
    main()
