#!/usr/bin/python3
"""bench/latency.py: case 3, commit-to-arrival latency.

Emits RATE events a second for SECONDS seconds, one transaction each, and
notes the wall-clock time right after each COMMIT returned.  nginx logs the
arrival of each request on /latency with its time ($msec) and webhook-id
(the event id).  Once every event has arrived (or TIMEOUT passed), joins
the two by event id, writes the sorted latencies in ms (for the CDF plot)
and appends "latency.* value" lines to the results file.

  latency.py --rate 1000 --seconds 30 --arrivals LOG --cdf FILE --results FILE

Latencies below zero are possible by up to nginx's 1 ms resolution, and
when the request arrives before the client has seen its COMMIT return.
"""
import argparse
import time

import psycopg2

PAYLOAD = '{"order_id": 42, "customer": "customer-42", "amount": 19.99, "currency": "EUR"}'


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * len(sorted_values))) - 1))
    return sorted_values[k]


def read_arrivals(path):
    arrivals = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    arrivals[parts[1]] = float(parts[0])
    except FileNotFoundError:
        pass
    return arrivals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--arrivals", required=True)
    ap.add_argument("--cdf", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--timeout", type=float, default=30)
    args = ap.parse_args()

    conn = psycopg2.connect("")
    cur = conn.cursor()
    cur.execute("PREPARE emit_one AS SELECT outbox.emit('bench.latency', $1::jsonb)")
    conn.commit()

    committed = {}
    n = args.rate * args.seconds
    interval = 1.0 / args.rate
    start = time.monotonic()
    for i in range(n):
        cur.execute("EXECUTE emit_one(%s)", (PAYLOAD,))
        (event_id,) = cur.fetchone()
        conn.commit()
        committed[event_id] = time.time()
        if (i + 1) % (args.rate * 10) == 0:
            print(f"  latency: {i + 1:,}/{n:,} emitted", flush=True)
        delay = start + (i + 1) * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    achieved = n / (time.monotonic() - start)

    deadline = time.monotonic() + args.timeout
    while True:
        arrivals = read_arrivals(args.arrivals)
        if len(arrivals) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    latencies = sorted((arrivals[e] - t) * 1000.0 for e, t in committed.items() if e in arrivals)
    with open(args.cdf, "w") as f:
        for i, ms in enumerate(latencies):
            f.write(f"{ms:.3f} {(i + 1) / len(latencies):.6f}\n")
    p50, p90, p99 = (percentile(latencies, p) for p in (50, 90, 99))
    worst = latencies[-1] if latencies else float("nan")
    print(f"  latency: {len(latencies):,}/{n:,} arrived at {achieved:,.0f} emits/s; "
          f"p50 {p50:.1f} ms, p90 {p90:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms", flush=True)
    with open(args.results, "a") as f:
        for key, value in (("sent", n), ("arrived", len(latencies)), ("emit_rate", f"{achieved:.0f}"),
                           ("p50_ms", f"{p50:.2f}"), ("p90_ms", f"{p90:.2f}"),
                           ("p99_ms", f"{p99:.2f}"), ("max_ms", f"{worst:.2f}")):
            f.write(f"latency.{key} {value}\n")


if __name__ == "__main__":
    main()
