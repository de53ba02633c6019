#!/usr/bin/python3
"""bench/report.py: turn a run's figures into the table and the plots.

  report.py --results FILE --work DIR --out BENCH_DIR

FILE holds the "key value" lines run.sh and its helpers appended.  Prints
the table (figures, baselines measured in the same run, ratios, the targets
of issues 5 and 11 and whether each is met), writes it to
BENCH_DIR/RESULTS.md, and draws BENCH_DIR/{emit,relay,latency}.png with
gnuplot (bench/plots.gp) from data files written to DIR.  With --partial
(a run of some cases only) only the rows of the cases that ran are written,
to BENCH_DIR/RESULTS.partial.md, and nothing is drawn.
"""
import argparse
import datetime
import os
import subprocess

# outbox.retry_schedule's default; a failing event is attempted at most
# once plus once per step whose shortest delay (-20% jitter) has passed.
RETRY_SCHEDULE_S = [5, 300, 1800, 7200, 18000, 36000, 36000]


def load(path):
    r = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition(" ")
            r[key] = value
    return r


def num(r, key):
    try:
        return float(r[key])
    except (KeyError, ValueError):
        return float("nan")


def fmt(x, unit=""):
    if x != x:
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}{unit}"
    return f"{x:,.1f}{unit}" if abs(x) >= 10 else f"{x:,.2f}{unit}"


def ratio(a, b):
    return a / b if b and b == b and a == a else float("nan")


def verdict(ok):
    return "n/a" if ok is None else ("**yes**" if ok else "**NO**")


def max_attempts_within(seconds):
    elapsed, n = 0.0, 1
    for step in RETRY_SCHEDULE_S:
        elapsed += step * 0.8
        if elapsed > seconds:
            break
        n += 1
    return n


def build_rows(r):
    rows = []

    def row(case, measured, baseline, rat, target, ok):
        rows.append((case, measured, baseline, rat, target, verdict(ok)))

    thr = num(r, "throughput.rate")

    def rounds_of(key, scale=1):
        return ", ".join(fmt(float(x) * scale, "/s") for x in r[f"{key}.rounds"].split(","))

    # 1. Emit cost (targets: issue 38's)
    if "emit.off.outbox" in r:
        for mode in ("off", "on"):
            emit, bare, pgq, none = (num(r, f"emit.{mode}.{v}") for v in ("outbox", "bare", "pgq", "none"))
            sc = f"synchronous_commit={mode}"
            row(f"1 emit cost, {sc}: business row alone", f"{fmt(none)} tx/s", "", "", "(for scale)", None)
            row(f"1 emit cost, {sc}: outbox.emit() vs bare INSERT", f"{fmt(emit)} tx/s",
                f"{fmt(bare)} tx/s", fmt(ratio(emit, bare)), "≥ 0.95", ratio(emit, bare) >= 0.95)
            row(f"1 emit cost, {sc}: outbox.emit() vs pgq.insert_event()", f"{fmt(emit)} tx/s",
                f"{fmt(pgq)} tx/s", fmt(ratio(emit, pgq)), "≥ 1.00", ratio(emit, pgq) >= 1.00)
            if f"emit.{mode}.outbox.rounds" in r:
                rounds = {v: [float(x) for x in r[f"emit.{mode}.{v}.rounds"].split(",")] for v in ("outbox", "bare")}
                row(f"1 emit cost, {sc}: each round, emit against bare INSERT (the median counts)",
                    ", ".join(fmt(ratio(e, b)) for e, b in zip(rounds["outbox"], rounds["bare"])),
                    "", "", "", None)
    if "emit_many.outbox" in r:
        many, bare = num(r, "emit_many.outbox"), num(r, "emit_many.bare")
        row("1 emit_many: 1,000 events a transaction against a multi-row INSERT of the same rows",
            f"{fmt(many * 1000)} events/s (rounds {rounds_of('emit_many.outbox', 1000)})",
            f"{fmt(bare * 1000)} rows/s (rounds {rounds_of('emit_many.bare', 1000)})",
            fmt(ratio(many, bare)), "≥ 0.90", ratio(many, bare) >= 0.90)
    if "capture.capture" in r:
        cap, plain = num(r, "capture.capture"), num(r, "capture.plain")
        row(f"1 capture trigger: an UPDATE of {int(num(r, 'capture.rows')):,} rows against a plain AFTER trigger "
            "writing the same rows to a table",
            f"{fmt(cap)} rows/s (rounds {rounds_of('capture.capture')})",
            f"{fmt(plain)} rows/s (rounds {rounds_of('capture.plain')})",
            fmt(ratio(cap, plain)), "≥ 0.90", ratio(cap, plain) >= 0.90)

    # 2. Relay throughput
    if "throughput.rate" in r:
        wrk = num(r, "wrk.rate")
        row(f"2 relay throughput, {int(num(r, 'throughput.deliveries')):,} events, 1 endpoint",
            f"{fmt(thr)}/s (relay CPU {num(r, 'throughput.relay_cpu'):.0%}, "
            f"senders {num(r, 'throughput.senders_cpu'):.0%})",
            f"wrk {fmt(wrk)}/s", fmt(ratio(thr, wrk)), "≥ 0.30", ratio(thr, wrk) >= 0.30)
        if "throughput.rounds" in r:
            row("2 relay throughput: each round (the median counts)",
                ", ".join(f"{fmt(float(x))}/s" for x in r["throughput.rounds"].split(",")),
                "wrk " + ", ".join(f"{fmt(float(x))}/s" for x in r["wrk.rounds"].split(",")),
                "", "", None)
        alone = num(r, "alone.rate")
        if alone == alone:
            row("2 relay throughput, the relay sending alone (outbox.senders = 0)",
                f"{fmt(alone)}/s (relay CPU {num(r, 'alone.relay_cpu'):.0%})",
                f"wrk {fmt(wrk)}/s", fmt(ratio(alone, wrk)), "(for scale)", None)

    # 3. Latency
    if "latency.p50_ms" in r:
        p50, p99 = num(r, "latency.p50_ms"), num(r, "latency.p99_ms")
        arrived = f"{int(num(r, 'latency.arrived')):,}/{int(num(r, 'latency.sent')):,} arrived"
        row("3 latency commit→arrival, p50", f"{fmt(p50)} ms", arrived, "", "< 5 ms", p50 < 5)
        row("3 latency commit→arrival, p99", f"{fmt(p99)} ms",
            f"p90 {fmt(num(r, 'latency.p90_ms'))} ms, max {fmt(num(r, 'latency.max_ms'))} ms", "",
            "< 50 ms", p99 < 50)

    # 4. Scale
    if "scale_large.rate" in r:
        small, large = num(r, "scale_small.rate"), num(r, "scale_large.rate")
        timed_out = r.get("scale_large.timed_out") == "1"
        row(f"4 scale: {int(num(r, 'scale_large.deliveries')):,} waiting vs "
            f"{int(num(r, 'scale_small.deliveries')):,}",
            f"{fmt(large)}/s" + (" (timed out)" if timed_out else ""), f"{fmt(small)}/s",
            fmt(ratio(large, small)), "≥ 0.80", ratio(large, small) >= 0.80)
        before, after = num(r, "scale_before.size_bytes"), num(r, "scale_retained.size_bytes")
        rot_before, rot_after = num(r, "scale_before.rotated_bytes"), num(r, "scale_retained.rotated_bytes")
        row("4 scale: outbox tables' size after delivery and retention (periods of 2 s)",
            f"{fmt(after / 2**20)} MB after {fmt(num(r, 'scale_retention.seconds'))} s: rotated partitions "
            f"{fmt(rot_after / 2**10)} kB, the rest {fmt((after - rot_after) / 2**10)} kB "
            f"(peak backlog {fmt(num(r, 'scale_emitted.size_bytes') / 2**20)} MB)",
            f"{fmt(before / 2**20)} MB at start: {fmt(rot_before / 2**10)} kB, "
            f"{fmt((before - rot_before) / 2**10)} kB", fmt(ratio(after, before)), "≤ 1.10",
            ratio(after, before) <= 1.10)
        dead = num(r, "scale_after.dead_tuples")
        row("4 scale: dead tuples in outbox tables after delivery", f"{fmt(dead)}",
            r.get("scale_after.dead_detail", ""), "", "no pile-up (< 1% of events)",
            dead < 0.01 * num(r, "scale_large.deliveries"))
        seq = r.get("scale.seqscans", "n/a")
        row("4 scale: sequential scans of events/attempt_log while delivering", seq, "", "", "none",
            seq == "none")

    # 5. Fan-out
    if "fanout.rate" in r:
        fan = num(r, "fanout.rate")
        row(f"5 fan-out, {int(num(r, 'fanout.deliveries')):,} deliveries to 16 endpoints",
            f"{fmt(fan)}/s total", f"case 2 {fmt(thr)}/s", fmt(ratio(fan, thr)), "≥ 0.80",
            ratio(fan, thr) >= 0.80)

    # 6. Isolation
    if "isolation_failing.rate" in r:
        for kind, what in (("failing", "answering 503"), ("hanging", "never answering")):
            h = num(r, f"isolation_{kind}.rate")
            row(f"6 isolation, one endpoint {what}: healthy endpoint", f"{fmt(h)}/s",
                f"case 2 {fmt(thr)}/s", fmt(ratio(h, thr)), "≥ 0.90", ratio(h, thr) >= 0.90)
            attempts, events = num(r, f"isolation_{kind}.bad_attempts"), num(r, f"isolation_{kind}.bad_events")
            window = num(r, f"isolation_{kind}.seconds")
            allowed = max_attempts_within(window)
            row(f"6 isolation, one endpoint {what}: its attempts meanwhile",
                f"{attempts:,.0f} attempts of {events:,.0f} events",
                f"schedule allows {allowed} per event in {fmt(window)} s", fmt(ratio(attempts, events)),
                f"≤ {allowed} per event", ratio(attempts, events) <= allowed)

    # 7. Memory
    for label, what in (("scale_large", "1,000,000 waiting (case 4)"), ("memory_big", "100 MB responses")):
        if f"{label}.rssanon_peak_kb" not in r:
            continue
        anon = num(r, f"{label}.rssanon_peak_kb") / 1024
        row(f"7 relay memory, {what}", f"RssAnon peak {fmt(anon)} MB",
            f"VmHWM {fmt(num(r, f'{label}.vmhwm_kb') / 1024)} MB (incl. shared buffers touched)", "",
            "bounded (private < 100 MB)", anon < 100)

    build_rows_issue11(r, row)
    build_rows_redis(r, row)
    return rows


def build_rows_redis(r, row):
    """Cases 21 to 23 (bench/redis.sh): the median of each side, its worst
    round, and the ratio of the medians."""
    fsync = r.get("redis.appendfsync", "?")
    for case, key, what, a, a_name, b, b_name, target in (
            ("21", "redis_bullmq", "BullMQ jobs", "outbox", "outbox", "node",
             f"Queue.addBulk, pages of {r.get('redis.page', '?')}", 1.0),
            ("22", "redis_stream", "stream entries", "outbox", "outbox", "benchmark",
             "redis-benchmark -P 64 XADD", 0.5),
            ("23", "redis_beside", "BullMQ jobs beside webhook endpoints delivering", "beside", "beside",
             "alone", "the BullMQ endpoint alone", 0.8)):
        if f"{key}.ratio" not in r:
            continue
        rat = num(r, f"{key}.ratio")
        row(f"{case} Redis (appendfsync {fsync}): {what}",
            f"{a_name} {fmt(num(r, f'{key}.{a}_rate'))}/s (worst {fmt(num(r, f'{key}.{a}_worst'))}/s)",
            f"{b_name} {fmt(num(r, f'{key}.{b}_rate'))}/s (worst {fmt(num(r, f'{key}.{b}_worst'))}/s)",
            fmt(rat), f"≥ {target:.1f}", rat >= target)
        sides = r[f"{key}.rounds"].split("/")
        row(f"{case}: each round (the medians count)",
            ", ".join(f"{fmt(float(x))}/s" for x in sides[0].split(",")),
            ", ".join(f"{fmt(float(x))}/s" for x in sides[1].split(",")), "", "", None)


def cpu_per_delivery(r, label):
    """The relay's CPU per delivery in µs, each round of label's (label_1,
    label_2, ...), the median: less at the mercy of a busy machine than the
    rate."""
    us = sorted(num(r, f"{label}_{i}.relay_cpu") * num(r, f"{label}_{i}.seconds")
                / num(r, f"{label}_{i}.deliveries") * 1e6
                for i in range(1, len(r[f"{label}.rounds"].split(",")) + 1))
    return us[(len(us) - 1) // 2]


def rate_and_cpu(r, label):
    """A delivery run's rate, flagged if it was cut short, with the relay's CPU
    and its peak private memory (RssAnon)."""
    flags = ""
    if r.get(f"{label}.timed_out") == "1":
        flags += ", timed out"
    if r.get(f"{label}.ran_out") == "1":
        flags += ", backlog ran out"
    return (f"{fmt(num(r, f'{label}.rate'))}/s (relay CPU {num(r, f'{label}.relay_cpu'):.0%}, "
            f"private {fmt(num(r, f'{label}.rssanon_peak_kb') / 1024)} MB{flags})")


def each_round(r, row, case, label, against=None, name="alone"):
    """A row of a case's rates in each round (the medians count), and of
    those it is measured against (name says what they are)."""
    if f"{label}.rounds" not in r:
        return
    def rounds(key):
        return [float(x) for x in r[f"{key}.rounds"].split(",")]

    def rates(key):
        return ", ".join(f"{fmt(x)}/s" for x in rounds(key))

    if against is None:
        row(f"{case}: each round (the medians count)", rates(label), "", "", "", None)
        return
    ratios = [ratio(a, b) for a, b in zip(rounds(label), rounds(against))]
    row(f"{case}: each round (the medians count)", rates(label), f"{name} {rates(against)}",
        ", ".join(fmt(x) for x in ratios), "", None)
    # The worst round beside the median (issue 35: at least 0.7 of it).
    mid = sorted(ratios)[(len(ratios) - 1) // 2]
    if len(ratios) > 1 and mid == mid and mid > 0:
        row(f"{case}: the worst round against the median", fmt(min(ratios)), f"median {fmt(mid)}",
            fmt(min(ratios) / mid), "≥ 0.70", min(ratios) / mid >= 0.70)


def build_rows_issue11(r, row):
    """Cases 8 to 13, expiry and rate, run at the server's default relay settings."""
    one = num(r, "one.rate")

    # 8. One endpoint at default settings
    if "one.rate" in r:
        wrk = num(r, "one_wrk.rate")
        row(f"8 one endpoint at default settings, {int(num(r, 'one.deliveries')):,} events",
            rate_and_cpu(r, "one"), f"wrk {fmt(wrk)}/s", fmt(ratio(one, wrk)), "≥ 0.30",
            ratio(one, wrk) >= 0.30)
        row("8 one endpoint at default settings: each round (the median counts)",
            ", ".join(f"{fmt(float(x))}/s" for x in r["one.rounds"].split(",")),
            "wrk " + ", ".join(f"{fmt(float(x))}/s" for x in r["one_wrk.rounds"].split(",")),
            "", "", None)
    if "one_curl.rate" in r:
        # libcurl alone on the same request (bench/curl_post.c): the most a
        # relay sending through libcurl could reach
        curl = num(r, "one_curl.rate")
        row("8 libcurl alone, same request and concurrency (bench/curl_post.c)",
            f"{fmt(curl)}/s ({', '.join(fmt(float(x)) + '/s' for x in r['one_curl.rounds'].split(','))})",
            f"wrk {fmt(num(r, 'one_wrk.rate'))}/s", fmt(ratio(curl, num(r, "one_wrk.rate"))), "", None)
        row("8 the relay against libcurl alone", rate_and_cpu(r, "one"), f"libcurl alone {fmt(curl)}/s",
            fmt(ratio(one, curl)), "", None)

    # 9. Many endpoints, each with its own event type, against one endpoint
    # delivered the same way in the same rounds (before 399ff4b: case 8's)
    paired = "many_one.rate" in r
    single = num(r, "many_one.rate") if paired else one
    for label, target in (("many_small", 0.8), ("many_large", 0.5)):
        if f"{label}.rate" not in r:
            continue
        rate = num(r, f"{label}.rate")
        row(f"9 {int(num(r, f'{label}.endpoints')):,} endpoints, each with its own event type, "
            f"{int(num(r, f'{label}.deliveries')):,} deliveries",
            rate_and_cpu(r, label),
            f"one endpoint {rate_and_cpu(r, 'many_one')}" if paired else f"case 8 {fmt(one)}/s",
            fmt(ratio(rate, single)), f"≥ {target:.2f}",
            ratio(rate, single) >= target if single == single else None)
        each_round(r, row, f"9 {int(num(r, f'{label}.endpoints')):,} endpoints", label,
                   "many_one" if paired else None, "one endpoint")

    # 20. Endpoints created just before a burst (issue 35: every round, the
    # worst too, >= 0.8 of one endpoint)
    if "burst_many.rate" in r:
        many, alone = num(r, "burst_many.rate"), num(r, "burst_one.rate")
        pairs = list(zip([float(x) for x in r["burst_many.rounds"].split(",")],
                         [float(x) for x in r["burst_one.rounds"].split(",")]))
        worst = min(ratio(a, b) for a, b in pairs)
        row(f"20 {int(num(r, 'burst_many.endpoints')):,} endpoints created just before a burst of "
            f"{int(num(r, 'burst_many.deliveries')):,} events, own type each",
            rate_and_cpu(r, "burst_many"), f"one endpoint, likewise {rate_and_cpu(r, 'burst_one')}",
            f"{fmt(ratio(many, alone))} (worst round {fmt(worst)})", "≥ 0.80 in every round", worst >= 0.80)
        each_round(r, row, "20", "burst_many", "burst_one", "one endpoint")

    # 10. Idle endpoints beside busy ones
    if "idle_beside.rate" in r:
        beside, alone = num(r, "idle_beside.rate"), num(r, "idle_alone.rate")
        row(f"10 {int(num(r, 'idle_alone.endpoints'))} endpoints getting events among "
            f"{int(num(r, 'idle_beside.endpoints')):,} defined",
            rate_and_cpu(r, "idle_beside"), f"alone {rate_and_cpu(r, 'idle_alone')}",
            fmt(ratio(beside, alone)), "≥ 0.90", ratio(beside, alone) >= 0.90)
        each_round(r, row, "10", "idle_beside", "idle_alone")

    # 11. A receiver that answers late
    ceiling = num(r, "slow_wrk.rate")
    for label, target in (("slow_small", 4000), ("slow_large", 5000)):
        if f"{label}.rate" not in r:
            continue
        rate = num(r, f"{label}.rate")
        row(f"11 {int(num(r, f'{label}.endpoints')):,} endpoints, receiver answering after "
            f"{int(num(r, 'slow.delay_ms'))} ms, over {fmt(num(r, f'{label}.seconds'))} s",
            rate_and_cpu(r, label) + f"; connections open at the end: {int(num(r, f'{label}.connections')):,}",
            f"receiver's ceiling: wrk, 2,000 connections, {fmt(ceiling)}/s", fmt(ratio(rate, ceiling)),
            f"≥ {target:,}/s", rate >= target)
    if "slow_large.rate" in r:
        anon = num(r, "slow_large.rssanon_peak_kb") / 1024
        row(f"11 relay memory, {int(num(r, 'slow_large.endpoints')):,} endpoints answering after "
            f"{int(num(r, 'slow.delay_ms'))} ms", f"RssAnon peak {fmt(anon)} MB",
            f"VmHWM {fmt(num(r, 'slow_large.vmhwm_kb') / 1024)} MB (incl. shared buffers touched)", "",
            "private < 256 MB", anon < 256)

    # 12. Endpoints that never answer among healthy ones
    if "hang_beside.rate" in r:
        beside, alone = num(r, "hang_beside.rate"), num(r, "hang_alone.rate")
        bad = int(num(r, "hang_beside.bad_endpoints"))
        row(f"12 {int(num(r, 'hang_alone.endpoints')):,} endpoints beside {bad} never answering "
            f"(timeout {r.get('hang_beside.timeout', '?').replace('_', ' ')})",
            rate_and_cpu(r, "hang_beside") + f"; {int(num(r, 'hang_beside.bad_attempts')):,} attempts "
            f"to the {bad}", f"alone {rate_and_cpu(r, 'hang_alone')}",
            fmt(ratio(beside, alone)), "≥ 0.90", ratio(beside, alone) >= 0.90)
        each_round(r, row, "12", "hang_beside", "hang_alone")
        if "hang_beside.later_rate_median" in r:
            later, later_alone = num(r, "hang_beside.later_rate_median"), num(r, "hang_alone.later_rate_median")
            row("12 after the first second of each run (the start, when the relay finds the "
                f"{bad}, left out; medians; not a target)", f"{fmt(later)}/s",
                f"alone {fmt(later_alone)}/s", fmt(ratio(later, later_alone)), "", None)

    # expiry: expiry and priority in use against off (issue 14, items 2 and 3)
    if "ctl_on.rate" in r:
        on, off = num(r, "ctl_on.rate"), num(r, "ctl_off.rate")
        row(f"expiry: one endpoint, {int(num(r, 'ctl_on.deliveries')):,} events with expires_at, "
            f"priority and max_age, median of {len(r['ctl_on.rounds'].split(','))} rounds",
            rate_and_cpu(r, "ctl_on"), f"off {rate_and_cpu(r, 'ctl_off')}",
            fmt(ratio(on, off)), "≥ 0.95", ratio(on, off) >= 0.95)

    # auth, format, mtls, oauth2: a bearer token, CloudEvents, a client
    # certificate and OAuth2 client credentials against none (issue 14)
    for case, name, label, base in (
            ("auth", "auth", "with a bearer token (auth)", "without"),
            ("format", "ce", "in CloudEvents (structured)", "Standard Webhooks"),
            ("mtls", "mtls", "over HTTPS with a client certificate (mutual TLS)", "HTTPS without"),
            ("oauth2", "oauth2", "with OAuth2 client credentials", "without auth")):
        if f"{name}_on.rate" in r:
            on, off = num(r, f"{name}_on.rate"), num(r, f"{name}_off.rate")
            got = rate_and_cpu(r, f"{name}_on")
            if f"{name}_on.token_fetches" in r:
                got += f"; {int(num(r, f'{name}_on.token_fetches'))} token fetches in all"
            row(f"{case}: one endpoint {label}, "
                f"{int(num(r, f'{name}_on.deliveries')):,} events, median of "
                f"{len(r[f'{name}_on.rounds'].split(','))} rounds",
                got, f"{base} {rate_and_cpu(r, f'{name}_off')}",
                fmt(ratio(on, off)), "≥ 0.95", ratio(on, off) >= 0.95)
            if case in ("mtls", "oauth2"):
                cpu_on, cpu_off = cpu_per_delivery(r, f"{name}_on"), cpu_per_delivery(r, f"{name}_off")
                row(f"{case}: the same, the relay's CPU per delivery (median of the rounds)",
                    f"{fmt(cpu_on)} µs", f"{base} {fmt(cpu_off)} µs", fmt(ratio(cpu_on, cpu_off)),
                    "(for scale)", None)

    # 13. HTTPS
    if "tls_http.rate" in r:
        http = num(r, "tls_http.rate")
        https = num(r, "tls_https.rate")
        row(f"13 one endpoint over HTTPS (HTTP/1.1, kept alive), {int(num(r, 'tls_https.deliveries')):,} "
            f"events, median of {len(r['tls_https.rounds'].split(','))} rounds",
            rate_and_cpu(r, "tls_https"), f"plain HTTP {rate_and_cpu(r, 'tls_http')}",
            fmt(ratio(https, http)), "(what TLS costs)", None)

    # 17. One https endpoint against wrk over HTTPS
    if "https.rate" in r:
        https, wrk = num(r, "https.rate"), num(r, "https_wrk.rate")
        row(f"17 one https endpoint at default settings, {int(num(r, 'https.deliveries')):,} events",
            rate_and_cpu(r, "https"), f"wrk over HTTPS {fmt(wrk)}/s", fmt(ratio(https, wrk)), "≥ 0.50",
            ratio(https, wrk) >= 0.50)
        row("17 each round (the medians count)",
            ", ".join(f"{fmt(float(x))}/s" for x in r["https.rounds"].split(",")),
            "wrk " + ", ".join(f"{fmt(float(x))}/s" for x in r["https_wrk.rounds"].split(",")), "", "", None)

    # 18. A host name per endpoint over https
    if "hosts_many.rate" in r:
        many, one = num(r, "hosts_many.rate"), num(r, "hosts_one.rate")
        row(f"18 {int(num(r, 'hosts_many.endpoints')):,} https endpoints on as many host names, "
            "own event type each", rate_and_cpu(r, "hosts_many"), f"one https endpoint {rate_and_cpu(r, 'hosts_one')}",
            fmt(ratio(many, one)), "≥ 0.80", ratio(many, one) >= 0.80)
        each_round(r, row, "18", "hosts_many", "hosts_one", "one")
        anon = num(r, "hosts_many.rssanon_peak_kb") / 1024
        row("18 relay private memory (RssAnon peak) during the run", f"{fmt(anon)} MB", "", "",
            "< 128 MB", anon < 128)
        idle = num(r, "hosts_idle.rssanon_kb") / 1024
        row(f"18 relay private memory with {int(num(r, 'hosts_many.endpoints')):,} TLS connections idle "
            "(largest of the rounds)", f"{fmt(idle)} MB", "", "", "< 64 MB", idle < 64)

    # 19. A host name per endpoint over https, the receiver answering late
    if "hosts_slow.rate" in r:
        rate = num(r, "hosts_slow.rate")
        row(f"19 {int(num(r, 'hosts_slow.endpoints')):,} https host names, receiver answering after "
            f"{int(num(r, 'slow.delay_ms'))} ms, over {fmt(num(r, 'hosts_slow.seconds'))} s",
            rate_and_cpu(r, "hosts_slow") + f"; connections open at the end: {int(num(r, 'hosts_slow.connections')):,}",
            "", "", "≥ 5,000/s", rate >= 5000)

    # rate: rate limits (issue 14, item 1)
    if "limited.rate" in r:
        rate, limit = num(r, "limited.rate"), num(r, "limited.limit")
        row(f"rate: one endpoint with rate_limit {fmt(limit)}, {int(num(r, 'limited.deliveries')):,} events",
            rate_and_cpu(r, "limited"), f"its limit {fmt(limit)}/s", fmt(ratio(rate, limit)),
            "within 5%", abs(ratio(rate, limit) - 1) <= 0.05)
    if "limit_on.rate" in r:
        on, off = num(r, "limit_on.rate"), num(r, "limit_off.rate")
        row(f"rate: one endpoint with rate_limit {fmt(num(r, 'limit_on.limit'))} (never reached), "
            f"{int(num(r, 'limit_on.deliveries')):,} events, median of "
            f"{len(r['limit_on.rounds'].split(','))} rounds",
            rate_and_cpu(r, "limit_on"), f"no limit {rate_and_cpu(r, 'limit_off')}",
            fmt(ratio(on, off)), "≥ 0.95", ratio(on, off) >= 0.95)
        cpu = {kind: cpu_per_delivery(r, f"limit_{kind}") for kind in ("on", "off")}
        row("rate: the same, the relay's CPU per delivery (median of the rounds)",
            f"{fmt(cpu['on'])} µs", f"no limit {fmt(cpu['off'])} µs", fmt(ratio(cpu["on"], cpu["off"])),
            "(for scale)", None)

    # views: the operators' views with many endpoints (issue 11, item 4)
    if "views_beside.status_ms" in r:
        for key, what in (("status", "endpoint_status"), ("backlog", "backlog"), ("health", "health()")):
            beside, alone = num(r, f"views_beside.{key}_ms"), num(r, f"views_alone.{key}_ms")
            row(f"views: {what} with {int(num(r, 'views_beside.endpoints')):,} endpoints "
                f"({int(num(r, 'views_beside.following')):,} following the stream), "
                f"{int(num(r, 'views_beside.waiting')):,} deliveries waiting (median of 5)",
                f"{fmt(beside)} ms", f"{int(num(r, 'views_alone.endpoints')):,} endpoints {fmt(alone)} ms",
                fmt(ratio(beside, alone)), "(for scale)", None)
    # ahead: priority across a backlog (issue 14)
    if "ahead_0.us_per_event" in r:
        base = num(r, "ahead_0.us_per_event")
        for pct in ("0.01", "0.2", "0.9"):
            us = num(r, f"ahead_{pct}.us_per_event")
            row(f"ahead: reading a backlog with {float(pct):.0%} of its events prioritised "
                f"({int(num(r, f'ahead_{pct}.sent_ahead')):,} sent ahead)",
                f"{fmt(us)} µs an event", f"none prioritised {fmt(base)} µs", fmt(ratio(us, base)),
                "(what the look ahead costs)", None)

def table(rows):
    head = ("case", "measured", "baseline (same run)", "ratio", "target", "met")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_plot_data(r, work):
    with open(os.path.join(work, "emit.dat"), "w") as f:
        for v, label in (("none", "business row only"), ("bare", "+ bare INSERT"),
                         ("pgq", "+ pgq.insert_event"), ("outbox", "+ outbox.emit")):
            f.write(f'"{label}" {num(r, f"emit.off.{v}"):.0f} {num(r, f"emit.on.{v}"):.0f}\n')
    thr = num(r, "throughput.rate")
    with open(os.path.join(work, "relay.dat"), "w") as f:
        for label, fig, base in (("2: relay / wrk", thr, num(r, "wrk.rate")),
                                 ("2: relay alone / wrk", num(r, "alone.rate"), num(r, "wrk.rate")),
                                 ("4: 1M / 10k waiting", num(r, "scale_large.rate"), num(r, "scale_small.rate")),
                                 ("5: fan-out / case 2", num(r, "fanout.rate"), thr),
                                 ("6: beside 503 / case 2", num(r, "isolation_failing.rate"), thr),
                                 ("6: beside dead / case 2", num(r, "isolation_hanging.rate"), thr)):
            f.write(f'"{label}" {fig:.0f} {base:.0f}\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--partial", action="store_true",
                    help="some cases only: write RESULTS.partial.md, no plots")
    args = ap.parse_args()
    r = load(args.results)
    rows = build_rows(r)
    met = sum(1 for row in rows if row[5] == "**yes**")
    missed = [row[0] for row in rows if row[5] == "**NO**"]

    env = (f"{r.get('env.cores')} cores ({r.get('env.cpu', '?').replace('_', ' ')}), "
           f"PostgreSQL {r.get('env.pg_version')}, outbox {r.get('env.git', '?')}, "
           f"relay settings {r.get('env.settings')}"
           + (f" for cases 1 to 7 and the server's defaults"
              + (f" but {r['env.default_override']}" if "env.default_override" in r else "")
              + f" ({r['env.default_settings']}) for 8 to 13 and the named cases"
              if "env.default_settings" in r else "")
           + f"; whole run {r.get('env.seconds')} s")
    times = ", ".join(f"{k[5:]} {v} s" for k, v in r.items() if k.startswith("time."))
    text = table(rows)
    print()
    print(env)
    print(text)
    print(f"\n{met} targets met, {len(missed)} missed")
    checks = sorted((k[6:], v) for k, v in r.items() if k.startswith("check."))

    name = "RESULTS.partial.md" if args.partial else "RESULTS.md"
    command = "bash bench/run.sh"
    if args.partial:
        command = f'BENCH_CASES="{r.get("env.cases", "").replace(",", " ")}" {command}'
    with open(os.path.join(args.out, name), "w") as f:
        f.write("# Benchmark results\n\n")
        f.write(f"Written by `{command}` on {datetime.date.today()}: {env}.\n")
        f.write("Ratios compare figures measured in this run; the targets are issue 5's (cases 1 to 7), "
                "issue 11's (cases 8 to 13), issue 14's (expiry, rate) and issue 44's (21 to 23).\n\n")
        f.write(text + "\n\n")
        f.write(f"{met} targets met, {len(missed)} missed.\n\n")
        f.write(f"Wall time per case: {times}.\n\n")
        f.write("Deliveries checked in the attempt log (2xx received / owed): " +
                ", ".join(f"{k} {v}" for k, v in checks) + ".\n")
        if not args.partial:
            f.write("\n![emit cost](emit.png)\n\n![relay throughput](relay.png)\n\n"
                    "![latency CDF](latency.png)\n")
    if args.partial:
        return

    write_plot_data(r, args.work)
    subprocess.run(["gnuplot", "-e", f"dir='{args.work}'; out='{args.out}'",
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots.gp")],
                   check=True)


if __name__ == "__main__":
    main()
