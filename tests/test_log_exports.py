"""`rcagent job create`'s log sources beyond Loki and OTLP, and what a log line says of itself: the level and
trace id of the common loggers' formats, container log files (CRI, Docker json-file, kubectl, rotated),
Elasticsearch hits, stack traces shipped one frame a line; on synthetic edge cases and a real case's lines
read back."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from rcagent.exports import ExportError
from rcagent.exports.assemble import read_exports
from rcagent.job import Job
from rcagent.tools.overview import ranking
from tests.exportwriter import write_exports
from tests.test_cli import rcagent


@pytest.mark.parametrize("line, level", [
    ('{"level":"info","msg":"GET /cart","error":null}', "INFO"),                 # zap, logrus
    ('{"severity":"ERROR","message":"charge declined"}', "ERROR"),              # Cloud Logging, OB's Go services
    ('{"level":50,"time":1714557600000,"msg":"db down"}', "ERROR"),             # pino, bunyan
    ('{"@timestamp":"2024-05-01T10:00:00Z","log.level":"warn","message":"x"}', "WARN"),   # ECS
    ('{"log":{"level":"Warning"},"message":"x"}', "WARN"),                      # ECS nested
    ('{"@t":"2024-05-01T10:00:00Z","@l":"Fatal","@mt":"x"}', "FATAL"),          # Serilog compact
    ('{"@t":"2024-05-01T10:00:00Z","@mt":"started"}', None),                    # Serilog leaves Information out
    ('{"level":"banana","msg":"INFO ERROR"}', None),                            # a field that names no level
    ('{"level":true}', None),
    ('ts=2024-05-01T10:00:00Z level=warn msg="slow upstream"', "WARN"),         # logfmt
    ('time="2024-05-01T10:00:00Z" level=error msg="charge failed"', "ERROR"),
    ('E1207 10:00:00.123456       1 controller.go:12] sync failed', "ERROR"),   # klog, glog
    ('I1207 10:00:00.123456       1 controller.go:12] synced', "INFO"),
    ('2024-05-01 10:00:00.123  INFO 1 --- [main] c.e.App : Started App', "INFO"),   # Spring Boot
    ('[ERROR] 2024-05-01 10:00:00 payment: declined', "ERROR"),
    ('GET /api/errors 200 12ms', None),
    ('user INFO-desk logged in', None),
    ('', None),
])
def test_a_log_line_states_its_level_as_the_common_loggers_write_it(line, level):
    from rcagent.logline import level_of
    assert level_of(line) == level


def test_a_label_that_names_no_level_gives_way_to_the_level_the_line_states(tmp_path):
    doc = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"pod": "cart-1", "detected_level": "unknown"},
         "values": [["1714557600000000000", '{"level":"error","msg":"redis down"}'], ["1714557601000000000", "ok"]]},
        {"stream": {"pod": "cart-1", "level": "audit"}, "values": [["1714557602000000000", "user 7 logged in"]]}]}}
    (tmp_path / "loki.json").write_text(json.dumps(doc))
    assert [row[2] for row in sorted(read_exports([tmp_path / "loki.json"]).logs)] == ["ERROR", "unknown", "audit"]


def test_a_log_line_states_its_trace_id():
    from rcagent.logline import trace_of
    assert trace_of('{"msg":"x","trace_id":"4BF92F3577B34DA6A3CE929D0E0E4736"}') == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_of('{"logging.googleapis.com/trace":"projects/p/traces/4bf92f3577b34da6"}') == "4bf92f3577b34da6"
    assert trace_of("16:42:09.486 INFO t.c.Travel2Controller#115 TraceID: 6f3cbf058c2765548a39ad724905d6a1 x") \
        == "6f3cbf058c2765548a39ad724905d6a1"
    assert trace_of("level=info traceId=00f067aa0ba902b7 msg=ok") == "00f067aa0ba902b7"
    assert trace_of("retrying trace 12") is None and trace_of(None) is None


def test_container_log_files_of_each_runtime_are_read_with_their_pod_and_levels(tmp_path):
    """CRI files (a long line in parts P..F), Docker json-file lines (parts without a newline), `kubectl logs
    --timestamps` output; the pod from the kubelet's paths or the file's name; a line with no time is
    counted as skipped with the remedy, not guessed; a file cut inside a long line keeps its parts."""
    from rcagent.exports.containerlogs import NO_TIME
    cri = tmp_path / "var/log/pods/shop_cart-7d9f8c6b5-x2x9q_0b1c2d3e-0000-4000-8000-000000000001/cart/0.log"
    cri.parent.mkdir(parents=True)
    cri.write_text("2024-05-01T10:00:00.123456789Z stdout P {\"level\":\"error\",\n"
                   "2024-05-01T10:00:00.123456790Z stdout F \"msg\":\"redis timeout\"}\n"
                   "2024-05-01T10:00:01.000000000Z stderr F W0501 10:00:01.000000 1 cache.go:7] slow\n"
                   "2024-05-01T12:00:01+02:00 stdout F level=info msg=ok\n"
                   "2024-05-01T10:00:03.000000000Z stdout P cut in the mid")
    docker = tmp_path / "var/log/containers" / f"payment-5f7c9d8b4-qq7rt_shop_payment-{'a' * 64}.log"
    docker.parent.mkdir(parents=True)
    docker.write_text(json.dumps({"log": "2024-05-01 10:00:00 ERROR charge ", "stream": "stdout",
                                  "time": "2024-05-01T10:00:00.5Z"}) + "\n"
                      + json.dumps({"log": "failed\n", "stream": "stdout", "time": "2024-05-01T10:00:00.6Z"}) + "\n"
                      + json.dumps({"log": "ok\n", "stream": "stderr", "time": "2024-05-01T10:00:00.7Z"}) + "\n")
    kubectl = tmp_path / "frontend-6b8f9d7c5-abcde.log"
    kubectl.write_text("2024-05-01T10:00:02.5Z GET /cart 200\nno time on this line\n")
    out = read_exports([tmp_path / "var", kubectl])
    t = dt.datetime(2024, 5, 1, 10)
    assert sorted(out.logs) == [
        (t + dt.timedelta(microseconds=123456), "cart-7d9f8c6b5-x2x9q", "ERROR",
         '{"level":"error","msg":"redis timeout"}', None),
        (t + dt.timedelta(seconds=0.5), "payment-5f7c9d8b4-qq7rt", "ERROR", "2024-05-01 10:00:00 ERROR charge failed",
         None),
        (t + dt.timedelta(seconds=0.7), "payment-5f7c9d8b4-qq7rt", None, "ok", None),
        (t + dt.timedelta(seconds=1), "cart-7d9f8c6b5-x2x9q", "INFO", "level=info msg=ok", None),
        (t + dt.timedelta(seconds=1), "cart-7d9f8c6b5-x2x9q", "WARN", "W0501 10:00:01.000000 1 cache.go:7] slow", None),
        (t + dt.timedelta(seconds=2.5), "frontend-6b8f9d7c5-abcde", None, "GET /cart 200", None),
        (t + dt.timedelta(seconds=3), "cart-7d9f8c6b5-x2x9q", None, "cut in the mid", None)]
    assert out.skipped == {(str(kubectl), NO_TIME): 1}
    assert out.records["container log lines"] == 7 and out.files["container logs"] == 3
    assert {"cart-7d9f8c6b5-x2x9q", "payment-5f7c9d8b4-qq7rt", "frontend-6b8f9d7c5-abcde"} <= set(out.pods)


def test_elasticsearch_hits_nested_or_dotted_fields_and_one_hit_per_line(tmp_path):
    """A `_search` response of Filebeat's documents (nested Kubernetes metadata, ECS `log.level`), Fluentd's
    (`kubernetes.pod_name`, the line in `log`, dotted names, milliseconds), an elasticdump line per hit;
    a document with no time or no entity is counted as skipped."""
    search = {"took": 2, "timed_out": False, "hits": {"total": {"value": 4}, "hits": [
        {"_index": "filebeat", "_source": {"@timestamp": "2024-05-01T10:00:00.250Z", "message": "charge declined",
                                           "log": {"level": "warning"}, "trace": {"id": "ABCDEF0123456789"},
                                           "kubernetes": {"pod": {"name": "payment-5f7c9d8b4-qq7rt"},
                                                          "labels": {"app": "payment"}, "node": {"name": "n1"}}}},
        {"_index": "fluentd", "_source": {"@timestamp": "1714557601000", "log": "E0501 10:00:01.000 1 x.go:3] down",
                                          "kubernetes.pod_name": "cart-7d9f8c6b5-x2x9q", "kubernetes.host": "n2"}},
        {"_index": "fluentd", "_source": {"message": "no time"}},
        {"_index": "fluentd", "_source": {"@timestamp": "2024-05-01T10:00:02Z", "message": "whose?"}}]}}
    (tmp_path / "search.json").write_text(json.dumps(search))
    (tmp_path / "dump.jsonl").write_text(json.dumps({"_index": "app", "_id": "1", "_source": {
        "@timestamp": "2024-05-01T10:00:03Z", "message": '{"level":"info","msg":"ok"}', "service": {"name": "web"}}}))
    out = read_exports([tmp_path / "search.json", tmp_path / "dump.jsonl"])
    t = dt.datetime(2024, 5, 1, 10)
    assert sorted(out.logs) == [
        (t + dt.timedelta(seconds=0.25), "payment-5f7c9d8b4-qq7rt", "WARN", "charge declined", "abcdef0123456789"),
        (t + dt.timedelta(seconds=1), "cart-7d9f8c6b5-x2x9q", "ERROR", "E0501 10:00:01.000 1 x.go:3] down", None),
        (t + dt.timedelta(seconds=3), "web", "INFO", '{"level":"info","msg":"ok"}', None)]
    assert (out.pods["payment-5f7c9d8b4-qq7rt"].service, out.pods["payment-5f7c9d8b4-qq7rt"].node) == ("payment", "n1")
    assert out.pods["cart-7d9f8c6b5-x2x9q"].node == "n2"
    assert sorted(reason for (_, reason) in out.skipped) == ["document that names no pod, service or host",
                                                             "document with no @timestamp"]
    assert out.records["elasticsearch documents"] == 3 and out.files["elasticsearch"] == 2


def test_a_message_cannot_forge_a_line_of_its_own(tmp_path):
    """A line ends at a newline only: a message holding U+2028 or a form feed followed by what looks like a
    CRI record stays one line at the runtime's time, not a second line at a time the message chose."""
    forged = "login ok\u20282020-01-01T00:00:00Z stderr F ERROR forged\x0c2020-01-01T00:00:01Z stdout F x"
    (tmp_path / "web-1.log").write_text(f"2024-05-01T10:00:00Z stdout F {forged}\n", encoding="utf-8")
    out = read_exports([tmp_path / "web-1.log"])
    assert [(t, m) for t, _, _, m, _ in out.logs] == [(dt.datetime(2024, 5, 1, 10), forged)]
    (tmp_path / "lines.jsonl").write_text(json.dumps({"labels": {"pod": "p"}, "line": "a\u2028b",
                                                      "timestamp": "2024-05-01T10:00:00Z"}, ensure_ascii=False) + "\n")
    assert [m for _, _, _, m, _ in read_exports([tmp_path / "lines.jsonl"]).logs] == ["a\u2028b"]


def test_rotated_and_compressed_container_logs_are_read_and_named_by_their_pod(tmp_path):
    import gzip
    from rcagent.exports.containerlogs import pod_of
    folder = tmp_path / "var/log/pods/shop_cart-7d9f8c6b5-x2x9q_0b1c2d3e-0000-4000-8000-000000000001/cart"
    folder.mkdir(parents=True)
    (folder / "0.log.20240501-095900.gz").write_bytes(gzip.compress(b"2024-05-01T09:58:00Z stdout F oldest\n"))
    (folder / "0.log.20240501-100000").write_text("2024-05-01T09:59:30Z stdout F older\n")
    (folder / "0.log").write_text("2024-05-01T10:00:30Z stdout F newest\n")
    (folder / "notes.txt").write_text("not a log")
    out = read_exports([tmp_path / "var"])
    assert sorted(m for _, _, _, m, _ in out.logs) == ["newest", "older", "oldest"]
    assert {e for _, e, _, _, _ in out.logs} == {"cart-7d9f8c6b5-x2x9q"}
    assert [reason for (_, reason) in out.skipped] == ["file of no export format"]
    assert pod_of(Path(f"/var/log/containers/web-1_shop_web-{'b' * 64}.log")) == "web-1"
    assert pod_of(Path("/tmp/frontend-6b8f9d7c5-abcde.log.gz")) == "frontend-6b8f9d7c5-abcde"
    (tmp_path / "bad.log.gz").write_bytes(b"not gzip")
    with pytest.raises(ExportError, match="bad.log.gz: cannot read"):
        read_exports([tmp_path / "bad.log.gz"])


@pytest.mark.parametrize("form, files", [("cri-rotated", "0.log.*.gz"), ("elasticsearch", "search-*.json")])
def test_a_real_cases_log_lines_from_node_files_or_elasticsearch_read_back_as_its_logs(job_of, tmp_path, form, files):
    """The TrainTicket case's log lines written as each pod's CRI log files (the first two thirds in the
    kubelet's rotated files, the oldest gzipped), or as Elasticsearch search responses of Filebeat's
    documents; neither has a level or a trace id beside the line: `job create` reads back every line with
    its pod and time, the level and the trace id each line states, and the ranking's top five is the
    native job's."""
    from tests.conftest import CONTACTS_CASE
    native = job_of(CONTACTS_CASE)
    periods = write_exports(native, tmp_path / "exports", logs=form)
    assert len(list((tmp_path / "exports").rglob(files))) > 1
    assert not (tmp_path / "exports" / "loki").joinpath("query_range.json").exists()
    args = ["job", "create", tmp_path / "job", "--from", tmp_path / "exports", "--window", periods["window"]]
    for b in periods["baseline"]:
        args += ["--baseline", b]
    r = rcagent(*args)
    assert r.returncode == 0, r.stderr
    assert ("container logs" if form.startswith("cri") else form) in r.stdout
    a, b = Job.load(native), Job.load(tmp_path / "job")
    query = "SELECT timestamp, entity, level, rtrim(message, chr(10)), trace_id FROM logs ORDER BY ALL"
    want, got = a.query(query), b.query(query)
    assert len(want) > 1_000 and {w[2] for w in want} == {"INFO", "WARN", "ERROR"}
    assert got == want
    assert [(n, s) for n, s, _ in ranking(a)[:5]] == [(n, s) for n, s, _ in ranking(b)[:5]]
    assert ranking(b)[0][0] == "ts-contacts-service"


def _cri(lines: list[tuple[float, str]]) -> str:
    start = dt.datetime(2024, 5, 1, 10)
    return "".join(f"{(start + dt.timedelta(seconds=s)).isoformat()}Z stdout F {text}\n" for s, text in lines)


def test_a_stack_trace_shipped_as_one_line_per_frame_is_joined_back_into_the_line_it_continues(tmp_path):
    """Java (the exception's line after the message, frames, Caused by, `... N more`), Python (Traceback,
    File lines, source lines, the exception that ends it) and Go (panic, goroutine, function and file
    lines): each is one record at the time, level and trace id of its first line; the next record of the
    pod, a frame written more than a second later, another pod's line and a line of its own level are
    not joined."""
    java = ["2024-05-01 10:00:00.100 ERROR 1 --- [nio-8080-exec-1] c.e.OrderService : order failed "
            "trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
            "java.lang.IllegalStateException: payment declined",
            "\tat com.example.OrderService.pay(OrderService.java:42)",
            "\tat com.example.OrderController.post(OrderController.java:17)",
            "Caused by: java.net.ConnectException: Connection refused",
            "\tat java.base/sun.nio.ch.Net.connect0(Native Method)",
            "\t... 12 more"]
    (tmp_path / "order-5c9f7-abcde.log").write_text(
        _cri([(0.1, java[0])] + [(0.1 + k / 1000, line) for k, line in enumerate(java[1:], 1)]
             + [(0.2, "2024-05-01 10:00:00.200  INFO 1 --- [main] c.e.OrderService : order 7 placed"),
                (3.0, "\tat com.example.Late.frame(Late.java:1)"),
                (3.0, "2024-05-01 10:00:03.000  WARN 1 --- [main] c.e.OrderService : slow")]))
    python = ["ERROR:root:charge failed", "Traceback (most recent call last):",
              '  File "/app/charge.py", line 12, in charge', "    amount = int(body['amount'])",
              "ValueError: invalid literal for int() with base 10: 'x'"]
    (tmp_path / "charge-7f6d5-fghij.log").write_text(_cri([(1.0 + k / 1000, line) for k, line in enumerate(python)]
                                                         + [(1.5, "INFO:root:charged 3")]))
    go = ["panic: runtime error: index out of range [3] with length 3", "goroutine 1 [running]:",
          "main.handle(0xc000012345)", "\t/app/main.go:12 +0x1d", "created by net/http.(*Server).Serve",
          "\t/usr/local/go/src/net/http/server.go:3285 +0x4b4"]
    (tmp_path / "cart-6b8c4-klmno.log").write_text(_cri([(2.0 + k / 1000, line) for k, line in enumerate(go)]))
    (tmp_path / "cart-6b8c4-pqrst.log").write_text(_cri([(2.002, "\tat another.Pod(Line.java:1)")]))
    out = read_exports([tmp_path])
    by_pod: dict[str, list] = {}
    for row in sorted(out.logs, key=lambda r: (r[0], r[3])):
        by_pod.setdefault(row[1], []).append(row)
    t = dt.datetime(2024, 5, 1, 10)
    order = by_pod["order-5c9f7-abcde"]
    assert [(r[0], r[2], r[4]) for r in order] == [
        (t + dt.timedelta(seconds=0.1), "ERROR", "4bf92f3577b34da6a3ce929d0e0e4736"),
        (t + dt.timedelta(seconds=0.2), "INFO", None), (t + dt.timedelta(seconds=3), None, None),
        (t + dt.timedelta(seconds=3), "WARN", None)]
    assert order[0][3] == "\n".join(java)
    assert [r[3] for r in by_pod["charge-7f6d5-fghij"]] == ["\n".join(python), "INFO:root:charged 3"]
    assert by_pod["charge-7f6d5-fghij"][0][2] == "ERROR"
    assert [r[3] for r in by_pod["cart-6b8c4-klmno"]] == ["\n".join(go)]
    assert [r[3] for r in by_pod["cart-6b8c4-pqrst"]] == ["\tat another.Pod(Line.java:1)"]
    assert out.records["log lines joined to the line they continue"] == 6 + 4 + 5
    assert out.records["container log lines"] == len(java) + 3 + len(python) + 1 + len(go) + 1


def test_frames_join_only_within_one_file_and_a_record_has_a_bounded_length(tmp_path):
    """Two files of one pod (two containers) keep their lines apart; a runaway trace is cut into records of
    at most MOST lines, none lost; lines of a stream's level label (every frame at its head's level) join."""
    from rcagent.exports.multiline import MOST, join_lines
    t = dt.datetime(2024, 5, 1, 10)
    rows = [(t, "web-1", "ERROR", "boom", None), (t, "web-1", None, "\tat a.B(C.java:1)", None)]
    joined, n = join_lines(rows, ["a.log", "b.log"])
    assert n == 0 and sorted(joined, key=str) == sorted(rows, key=str)
    frames = [(t, "web-1", "ERROR", "\tat a.B(C.java:1)", None)] * (MOST + 10)
    joined, n = join_lines([(t, "web-1", "ERROR", "boom", None)] + frames, ["a.log"] * (MOST + 11))
    assert n == MOST + 9 and [r[3].count("\n") + 1 for r in joined] == [MOST, 11]


@pytest.mark.parametrize("form", ["cri-frames", "otlp"])
def test_a_real_cases_stack_traces_read_back_as_its_log_lines_each_error_line_with_its_trace(job_of, tmp_path, form):
    """The TrainTicket case's log lines as each pod's CRI log file, every error line followed by a Java
    stack trace one frame a line, as a logger's `error(msg, e)` leaves it without a multiline stage; or as
    OTLP log records, the trace of every error line recorded beside it (`exception.*`), as OpenTelemetry's
    logger appenders write it: `job create` gives each error line its trace back, so the job holds the
    native job's lines (each error line with its trace) and its ranking's top five is the native job's."""
    from tests.conftest import CONTACTS_CASE
    from tests.exportwriter import STACK_TRACE
    native = job_of(CONTACTS_CASE)
    periods = write_exports(native, tmp_path / "exports", logs=form)
    if form == "cri-frames":
        added = sum(text.count(STACK_TRACE[0]) for text in map(Path.read_text, (tmp_path / "exports").rglob("*.log")))
        told = f"joined to the log line they continue: {added * len(STACK_TRACE)} lines"
    else:
        added = (tmp_path / "exports" / "otlp" / "logs.jsonl").read_text().count('"exception.stacktrace"')
        told = f"given the exception recorded beside them: {added} log lines"
    assert added > 10
    args = ["job", "create", tmp_path / "job", "--from", tmp_path / "exports", "--window", periods["window"]]
    for b in periods["baseline"]:
        args += ["--baseline", b]
    r = rcagent(*args)
    assert r.returncode == 0, r.stderr
    assert told in r.stdout
    a, b = Job.load(native), Job.load(tmp_path / "job")
    query = "SELECT timestamp, entity, level, rtrim(message, chr(10)), trace_id FROM logs ORDER BY ALL"
    want, got = a.query(query), b.query(query)
    first_lines = [(*row[:3], row[3].split("\n", 1)[0], row[4]) for row in got]
    assert first_lines == want
    errors = [row for row in got if row[2] == "ERROR"]
    assert len(errors) == added and all(row[3].endswith("\n" + "\n".join(STACK_TRACE)) for row in errors)
    assert [(n, s) for n, s, _ in ranking(a)[:5]] == [(n, s) for n, s, _ in ranking(b)[:5]]


def test_a_trace_in_a_file_written_newest_first_joins_in_the_order_it_was_written():
    """Loki answers newest first by default, and a trace's lines can share one time: read oldest first,
    the message leads its frames."""
    from rcagent.exports.multiline import join_lines
    t = dt.datetime(2024, 5, 1, 10)
    written = [(t, "web-1", "ERROR", "order failed", None),
               (t, "web-1", None, "java.lang.IllegalStateException: x", None),
               (t, "web-1", None, "\tat a.B(C.java:1)", None),
               (t + dt.timedelta(seconds=5), "web-1", "INFO", "ok", None)]
    for rows in (written, written[::-1]):
        joined, n = join_lines(rows, ["loki.json"] * 4)
        assert n == 2
        assert [r[3] for r in joined] == ["order failed\njava.lang.IllegalStateException: x\n\tat a.B(C.java:1)", "ok"]


def test_an_indented_line_that_states_its_own_level_is_a_record_of_its_own():
    """Python's `%(levelname)8s` pads a level to the right: `    INFO ready` starts with spaces but says
    its level, so it is a record, not a frame; a frame under a stream's level label still joins."""
    from rcagent.exports.multiline import join_lines
    t = dt.datetime(2024, 5, 1, 10)
    rows = [(t, "web-1", "INFO", "    INFO started", None), (t, "web-1", "INFO", "    INFO ready", None),
            (t, "web-1", "WARN", " WARNING slow", None), (t, "web-1", "WARN", "\tat a.B(C.java:1)", None)]
    joined, n = join_lines(rows, ["a.log"] * 4)
    assert n == 1
    assert [r[3] for r in joined] == ["    INFO started", "    INFO ready", " WARNING slow\n\tat a.B(C.java:1)"]


def test_an_exception_recorded_beside_a_log_line_follows_it_as_the_logger_writes_it(tmp_path):
    """OTLP log records with `exception.stacktrace`, or only `exception.type` and `exception.message`, and
    Elasticsearch documents with ECS's `error.stack_trace` or logstash-logback-encoder's `stack_trace`:
    the trace follows the message on the lines after it (at most MOST lines). A record whose message holds
    the trace already, one with an exception message but no type, and one with none are kept as they are."""
    from rcagent.exports import EXCEPTIONS
    from rcagent.exports.multiline import MOST
    trace = "java.lang.IllegalStateException: declined\n\tat com.example.Pay.charge(Pay.java:42)"

    def record(body: str, **attrs) -> dict:
        return {"timeUnixNano": "1714557600000000000", "severityText": "ERROR", "body": {"stringValue": body},
                "attributes": [{"key": k.replace("_", "."), "value": {"stringValue": v}} for k, v in attrs.items()]}
    records = [record("charge failed", exception_stacktrace=trace + "\n"),
               record("charge failed", exception_type="ValueError", exception_message="bad amount"),
               record("charge failed " + trace, exception_stacktrace=trace),
               record("charge failed", exception_message="no type"),
               record("charge failed"),
               record("runaway", exception_stacktrace="\n".join(["x.Y: z"] + ["\tat a.B(C.java:1)"] * MOST))]
    (tmp_path / "logs.jsonl").write_text(json.dumps({"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "pay"}}]}, "scopeLogs": [{"logRecords": records}]}]}))
    docs = [{"@timestamp": "2024-05-01T10:00:01Z", "message": "charge failed", "service": {"name": "pay"},
             "error": {"type": "java.lang.IllegalStateException", "message": "declined", "stack_trace": trace}},
            {"@timestamp": "2024-05-01T10:00:02Z", "message": "charge failed", "service": {"name": "pay"},
             "stack_trace": trace},
            {"@timestamp": "2024-05-01T10:00:03Z", "message": "charge failed", "service": {"name": "pay"},
             "error": {"type": "TimeoutError", "message": "upstream"}},
            {"@timestamp": "2024-05-01T10:00:04Z", "message": "charge failed", "service": {"name": "pay"},
             "error": "a logrus error field"}]
    (tmp_path / "hits.jsonl").write_text("".join(json.dumps({"_index": "logs", "_source": d}) + "\n" for d in docs))
    out = read_exports([tmp_path / "logs.jsonl", tmp_path / "hits.jsonl"])
    by_time = sorted(out.logs, key=lambda r: (r[0], len(r[3])))
    assert [r[3] for r in by_time[:6]] == [
        "charge failed", "charge failed", "charge failed\nValueError: bad amount", "charge failed\n" + trace,
        "charge failed " + trace, "\n".join(["runaway", "x.Y: z"] + ["\tat a.B(C.java:1)"] * (MOST - 2))]
    assert [r[3] for r in by_time[6:]] == ["charge failed\n" + trace, "charge failed\n" + trace,
                                           "charge failed\nTimeoutError: upstream", "charge failed"]
    assert {r[2] for r in out.logs} == {"ERROR", None} and out.records[EXCEPTIONS] == 6
