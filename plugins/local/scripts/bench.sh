#!/bin/bash
# Events per CPU-second of the local monitor on the filebench workload (real file operations).
# usage: plugins/local/scripts/bench.sh fanotify|inotify [OPS]   (as root; build first:
#   cargo build --release --bin icicle && cargo build --bin icicle-testkit)
# KIND=rmtree: instead, OPS directories (100 per parent) with a file each are created and then
# removed with `rm -rf` (every directory removal forgets the cached handles below it).
# KIND=seed: OPS empty files (100 per directory) exist before the start; the monitor's seed walk
# publishes them (peak_rss_mb is the point of this one). KIND=restart: the same tree, seeded by
# a first run; the figures are the second run's (a restart: the root rescanned, nothing changed).
# KIND=churn: OPS/2 files created (one byte written) and OPS/2 removed under the watched root,
# one process as fast as it goes, each name new (10 directories; a file removed 2,000 creates
# after its own): the monitor keeps up, or overflows its queue and rescans.
# TMPFS=1: the watched root is a tmpfs mounted for the run.
# STORE_MB=N: the entries in a SQLite file with N MiB cached (`entries_cache_mb`), not in memory.
# Prints one JSON line: kernel events read (fanotify: the whole file system's, outside_root
# included), events applied, updates, batches, the monitor's user and system CPU seconds.
set -euo pipefail
B=$1
OPS=${2:-100000}
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
ICICLE=${ICICLE:-$TOP/target/release/icicle}
TESTKIT=${TESTKIT:-$TOP/target/debug/icicle-testkit}
T=$(mktemp -d)
trap 'umount -l "$T/fs" 2> /dev/null || true; rm -rf "$T"' EXIT
mkdir -p "$T/fs"
# TMPFS=1: the root is a tmpfs of its own (file operations at memory speed, no neighbours).
if [ -n "${TMPFS:-}" ]; then mount -t tmpfs icicle-bench "$T/fs"; fi
if [ "${KIND:-filebench}" = seed ] || [ "${KIND:-filebench}" = restart ]; then
    python3 - "$T/fs/tree" "$OPS" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(0, n, 100):
    d = os.path.join(root, f"d{i // 100}")
    os.makedirs(d)
    for j in range(i, min(i + 100, n)):
        open(os.path.join(d, f"f{j}"), "w").close()
PY
fi
cat > "$T/c.toml" <<EOT
[records]
visible_to = ["public"]
[sources.local]
type = "$B"
root = "$T/fs"
path_prefix = "/"
state_dir = "$T/state"
batch_size = 10000
quiet_period_secs = 0.5
fallback = false
${STORE_MB:+entries_cache_mb = $STORE_MB}
[sinks.o]
type = "blackhole"
EOT
if [ "${KIND:-filebench}" = restart ]; then
    "$ICICLE" monitor --json --until-idle 2 -c "$T/c.toml" > /dev/null 2> "$T/log"
fi
/usr/bin/time -f "%U %S %M" -o "$T/time" "$ICICLE" monitor --json --until-idle 2 -c "$T/c.toml" > "$T/report.json" 2> "$T/log" &
while [ ! -f "$T/state/local.checkpoint.json" ]; do sleep 0.05; done
if [ "${KIND:-filebench}" = seed ] || [ "${KIND:-filebench}" = restart ]; then
    :
elif [ "${KIND:-filebench}" = churn ]; then
    python3 - "$T/fs/churn" "$OPS" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range(10):
    os.makedirs(os.path.join(root, f"d{d}"))
name = lambda i: os.path.join(root, f"d{i % 10}", f"f{i}")
for i in range(n // 2):
    fd = os.open(name(i), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    os.close(fd)
    if i >= 2000:
        os.unlink(name(i - 2000))
PY
elif [ "${KIND:-filebench}" = rmtree ]; then
    python3 - "$T/fs/tree" "$OPS" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"p{i // 100}", f"d{i}")
    os.makedirs(d)
    open(os.path.join(d, "f"), "w").write("x")
PY
    sleep 1
    rm -rf "$T/fs/tree"
else
    "$TESTKIT" workload --kind filebench --ops "$OPS" --root "$T/fs" --journal "$T/j/changelog" > /dev/null 2>&1
fi
wait
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
r = json.load(open(t + '/report.json'))['local']
u, s, kb = map(float, open(t + '/time').read().split()[-3:])
rd = r['reader'].get('fanotify') or r['reader'].get('inotify')
print(json.dumps({'backend': r['backend'], 'kernel_events': rd['read'], 'outside_root': rd.get('outside_root', 0), 'overflows': rd['overflows'], 'applied': r['events'],
                  'updates': r['updates'], 'batches': r['batches'], 'user_s': u, 'sys_s': s, 'events_per_cpu_s': round(rd['read'] / (u + s)), 'peak_rss_mb': round(kb / 1024)}))
PY
