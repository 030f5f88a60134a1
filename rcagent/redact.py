"""Redaction: secrets and personal data in a job's text replaced by stable placeholders before anything
reads them (the model, a snapshot, the store, a report).

`redact_job(job)` runs when a job loads (unless redaction is off): the text columns (log messages, span
names, event reasons and messages, metric names, which carry the labels) and the alert are scanned, each
distinct value once, and the job's views are rebuilt to return the redacted text. The ranking reads the
same views, so it ranks what the model sees. Each distinct secret gets one placeholder for the whole job
(`<secret:1>`, `<email:2>`, `<ip:3>`, ...), numbered in a fixed order (table, column, value), so a replayed
run sees the same text. The mapping stays on the job (`job.redactions`) and goes to the store's
`redactions` table with the run, never into a prompt.

Detectors: the regular expressions of Yelp's detect-secrets plugins (AWS, Azure, GitHub, GitLab, Slack,
Stripe, JWT, private keys, npm, PyPI, SendGrid, Twilio, OpenAI, Discord, Telegram, ...), plus rules of our
own for what those leave out: credentials in URLs and connection strings, bearer and basic authorization,
`password=`/`token=`/`api_key=` values, whole PEM private-key blocks, Google API keys, e-mail, IPv4 and IPv6
addresses, card numbers (Luhn-checked). A value that is an entity name (a node named by its IP) is left
readable.
"""
from __future__ import annotations

import functools
import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field

# (table, column): the text a job carries; entity names are left as they are (the inventory's names)
TEXT_COLUMNS = (("logs", "message"), ("traces", "operation"), ("events", "reason"), ("events", "message"),
                ("metrics", "metric"))

# Our own rules: (kind, pattern); a pattern's group 1, where it has one, is the part replaced.
OWN_RULES: list[tuple[str, str]] = [
    ("secret", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)"),
    ("secret", r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{1,200}:([^\s@/]{1,200})@"),        # scheme://user:PASS@host
    ("secret", r"(?i)\bauthorization\s*[:=]\s*(?:bearer|basic|token|digest)\s+([A-Za-z0-9._~+/=-]{6,})"),
    ("secret", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"),
    ("secret", r"(?i)(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|client[_-]?secret|"
               r"auth[_-]?token|private[_-]?key|session[_-]?id|sessionid)[\"']?\s*[:=]\s*[\"']?([^\s\"'&,;}{)(<>]{4,})"),
    ("secret", r"\bAIza[0-9A-Za-z_-]{35}\b"),                                                    # Google API key
    ("secret", r"\bya29\.[0-9A-Za-z_-]{20,}"),                                                   # Google OAuth token
    ("secret", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}\b"),
    ("secret", r"\bhttps://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    ("secret", r"\bnpm_[A-Za-z0-9]{36}\b"),                                                    # npm token
    ("secret", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,}"),                                      # PyPI token
    ("secret", r"\b\d{8,10}:AA[0-9A-Za-z_-]{33}\b"),                                              # Telegram bot
    ("secret", r"\bgithub_pat_[0-9A-Za-z_]{60,}"),                                                # GitHub fine-grained
    ("secret", r"(?i)\bAccountKey=([A-Za-z0-9+/=]{20,})"),
    ("email", r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}\b"),
    ("ip", r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])"),
    ("ip", r"(?i)(?<![0-9a-f:])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![0-9a-f:])"),
    ("ip", r"(?i)(?<![0-9a-f:])(?:[0-9a-f]{1,4}:){1,6}:(?:[0-9a-f]{1,4}:){0,5}[0-9a-f]{1,4}(?![0-9a-f:])"),
    ("card", r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])"),     # then Luhn and a card network's prefix
]
PLACEHOLDER = re.compile(r"<(?:secret|email|ip|card):\d+>")


def _re2_compiles(pattern: str) -> bool:
    import duckdb
    try:
        duckdb.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error:
        return False
    return True


def without_lookarounds(pattern: str) -> str:
    """`pattern` with its lookaround groups ((?=...), (?!...), (?<=...), (?<!...)) removed: it matches
    everything the pattern matches, and more; RE2 has no lookarounds."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            depth, j, in_class = 0, i, False
            while j < len(pattern):
                c = pattern[j]
                if c == "\\":
                    j += 2
                    continue
                if in_class:
                    in_class = c != "]"
                elif c == "[":
                    in_class = True
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            i = j + 1
            continue
        if pattern[i] == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        out.append(pattern[i])
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _re2(rule: re.Pattern) -> str | None:
    """A stand-in for the rule in RE2 (its lookarounds dropped, its flags inline): it lets through at least
    what the rule matches. None when RE2 cannot compile even that."""
    flags = ("i" if rule.flags & re.IGNORECASE else "") + ("s" if rule.flags & re.DOTALL else "")
    pattern = without_lookarounds(rule.pattern)
    # RE2 counts repetitions up to 1000: a larger bound becomes unbounded (a superset again)
    pattern = re.sub(r"\{(\d+),(\d{4,})\}", lambda m: "{%s,}" % m.group(1), pattern)
    pattern = f"(?{flags}){pattern}" if flags else pattern
    return pattern if _re2_compiles(pattern) else None


@functools.lru_cache(maxsize=1)
def _library_rules() -> tuple[tuple[str, re.Pattern], ...]:
    """The denylist patterns of detect-secrets' regex plugins (the keyword and entropy plugins excluded:
    our keyword rule replaces the first, and the second would take every trace id for a secret)."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:          # the dependency is declared; without it our own rules still apply
        return []
    rules = []
    for cls in sorted(get_mapping_from_secret_type_to_class().values(), key=lambda c: c.__name__):
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in ("KeywordDetector", "IPPublicDetector"):
            continue
        for pattern in cls().denylist:
            rules.append(("secret", pattern))
    return tuple(rules)


@dataclass
class Redactor:
    """Finds and replaces secrets; one placeholder per distinct value, counted from 1 across kinds."""
    keep: set[str] = field(default_factory=set)          # values never replaced (entity names)
    mapping: dict[str, tuple[str, str]] = field(default_factory=dict)   # value -> (placeholder, kind)

    def __post_init__(self):
        self.rules = [(k, re.compile(p, re.DOTALL) if isinstance(p, str) else p) for k, p in OWN_RULES]
        self.rules += list(_library_rules())
        # one RE2 alternation finds, inside DuckDB, the values worth scanning; should a rule have no RE2
        # stand-in, every value is scanned in Python (slower, as safe)
        compiled = [(rule, _re2(rule)) for _, rule in self.rules]
        stand_ins = [p for _, p in compiled if p]
        # alternations of ten: one of all sixty outgrows RE2's DFA and runs seven times slower (measured)
        self.prefilters = ["|".join(f"(?:{p})" for p in stand_ins[i:i + 10]) for i in range(0, len(stand_ins), 10)]
        self.everywhere = [rule for rule, p in compiled if p is None]

    def placeholder(self, value: str, kind: str) -> str:
        if value not in self.mapping:
            self.mapping[value] = (f"<{kind}:{len(self.mapping) + 1}>", kind)
        return self.mapping[value][0]

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        found = []
        for kind, rule in self.rules:
            for m in rule.finditer(text):
                start, end = m.span(1) if m.re.groups and m.group(1) is not None else m.span()
                value = text[start:end]
                if not value or value in self.keep or PLACEHOLDER.fullmatch(value):
                    continue
                if kind == "ip" and not _is_ip(value):
                    continue
                if kind == "card" and not _luhn(value):
                    continue
                found.append((start, end, kind))
        # the longest of overlapping finds wins (a URL's password inside a whole connection string)
        found.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        chosen, last = [], -1
        for start, end, kind in found:
            if start >= last:
                chosen.append((start, end, kind))
                last = end
        return chosen

    def redact(self, text):
        if not isinstance(text, str) or not text:
            return text
        spans = self._spans(text)
        if not spans:
            return text
        out, pos = [], 0
        for start, end, kind in spans:
            out.append(text[pos:start])
            out.append(self.placeholder(text[start:end], kind))
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(kind for _, kind in self.mapping.values()).items()))


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _luhn(value: str) -> bool:
    """A card number: a network's prefix and length (Visa, Mastercard, American Express, Discover) and the
    Luhn check digit; a 13-digit epoch in milliseconds or an order id is not one."""
    text = "".join(c for c in value if c.isdigit())
    digits = [int(c) for c in text]
    network = ((text[0] == "4" and len(text) in (13, 16, 19)) or (text[:2] in ("34", "37") and len(text) == 15)
               or (len(text) == 16 and ("51" <= text[:2] <= "55" or "2221" <= text[:4] <= "2720"
                                        or text.startswith(("6011", "65")))))
    if not network:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return total % 10 == 0


def redact_job(job) -> Redactor:
    """Rebuild `job`'s views so that every text column reads redacted; returns the redactor (its mapping
    and counts). Distinct values are redacted once each, in a fixed order."""
    import pyarrow as pa

    keep = set(job.entities) | {e.service for e in job.entities.values() if e.service}
    keep |= {e.node for e in job.entities.values() if e.node}
    if job.rows.get("traces"):   # the ids that join logs to spans are no secrets (an all-digit span id
        keep |= {v for (v,) in job.con.execute(    # can pass a card number's check)
            "SELECT trace_id FROM traces UNION SELECT span_id FROM traces").fetchall() if v}
    redactor = Redactor(keep=keep)
    job.alert = redactor.redact(job.alert)
    by_table: dict[str, list[str]] = {}
    for table, column in TEXT_COLUMNS:
        if job.rows.get(table):
            by_table.setdefault(table, []).append(column)
    for table, columns in by_table.items():
        joins, replaces = [], []
        for column in columns:
            where, params = f"{column} IS NOT NULL", []
            if not redactor.everywhere:   # else every value is scanned in Python (slower, as safe)
                where += " AND (" + " OR ".join(f"regexp_matches({column}, ?)" for _ in redactor.prefilters) + ")"
                params = redactor.prefilters
            values = [v for (v,) in job.con.execute(
                f"SELECT DISTINCT {column} FROM {table} WHERE {where} ORDER BY 1", params).fetchall()]
            changed = [(v, r) for v in values if (r := redactor.redact(v)) != v]
            if not changed:
                continue
            name = f"_redacted_{table}_{column}"
            job.con.register(name, pa.table({"orig": [v for v, _ in changed], "red": [r for _, r in changed]}))
            alias = f"r_{column}"
            joins.append(f"LEFT JOIN {name} {alias} ON p.{column} = {alias}.orig")
            replaces.append(f"coalesce({alias}.red, p.{column}) AS {column}")
        if joins:
            job.con.execute(f"ALTER VIEW {table} RENAME TO _plain_{table}")
            job.con.execute(f"CREATE VIEW {table} AS SELECT p.* REPLACE ({', '.join(replaces)}) "
                            f"FROM _plain_{table} p {' '.join(joins)}")
    return redactor
