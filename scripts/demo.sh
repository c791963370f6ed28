#!/usr/bin/env bash
# Set-up command 1: install, build, generate the built-in demo snapshot and run the main job
# (snapshot pipeline → Globus Search GIngest documents in demo-out/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

bin=target/release
files="${DEMO_FILES:-100000}"
rm -rf demo-data demo-out demo-state
echo "== generating a ${files}-file demo snapshot (deterministic, seed 1)"
for fmt in tsv gufi mmapplypolicy tree; do
  "$bin/icicle-testkit" gen-snapshot --files "$files" --seed 1 --format "$fmt" --out "demo-data/$fmt"
done

echo "== plugins"
"$bin/icicle" plugins

echo "== snapshot run 1 (every record is new)"
"$bin/icicle" snapshot -c configs/demo.toml
echo "== snapshot run 2 (same snapshot: nothing changes, nothing is emitted)"
"$bin/icicle" snapshot -c configs/demo.toml

echo "== the same pipelines on 2 MPI ranks (icicle-mpi): the same counts and aggregate records"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  mpirun --oversubscribe --bind-to none -np 2 "$bin/icicle-mpi" snapshot -c configs/demo.toml --no-progress \
  --set 'snapshot.state_dir="demo-out/mpi/state"' --set 'sinks.globus_files.dir="demo-out/mpi/primary"' --set 'sinks.index.dir="demo-out/mpi/index"' \
  --set 'counting.output="demo-out/mpi/counts.csv"' --set 'snapshot.rejects_file="demo-out/mpi/rejects.jsonl"' \
  --set snapshot.split_bytes=1000000
cmp demo-out/counts.csv demo-out/mpi/counts.csv && echo "counts: identical to the one-process run"

echo "== the same file system from a GUFI index, a GPFS policy list and a live tree walk"
for c in gufi mmapplypolicy walk; do
  "$bin/icicle" snapshot --json --no-progress -c "configs/snapshot-$c.toml" > "demo-out/summary-$c.json"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[2])); print("%-14s %d records, %d rejects, %.0f rows/s" % (sys.argv[1], s["records"], s["rejects"], s["rows_per_s"]))' "$c" "demo-out/summary-$c.json"
done

echo "== the Lustre monitor on the stand-in: a mixed workload, then icicle monitor --drain"
rm -rf demo-data/lustre demo-data/lustre-fs demo-state/lustre demo-out/monitor
"$bin/icicle-testkit" workload --kind mixed --ops 2000 --root demo-data/lustre-fs --journal demo-data/lustre/changelog --preexisting 200
"$bin/icicle" monitor --drain --json -c configs/monitor-lustre.toml > demo-out/monitor-report.json
python3 -c 'import json; r=json.load(open("demo-out/monitor-report.json"))["mdt0"]; print("monitor: %d records, %d filtered, reduce %s, %d updates, %d deletes, cleared up to %d" % (r["records"], r["filtered"], r["reduce"], r["updates"], r["deletes"], r["cleared_index"]))'

echo "== the GPFS monitor through a local Kafka-protocol broker (tansu): a snapshot of the fileset, mmwatch events, then icicle monitor --drain from the snapshot"
trap 'bash scripts/services.sh stop kafka' EXIT
KAFKA="$(bash scripts/services.sh start kafka | sed -n 's/^KAFKA=//p')"
rm -rf demo-data/gpfs demo-data/gpfs-fs demo-state/gpfs demo-out/gpfs demo-out/gpfs-snapshot
gpfs_workload() {
  "$bin/icicle-testkit" workload --kind mixed --root demo-data/gpfs-fs --journal demo-data/gpfs/journal \
    --gpfs-root /gpfs/fs1 --gpfs-topic fset1-topic --bootstrap "$KAFKA" "$@"
}
gpfs_workload --ops 0 --preexisting 200   # the fileset before monitoring: no events
"$bin/icicle" snapshot --no-progress -c configs/snapshot-gpfs-seed.toml
gpfs_workload --ops 2000                   # then the workload, with its events
"$bin/icicle" monitor --drain --json -c configs/monitor-gpfs.toml --set "sources.fset1.connection.bootstrap=$KAFKA" \
  --set "sinks.msk.connection.bootstrap=$KAFKA" > demo-out/gpfs-report.json
python3 -c 'import json; r=json.load(open("demo-out/gpfs-report.json"))["fset1"]; print("gpfs monitor: %d events, %d rejects, %d updates, %d deletes, committed %s" % (r["messages"], r["rejects"], r["updates"], r["deletes"], r["committed"]))'

echo "== the Globus Search sink, against the testkit's Search emulator (icicle-testkit globus-search)"
rm -rf demo-state/globus demo-data/globus.addr
"$bin/icicle-testkit" globus-search --index 00000000-0000-4000-8000-000000000000 --token demo-token \
  --rate-limit 10 --addr-file demo-data/globus.addr > demo-out/globus-emulator.log 2>&1 &
emulator=$!
trap 'kill $emulator 2>/dev/null || true; bash scripts/services.sh stop kafka' EXIT
for _ in $(seq 1 100); do [ -s demo-data/globus.addr ] && break; sleep 0.1; done
GLOBUS_SEARCH_TOKEN=demo-token "$bin/icicle" snapshot --json --no-progress -c configs/snapshot-globus.toml \
  --set "sinks.globus.base_url=http://$(cat demo-data/globus.addr)" > demo-out/summary-globus.json
python3 - "$(cat demo-data/globus.addr)" <<'PY'
import json, sys, urllib.request
s = json.load(open("demo-out/summary-globus.json"))
req = urllib.request.Request("http://%s/v1/task_list/00000000-0000-4000-8000-000000000000" % sys.argv[1], headers={"Authorization": "Bearer demo-token"})
tasks = json.load(urllib.request.urlopen(req))["tasks"]
print("globus: %d records published in %d ingest tasks, all %s" % (s["records"], len(tasks), ",".join(sorted({t["state"] for t in tasks}))))
PY
kill $emulator 2>/dev/null || true

echo "== the local monitor (fanotify, else inotify) on demo-data/watched while a shell script works in it"
rm -rf demo-data/watched demo-state/local demo-out/watched && mkdir -p demo-data/watched/old demo-out
for i in 1 2 3; do echo "before monitoring $i" > demo-data/watched/old/f$i; done
"$bin/icicle" monitor -c configs/monitor-local.toml --until-idle 2 --json > demo-out/watched-report.json 2> demo-out/watched.log &
monitor=$!
sleep 1
(cd demo-data/watched && mkdir -p src/deep && echo a > src/deep/a.c && echo b > src/b.c && ln src/b.c hard.c \
  && ln -s src/b.c link.c && mv src renamed && rm old/f1 && chmod 600 old/f2 && echo more >> old/f3)
wait "$monitor"
python3 - <<'PY'
import glob, json
r = json.load(open("demo-out/watched-report.json"))["watched"]
print(f"backend {r['backend']}: {r['events']} events, {r['updates']} updates, {r['deletes']} deletes")
for f in sorted(glob.glob("demo-out/watched/*.json")):
    d = json.load(open(f))
    if "subjects" in d:
        print(f"  {f.split('/')[-1]}: delete {', '.join(d['subjects'])}")
    else:
        print(f"  {f.split('/')[-1]}: ingest {', '.join(e['subject'] for e in d['ingest_data']['gmeta'])}")
PY

echo "== the sketch comparison experiment on the demo snapshot (demo-out/sketch-compare/)"
"$bin/icicle" sketch-compare -c configs/demo.toml --out demo-out/sketch-compare | head -8

echo "== PRISM: files written under the LD_PRELOAD catalog agent (every fourth a copy of the one before, shifted by 777 bytes), read back by swiftload on 4 MPI ranks (object, then file scheduling; emulated OSTs)"
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" cargo build --release --quiet -p icicle-prism-agent
rm -rf demo-data/prism demo-out/prism-catalog && mkdir -p demo-data/prism
CATALOG_DIR=demo-out/prism-catalog ICICLE_CATALOG_ROOT=demo-data/prism ICICLE_CATALOG_LAYOUT=emulate \
  LD_PRELOAD="$PWD/$bin/libcatalog_agent.so" \
  sh -c 'i=0; while [ $i -lt 32 ]; do if [ $((i % 4)) -eq 3 ]; then { head -c 777 /dev/urandom; cat demo-data/prism/out.$((i-1)); } > demo-data/prism/out.$i; else head -c $(( (i % 8 + 1) * 400000 )) /dev/urandom > demo-data/prism/out.$i; fi; i=$((i+1)); done'
echo "catalog: $(cat demo-out/prism-catalog/*.txt | grep -c '^lstat$') entries for $(cat demo-out/prism-catalog/*.txt | grep -A1 '^lstat$' | grep -v '^lstat$\|^--$' | sort -u | wc -l) files in demo-out/prism-catalog/ (a redirect's file may be recorded by the shell and by the program)"
for policy in object file; do
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np 4 "$bin/swiftload" \
    --catalog demo-out/prism-catalog --input-dir demo-data/prism --policy "$policy" \
    --loader-config configs/prism/loader.toml --emulate configs/prism/loader.toml
done
echo "== PRISM apps: the dedup profiler and the emulated loader sweep (every sweep figure is the model's)"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np 4 "$bin/swiftload" \
  --app dedup --catalog demo-out/prism-catalog --input-dir demo-data/prism --chunking fixed:4K,cdc:8K --compare-walk
"$bin/swiftload-sweep" >/dev/null

echo "== counts (demo-out/counts.csv, first lines)"
head -5 demo-out/counts.csv

echo "== one primary record (demo-out/primary/ingest-000001.json)"
python3 - <<'PY'
import json
doc = json.load(open("demo-out/primary/ingest-000001.json"))
print(json.dumps(doc["ingest_data"]["gmeta"][0], indent=2))
print(f'{len(doc["ingest_data"]["gmeta"])} entries in the first GIngest document')
import glob
for f in sorted(glob.glob("demo-out/primary/ingest-*.json")):
    for e in json.load(open(f))["ingest_data"]["gmeta"]:
        if e["subject"].startswith("user:"):
            print("one aggregate record:")
            print(json.dumps(e, indent=2)[:1500])
            raise SystemExit
PY

echo "== questions answered from the embedded index (demo-out/index, written by the main job above)"
echo "files under /fs/home over 1 GiB not modified for a year: $("$bin/icicle" find -c configs/demo.toml /fs/home -size +1G -mtime +365 --count)"
"$bin/icicle" find -c configs/demo.toml /fs/home -size +1G -mtime +365 --limit 3 -ls
echo "the five directories below /fs/home holding the most bytes (icicle du):"
"$bin/icicle" du -c configs/demo.toml /fs/home --top 5
