#!/usr/bin/env python3
"""DuckDB baseline for `icicle-bench pipelines`: per-user and per-group count, total size,
min, max, average and p10..p99 of size, atime, ctime and mtime over the same headerless
9-column CSV snapshot. Prints one JSON line with the seconds for approximate (t-digest)
and exact quantiles, and DuckDB's peak RSS."""
import json
import resource
import sys
import time

import duckdb

data = sys.argv[1]
con = duckdb.connect()
src = (
    f"read_csv('{data}/*.csv', header=false, quote='\"', escape='\"', columns={{"
    "'type':'VARCHAR','mode':'BIGINT','uid':'BIGINT','gid':'BIGINT','size':'BIGINT',"
    "'atime':'BIGINT','ctime':'BIGINT','mtime':'BIGINT','path':'VARCHAR'})"
)
qs = "[0.1, 0.25, 0.5, 0.75, 0.9, 0.99]"
result = {"bench": "duckdb", "threads": con.execute("SELECT current_setting('threads')").fetchone()[0]}
for fn in ["approx_quantile", "quantile_cont"]:
    cols = ", ".join(f"min({c}), max({c}), avg({c}), {fn}({c}, {qs})" for c in ["size", "atime", "ctime", "mtime"])
    start = time.time()
    groups = 0
    for key in ["uid", "gid"]:
        rows = con.execute(f"SELECT {key}, count(*), sum(size), {cols} FROM {src} GROUP BY {key}").fetchall()
        groups += len(rows)
    result[f"{fn}_seconds"] = time.time() - start
    result["principals"] = groups
result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(result))
