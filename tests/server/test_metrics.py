"""The hand-written Prometheus exposition: cumulative buckets, labels, round trip."""

from __future__ import annotations

from hinge.server.metrics import Counter, Gauge, Histogram, parse, render


def test_histogram_buckets_are_cumulative_and_inf_equals_count():
    h = Histogram("lat_seconds", "latency", buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 0.7, 3.0):
        h.observe(value)
    m = parse(render([h]))
    assert m['hinge:lat_seconds_bucket{le="0.1"}'] == 1
    assert m['hinge:lat_seconds_bucket{le="1"}'] == 3
    assert m['hinge:lat_seconds_bucket{le="+Inf"}'] == 4 == m["hinge:lat_seconds_count"]
    assert m["hinge:lat_seconds_sum"] == 0.05 + 0.5 + 0.7 + 3.0


def test_labels_are_escaped_and_each_metric_has_help_and_type():
    c = Counter("reqs_total", "requests")
    c.inc(2, {"reason": 'say "hi"\n'})
    g = Gauge("running", "running requests")
    g.set(3)
    text = render([c, g])
    assert 'hinge:reqs_total{reason="say \\"hi\\"\\n"} 2' in text
    assert "# TYPE hinge:reqs_total counter" in text and "# TYPE hinge:running gauge" in text
    assert "# HELP hinge:running running requests" in text
    assert parse(text)["hinge:running"] == 3


def test_a_counter_with_no_samples_still_exports_zero():
    assert parse(render([Counter("empty_total", "nothing yet")]))["hinge:empty_total"] == 0
