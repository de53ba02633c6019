#!/usr/bin/python3
"""bench/deliver.py: time the relay through a backlog that waits for it.

The events were emitted while the endpoints were paused.  This resumes them
(and emits one event nobody subscribes to, so that the commit wakes the
relay at once), then polls outbox.positions until every endpoint to wait
for has passed the last emitting transaction, printing progress as it goes.

  deliver.py --resume a,b --wait a --events N --label case2 --results FILE

Times are the server's: from the commit that resumed the endpoints to the
recording of the last page (positions.updated_at).  While it waits it
samples the relay's memory (VmHWM, reset first through clear_refs, and the
largest RssAnon seen), and the CPU time of the relay and of its senders.
Appends "label.key value" lines to FILE.  Connection settings come from the
PG* environment variables.

An item of --resume or --wait ending in "*" stands for every endpoint whose
name starts with the rest (the many-endpoint cases name thousands).  With
--count-log the deliveries counted while waiting, and after a time-out,
come from the attempt log instead of the positions (right when each
endpoint has event types of its own, where ids are no measure).  With
--window S the backlog is not waited out: after --warmup seconds the
successful attempts are counted over S seconds, and the rate is that
count over the measured interval (the cases whose receiver answers slowly).
"""
import argparse
import os
import sys
import time

import psycopg2

POLL = 0.1
QUERY_SHARE = 0.02
QUERY_EVERY_MAX = 2.0
PROGRESS_EVERY = 5.0


def relay_pid(cur):
    cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
    row = cur.fetchone()
    return row[0] if row else None


def sender_pids(cur):
    cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
    return [row[0] for row in cur.fetchall()]


def proc_status(pid):
    """VmHWM and RssAnon of pid in kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "RssAnon"):
                out[name] = int(value.split()[0])
    return out


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_sample(pid, senders):
    """The CPU seconds of the relay and of its senders, and machine_busy()."""
    return cpu_seconds(pid), sum(cpu_seconds(p) for p in senders), machine_busy()


def machine_busy():
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def expand(cur, items):
    """Endpoint names, with "prefix*" items replaced by the names they match."""
    names = []
    for item in items:
        if item.endswith("*"):
            cur.execute("SELECT name FROM outbox.endpoints WHERE starts_with(name, %s) ORDER BY name",
                        (item[:-1],))
            names += [row[0] for row in cur.fetchall()]
        else:
            names.append(item)
    return names


def endpoint_ids(cur, names):
    """The ids of the endpoints named.  The queries below reach rows by these
    ids: joined with outbox.endpoints by name instead, on statistics taken
    before 10,000 endpoints were created, a count of positions was planned
    as a nested loop and took 99 s of a core beside the relay (case 9)."""
    cur.execute("SELECT coalesce(array_agg(id), '{}') FROM outbox.endpoints WHERE name = ANY (%s)", (names,))
    return cur.fetchone()[0]


def delivered_in_log(cur, ids):
    """Successful attempts to the endpoints of these ids, from the attempt log."""
    cur.execute("""
        SELECT count(*) FROM outbox.attempt_log
         WHERE status BETWEEN 200 AND 299 AND endpoint_id = ANY (%s)""", (ids,))
    return cur.fetchone()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--resume", required=True, help="endpoints to resume, comma-separated (may be empty)")
    ap.add_argument("--commit", help="a prepared transaction holding the backlog: committed at the start")
    ap.add_argument("--wait", required=True, help="endpoints to wait for, comma-separated")
    ap.add_argument("--events", type=int, required=True, help="events each waited endpoint is owed")
    ap.add_argument("--label", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--count-log", action="store_true",
                    help="count deliveries in the attempt log, not by event id")
    ap.add_argument("--window", type=float, help="count deliveries over this many seconds")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before the window opens")
    args = ap.parse_args()

    conn = psycopg2.connect("")
    conn.autocommit = True
    cur = conn.cursor()
    resume = expand(cur, [r for r in args.resume.split(",") if r])
    wait = expand(cur, args.wait.split(","))
    wait_ids = endpoint_ids(cur, wait)
    total = args.events * len(wait)
    if args.commit:
        # The prepared backlog's transaction: its events are not visible yet.
        cur.execute("SELECT transaction::text FROM pg_prepared_xacts WHERE gid = %s", (args.commit,))
        (xid,) = cur.fetchone()
        cur.execute("SELECT (pg_current_xact_id()::text::bigint & ~((1::bigint << 32) - 1)"
                    " | %s::bigint)::text::xid8::text", (xid,))
        (last_txid,) = cur.fetchone()
        conn.rollback()
        first_id = None
    else:
        cur.execute("SELECT max(txid)::text, min(id) FROM outbox.events WHERE event_type LIKE 'bench.%'")
        last_txid, first_id = cur.fetchone()
    pid = relay_pid(cur)
    if pid is None:
        sys.exit("deliver.py: the relay is not running")
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")            # restart VmHWM from the current RSS
    peak_anon = 0
    cpu0 = cpu_seconds(pid)
    senders = sender_pids(cur)
    senders_cpu0 = sum(cpu_seconds(p) for p in senders)
    busy0, all0 = machine_busy()

    if args.commit:
        cur.execute(f"COMMIT PREPARED '{args.commit}'")
        cur.execute("SELECT outbox.emit('wake.relay', '{}')")
        cur.execute("SELECT min(id) FROM outbox.events WHERE event_type LIKE 'bench.%'")
        (first_id,) = cur.fetchone()
    conn.autocommit = False
    cur.execute("SELECT outbox.resume_endpoint(n) FROM unnest(%s::text[]) n", (resume,))
    cur.execute("SELECT outbox.emit('wake.relay', '{}')")
    conn.commit()
    cur.execute("SELECT clock_timestamp()")
    conn.commit()
    conn.autocommit = True
    # The commit happened between the resume and this: good to ~0.1 ms.
    (started,) = cur.fetchone()

    wall0 = time.monotonic()
    next_progress = wall0 + PROGRESS_EVERY
    timed_out = False
    ran_out = False
    window_end = None
    samples = []                # (time.monotonic(), cpu_sample()) while waiting

    def look(at, peak):
        """Take a CPU sample at time.monotonic() AT; the larger of PEAK and
        the relay's RssAnon now."""
        samples.append((at, cpu_sample(pid, senders)))
        try:
            return max(peak, proc_status(pid)["RssAnon"])
        except OSError:
            return peak
    if args.window:
        # The window: successful attempts recorded between two readings of
        # the attempt log, timed by the server's clock.
        deadline = wall0 + args.warmup
        while time.monotonic() < deadline:
            peak_anon = max(peak_anon, proc_status(pid)["RssAnon"])
            time.sleep(POLL)
        cur.execute("SELECT clock_timestamp()")
        (started,) = cur.fetchone()
        at_start = delivered_in_log(cur, wait_ids)
        cpu0 = cpu_seconds(pid)
        senders_cpu0 = sum(cpu_seconds(p) for p in senders)
        busy0, all0 = machine_busy()
        deadline = time.monotonic() + args.window
        while time.monotonic() < deadline:
            peak_anon = max(peak_anon, proc_status(pid)["RssAnon"])
            time.sleep(POLL)
        cur.execute("SELECT clock_timestamp()")
        (window_end,) = cur.fetchone()
        at_end = delivered_in_log(cur, wait_ids)
        delivered = at_end - at_start
        last_update = window_end
        ran_out = at_end >= total
    while window_end is None:
        queried = time.monotonic()
        cur.execute("""
            SELECT count(*) FILTER (WHERE p.next_snap IS NULL
                                      AND pg_visible_in_snapshot(%s::xid8, p.snap)),
                   coalesce(sum(CASE WHEN p.next_snap IS NULL
                                      AND pg_visible_in_snapshot(%s::xid8, p.snap) THEN %s
                                     WHEN p.next_snap IS NOT NULL AND p.after_id >= %s
                                     THEN p.after_id - %s + 1 ELSE 0 END), 0)::bigint,
                   max(p.updated_at), clock_timestamp()
              FROM outbox._positions p
             WHERE p.endpoint_id = ANY (%s)""",
                    (last_txid, last_txid, args.events, first_id, first_id, wait_ids))
        done, delivered, last_update, server_now = cur.fetchone()
        answered = time.monotonic()
        peak_anon = look(answered, peak_anon)
        now = time.monotonic()
        if done == len(wait):
            break
        if now - wall0 > args.timeout:
            timed_out = True
            break
        if now >= next_progress:
            elapsed = now - wall0
            if args.count_log:
                delivered = delivered_in_log(cur, wait_ids)
            print(f"  {args.label}: {delivered:,}/{total:,} delivered after {elapsed:.0f} s "
                  f"({delivered / elapsed:,.0f}/s)", flush=True)
            next_progress += PROGRESS_EVERY
        # With thousands of endpoints the query above takes tens of ms (20
        # to 113 ms in the second round of case 9's 10,000), and ten a
        # second took up to half a core beside the relay it measures.  It
        # is kept near QUERY_SHARE of the time, at most QUERY_EVERY_MAX
        # apart; what is timed is the server's last update, not when this
        # loop saw it.
        took = time.monotonic() - queried
        next_query = queried + min(max(POLL, took / QUERY_SHARE), QUERY_EVERY_MAX)
        while True:
            time.sleep(POLL)
            if time.monotonic() >= next_query:
                break
            peak_anon = look(time.monotonic(), peak_anon)

    status = proc_status(pid)
    if window_end is None and not timed_out:
        # The loop may see the end up to QUERY_EVERY_MAX after it: the CPU
        # times are those of the first sample (every POLL) after the last
        # update, so that idle time after it does not count.
        end = answered - (server_now - last_update).total_seconds()
        at_end = next((sample for t, sample in samples if t >= end), samples[-1][1])
    else:
        at_end = cpu_sample(pid, senders)
    cpu_end, senders_end, (busy1, all1) = at_end
    cpu = cpu_end - cpu0
    senders_cpu = senders_end - senders_cpu0
    if timed_out:
        cur.execute("SELECT clock_timestamp()")
        (last_update,) = cur.fetchone()
        if args.count_log:
            delivered = delivered_in_log(cur, wait_ids)
    seconds = (last_update - started).total_seconds()
    rate = delivered / seconds if seconds > 0 else 0.0
    print(f"  {args.label}: {delivered:,} deliveries in {seconds:.2f} s = {rate:,.0f}/s"
          f"{' (TIMED OUT)' if timed_out else ''}{' (THE BACKLOG RAN OUT)' if ran_out else ''}; relay CPU {cpu / seconds:.0%} of a core"
          f"{f', its {len(senders)} senders {senders_cpu / seconds:.0%}' if senders else ''}, "
          f"VmHWM {status['VmHWM'] / 1024:.0f} MB, RssAnon peak {peak_anon / 1024:.0f} MB", flush=True)
    with open(args.results, "a") as f:
        for key, value in (("deliveries", delivered), ("seconds", f"{seconds:.3f}"),
                           ("rate", f"{rate:.1f}"), ("timed_out", int(timed_out)),
                           ("ran_out", int(ran_out)),
                           ("relay_cpu", f"{cpu / seconds:.3f}"),
                           ("senders_cpu", f"{senders_cpu / seconds:.3f}"),
                           ("machine_busy", f"{(busy1 - busy0) / max(1, all1 - all0):.3f}"),
                           ("vmhwm_kb", status["VmHWM"]), ("rssanon_peak_kb", peak_anon)):
            f.write(f"{args.label}.{key} {value}\n")


if __name__ == "__main__":
    main()
