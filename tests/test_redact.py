"""Redaction before the model: 40 kinds of secret and personal data planted in real log lines of a shared
case never reach a prompt, a snapshot, a stored step or a report, and the case ranks as before."""
from __future__ import annotations

import json
import shutil

import duckdb

from rcagent.job import Job
from rcagent.redact import Redactor, without_lookarounds
from rcagent.store import Store
from rcagent.tools.overview import ranking
from tests.test_cli import rcagent

PEM_RSA = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n"
           "aNbqzm6t7yqS9Y0xL5Ml3mF1uV8kX0K3zj6b7Q==\n-----END RSA PRIVATE KEY-----")
PEM_SSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
           "-----END OPENSSH PRIVATE KEY-----")
PEM_EC = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5hTQ9rnN7mYqDoAoGCCqGSM49\n-----END EC PRIVATE KEY-----"
# (what it is, the line planted, the secret that must never be seen: at most 57 characters of it)
CORPUS = [
    ("AWS access key id", "s3 client init key=AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("AWS secret access key", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("GitHub token", "git clone with ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitHub OAuth token", "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a ok", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitLab token", "runner glpat-Xy9zAbCdEfGhIjKlMnOp registered", "glpat-Xy9zAbCdEfGhIjKlMnOp"),
    ("Slack bot token", "notify xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
     "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("Slack webhook", "POST https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/Xy9zAbCdEfGhIjKlMnOpQrSt failed",
     "T0A1B2C3D/B0A1B2C3D/Xy9zAbCdEfGhIjKlMnOpQrSt"),
    ("Stripe secret key", "charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Stripe restricted key", "refund with rk_live_9fC39HqLyjWDarjtT1zdp7dc", "rk_live_9fC39HqLyjWDarjtT1zdp7dc"),
    ("Google API key", "maps key AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    ("Google OAuth token", "gcs ya29.a0AfH6SMBxExampleTokenValue123456", "ya29.a0AfH6SMBxExampleTokenValue123456"),
    ("JWT", "session eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9"),
    ("bearer token", "upstream Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543xyz", "8f14e45fceea167a5a36dedd4bea2543xyz"),
    ("basic authorization", "proxy Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw=="),
    ("password in a URL", "fetch https://admin:S3cr3tP4ssw0rd@repo.internal.example.com/simple", "S3cr3tP4ssw0rd"),
    ("database connection string", "pool postgres://app:Xy9pLm2QwZ@orders-db:5432/orders", "Xy9pLm2QwZ"),
    ("password in a query string", "GET /login?user=bob&password=hunter2hunter2 400", "hunter2hunter2"),
    ("password in JSON", 'request body {"user": "bob", "password": "correct-horse-battery"}', "correct-horse-battery"),
    ("RSA private key", "loaded key " + PEM_RSA, "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn"),
    ("OpenSSH private key", "ssh key " + PEM_SSH, "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    ("EC private key", "tls key " + PEM_EC, "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5hTQ9"),
    ("private key in escaped JSON", '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"}',
     "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    ("npm token", "publish npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("PyPI token", "upload pypi-AgEIcHlwaS5vcmcCJGI4ZjQyYzA0LWY0YjQtNDE4Ny1hNzQ2LWRlYmUxZGQ2MmVlMQACKlszLCJmNDQ5",
     "CJGI4ZjQyYzA0LWY0YjQtNDE4Ny1hNzQ2LWRlYmUxZGQ2MmVl"),
    ("SendGrid key", "mail 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",
     "ngeVfQFYQlKU0ufo8x5d1A.TwL2iGABf9DHoTf-09kqeF8tAmbi"),
    ("Twilio key", "sms SKa1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6 sent", "SKa1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6"),
    ("Mailchimp key", "list 0123456789abcdef0123456789abcdef-us12 synced", "0123456789abcdef0123456789abcdef-us12"),
    ("OpenAI key", "llm sk-proj-abcdefghijklmnopqrstT3BlbkFJabcdefghijklmnopqrst", "abcdefghijklmnopqrstT3BlbkFJ"),
    ("Azure storage key", "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq"),
    ("Telegram bot token", "bot 110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq up", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"),
    ("GitHub fine-grained token", "ci github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW012345 used",
     "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF"),
    ("Discord bot token", "discord MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWsX",
     "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs"),
    ("Square token", "pay sq0csp-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq12", "sq0csp-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq12"),
    ("Artifactory key", "artifacts api=AKCp8jQ8vTWRxaVrJ6ePxNfbTHbUbx7kZQpWjS", "AKCp8jQ8vTWRxaVrJ6ePxNfbTHbUbx7kZQpWjS"),
    ("API key parameter", "call api_key=Zm9vYmFyYmF6cXV4MTIzNDU2 done", "Zm9vYmFyYmF6cXV4MTIzNDU2"),
    ("client secret", "oidc client_secret: 7c0d8f3b2a1e4d5c9b8a done", "7c0d8f3b2a1e4d5c9b8a"),
    ("session cookie", "Cookie: JSESSIONID=8A3F9C2D1E7B6A5F4C3D2E1F0A9B8C7D", "8A3F9C2D1E7B6A5F4C3D2E1F0A9B8C7D"),
    ("e-mail address", "order confirmation sent to jane.doe@example.com", "jane.doe@example.com"),
    ("IPv4 address", "login from 203.0.113.42 rejected", "203.0.113.42"),
    ("IPv6 address", "peer 2001:db8:85a3::8a2e:370:7334 reset", "2001:db8:85a3::8a2e:370:7334"),
    ("card number", "payment with card 4111 1111 1111 1111 declined", "4111 1111 1111 1111"),
]


def test_corpus_has_thirty_kinds_and_each_is_replaced():
    assert len({what for what, _, _ in CORPUS}) >= 30
    redactor = Redactor()
    for what, line, secret in CORPUS:
        out = redactor.redact(line)
        assert secret not in out, (what, out)
        assert "<" in out and ">" in out, what


def test_placeholders_are_stable_and_entity_names_stay_readable():
    redactor = Redactor(keep={"10.0.0.7"})
    a = redactor.redact("from 10.0.0.7 to 198.51.100.3 and bob@example.org")
    b = redactor.redact("again 198.51.100.3, bob@example.org")
    assert a == "from 10.0.0.7 to <ip:1> and <email:2>" and b == "again <ip:1>, <email:2>"
    assert redactor.counts() == {"email": 1, "ip": 1}
    # not secrets: versions, times, epochs in milliseconds, a number that passes Luhn but is no card's
    for text in ("v1.2.3-beta", "16:42:09.486", "took 1674981731000 ms", "id 8707183351685", "::1",
                 "SpanID: b4893770577553c2"):     # digits inside a hex id that pass a card's checks
        assert Redactor().redact(text) == text, text


def test_re2_stand_ins_match_at_least_what_the_rules_match():
    assert without_lookarounds(r"(?<![\d.])\d+(?!\w)x") == r"\d+x"
    assert without_lookarounds(r"a(?=[)(])b") == "ab"
    redactor = Redactor()
    con = duckdb.connect()
    for what, line, _ in CORPUS:
        hits = [con.execute("SELECT regexp_matches(?, ?)", [line, p]).fetchall()[0][0] for p in redactor.prefilters]
        assert any(hits), what


def _plant(native, dest):
    """A copy of the job whose culprit's error lines and some of its callers' warnings each carry one
    corpus line, and whose events carry two more."""
    shutil.copytree(native, dest)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE logs AS SELECT *, row_number() OVER (ORDER BY timestamp, entity, message) AS n "
                "FROM read_parquet(?)", [str(native / "logs.parquet")])
    targets = [r[0] for r in con.execute(
        "SELECT n FROM logs WHERE level IN ('ERROR', 'WARN') AND timestamp >= TIMESTAMP '2023-01-29 08:42:00' "
        "AND timestamp < TIMESTAMP '2023-01-29 08:46:00' ORDER BY entity NOT LIKE 'ts-contacts%', n LIMIT ?",
        [len(CORPUS)]).fetchall()]
    assert len(targets) == len(CORPUS)
    con.execute("CREATE TABLE plant (n BIGINT, extra VARCHAR)")
    con.executemany("INSERT INTO plant VALUES (?, ?)", [(n, line) for n, (_, line, _) in zip(targets, CORPUS)])
    con.execute("CREATE TABLE out AS SELECT l.* EXCLUDE (n) REPLACE (CASE WHEN p.extra IS NULL THEN l.message "
                "ELSE l.message || ' planted: ' || p.extra END AS message) FROM logs l LEFT JOIN plant p USING (n) ORDER BY l.n")
    con.sql("SELECT * FROM out").write_parquet(str(dest / "logs.parquet"))
    con.execute("CREATE TABLE ev (timestamp TIMESTAMP, entity VARCHAR, reason VARCHAR, message VARCHAR)")
    con.executemany("INSERT INTO ev VALUES (?, ?, ?, ?)", [
        ("2023-01-29 08:30:00", "ts-contacts-service", "ConfigChange", "secret rotated to " + CORPUS[1][1]),
        ("2023-01-29 08:31:00", "ts-contacts-service", "Deployment", "image pulled with " + CORPUS[14][1])])
    con.sql("SELECT * FROM ev").write_parquet(str(dest / "events.parquet"))
    return dest


def _everything_stored(db_path) -> str:
    """Every table of the store except the operator's placeholder mapping, as text."""
    store = Store(db_path, create=False)
    parts = []
    for table in store.db.table_names():
        if table != "redactions":
            parts += [json.dumps(row, default=str) for row in store.db[table].rows]
    return "\n".join(parts)


def _run_all_modes(job, tmp_path, extra=()):
    """analyze, scripted, in react mode (the logs and events tools on the culprit), one-shot mode and SQL
    mode (a query returning every error line): every prompt lands in the store's model-call log, every
    observation in a step or a snapshot."""
    react = tmp_path / "react.json"
    react.write_text(json.dumps([
        {"thought": "logs", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "events", "action": "events", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": ["ts-contacts-service"], "root_cause": "contacts fails", "solution": "fix it",
            "evidence": ["error lines"], "responsibility": "contacts team"}}]))
    oneshot = tmp_path / "oneshot.json"
    oneshot.write_text(json.dumps([json.dumps({"analysis": "contacts", "root_causes": ["ts-contacts-service"],
                                               "solution": "Roll it back."})]))
    sql = tmp_path / "sql.json"
    # the planted text follows the line's last ']' (the SQL tool cuts a cell at 120 characters)
    # the planted text follows 'planted: '; the SQL tool cuts a cell at 120 characters, so it is
    # shown in overlapping pieces: every secret (at most 57 characters checked) lies whole in one of them
    query = ("SELECT substr(p, 1, 115) AS a, substr(p, 58, 115) AS b, substr(p, 116, 115) AS c, "
             "substr(p, 174, 115) AS d FROM (SELECT split_part(message, 'planted: ', 2) AS p FROM logs "
             "WHERE level IN ('ERROR', 'WARN') UNION ALL SELECT message FROM events) WHERE p <> '' ORDER BY 1")
    sql.write_text(json.dumps([json.dumps({"thought": "t", "action": a, "arguments": args}) for a, args in [
        ("query", {"sql": query}),
        ("submit", {"root_causes": ["ts-contacts-service"], "explanation": "It failed.", "solution": "Fix it."})]]))
    config = tmp_path / "rows.toml"
    config.write_text("sql_rows = 100\n")
    db, outputs = tmp_path / "s.db", []
    for mode, script in (("react", react), ("oneshot", oneshot), ("sql", sql)):
        out = tmp_path / f"{mode}.json"
        r = rcagent("analyze", "--job", job, "--backend", "scripted", "--script", script, "--store", db,
                    "--mode", mode, "--out", out, "--format", "md", "--config", config, *extra)
        assert r.returncode == 0, r.stderr
        shown = rcagent("show", json.loads(out.read_text())["run_id"], "--store", db)
        outputs += [r.stdout, r.stderr, out.read_text(), shown.stdout]
    return db, "\n".join(outputs)


def test_planted_secrets_reach_no_prompt_snapshot_step_or_report(job_of, tmp_path):
    from tests.conftest import CONTACTS_CASE
    native = job_of(CONTACTS_CASE)
    job = _plant(native, tmp_path / "planted")

    # the control: without redaction the planted text does reach the store and the reports
    (tmp_path / "plain").mkdir()
    db, outputs = _run_all_modes(job, tmp_path / "plain", ["--no-redact"])
    seen = [what for what, _, secret in CORPUS if secret in _everything_stored(db) + outputs]
    assert len(seen) == len(CORPUS), set(w for w, _, _ in CORPUS) - set(seen)

    (tmp_path / "red").mkdir()
    db, outputs = _run_all_modes(job, tmp_path / "red")
    stored = _everything_stored(db)
    for what, _, secret in CORPUS:
        assert secret not in stored, f"{what} in the store"
        assert secret not in outputs, f"{what} in an output"
    assert "<secret:" in stored and "redacted before the model:" in outputs
    store = Store(db, create=False)
    run = store.runs(1)[0]
    mapping = {r["value"] for r in store.redactions(run["id"])}
    assert {secret for _, _, secret in CORPUS if secret in mapping} or mapping   # resolvable by the operator
    listed = rcagent("show", run["id"], "--redactions", "--store", db)
    assert listed.returncode == 0 and "<secret:1>" in listed.stdout

    top = lambda j: [(n, s) for n, s, _ in ranking(j)[:5]]  # noqa: E731
    assert top(Job.load(job)) == top(Job.load(native, redact=False))


def test_the_sql_sandbox_and_every_view_read_redacted_text(job_of, tmp_path):
    """Modes that read the job their own way (span trees, the anomaly graph, SQL over the tables) read the
    same views: no planted secret in them, nor in the SQL agent's copy of the tables."""
    from rcagent.harnesses.sqlbox import SqlBox
    from tests.conftest import CONTACTS_CASE
    job = Job.load(_plant(job_of(CONTACTS_CASE), tmp_path / "planted"))
    views = " ".join(str(v) for (v,) in job.con.execute(
        "SELECT message FROM logs UNION ALL SELECT message FROM events").fetchall())
    box = SqlBox(job)
    copied = box.con.execute("SELECT string_agg(message, ' ') FROM logs").fetchall()[0][0]
    for what, _, secret in CORPUS:
        assert secret not in views and secret not in copied, what
    assert job.redactor.counts()["secret"] >= 30
