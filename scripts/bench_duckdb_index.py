#!/usr/bin/env python3
"""DuckDB beside `icicle-bench index`: the same headerless 9-column CSV snapshot loaded into a
DuckDB database file (the ingest: seconds, rows/s, bytes on disk), then the questions the
index answers, each asked REPEAT times warm after one warm-up, with p50/p99 latencies: the
count and the first 100 paths in path order of owner + size range, below a directory, a name
pattern and an age range, and a `du` of one directory (file count and bytes below it, and per
child directory).

usage: bench_duckdb_index.py DATA_DIR DB_FILE REPEAT UID BELOW NAME_SUFFIX MTIME_MAX DU_DIR
Prints one JSON line per measurement (as icicle-bench does)."""
import json
import os
import resource
import sys
import time

import duckdb


def quantile(xs, q):
    xs = sorted(xs)
    return xs[round((len(xs) - 1) * q)] if xs else 0.0


def timed(con, repeat, sql, params):
    answer = con.execute(sql, params).fetchall()
    lat = []
    for _ in range(repeat):
        start = time.perf_counter()
        con.execute(sql, params).fetchall()
        lat.append(time.perf_counter() - start)
    return answer, lat


def main():
    data, db, repeat, uid, below, suffix, mtime_max, du_dir = sys.argv[1:9]
    repeat, uid, mtime_max = int(repeat), int(uid), int(mtime_max)
    if os.path.exists(db):
        os.remove(db)
    con = duckdb.connect(db)
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    src = (
        f"read_csv('{data}/*.csv', header=false, quote='\"', escape='\"', columns={{"
        "'type':'VARCHAR','mode':'BIGINT','uid':'BIGINT','gid':'BIGINT','size':'BIGINT',"
        "'atime':'BIGINT','ctime':'BIGINT','mtime':'BIGINT','path':'VARCHAR'})"
    )
    cpu0 = time.process_time()
    start = time.perf_counter()
    con.execute(f"CREATE TABLE files AS SELECT * FROM {src}")
    con.execute("CHECKPOINT")
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    rows = con.execute("SELECT count(*) FROM files").fetchone()[0]
    print(json.dumps({"bench": "duckdb-ingest", "rows": rows, "seconds": seconds, "cpu_seconds": cpu,
                      "rows_per_s": rows / seconds, "bytes_on_disk": os.path.getsize(db), "threads": threads}))
    below_like = below.rstrip("/") + "/%"
    questions = [
        ("owner and size > 1 MiB", "uid = ? AND size > 1048576", [uid]),
        (f"below {below}", "path LIKE ?", [below_like]),
        (f"name *{suffix}", "path LIKE ?", ["%" + suffix]),
        ("mtime over a year before the reference", "mtime <= ?", [mtime_max]),
    ]
    for what, where, params in questions:
        (n,), count = timed(con, repeat, f"SELECT count(*) FROM files WHERE {where}", params)
        n = n[0]
        _, first = timed(con, repeat, f"SELECT path FROM files WHERE {where} ORDER BY path LIMIT 100", params)
        print(json.dumps({"bench": "duckdb-query", "question": what, "matches": n,
                          "count_p50_s": quantile(count, 0.5), "count_p99_s": quantile(count, 0.99),
                          "first100_p50_s": quantile(first, 0.5), "first100_p99_s": quantile(first, 0.99)}))
    prefix = du_dir.rstrip("/") + "/"
    du_sql = (
        "SELECT split_part(substr(path, length(?) + 1), '/', 1) AS child, count(*), sum(size) "
        "FROM files WHERE path LIKE ? GROUP BY child"
    )
    answer, lat = timed(con, repeat, du_sql, [prefix, prefix + "%"])
    print(json.dumps({"bench": "duckdb-du", "dir": du_dir, "files_below": sum(r[1] for r in answer),
                      "children": len(answer), "p50_s": quantile(lat, 0.5), "p99_s": quantile(lat, 0.99),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
