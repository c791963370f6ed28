# shellcheck shell=bash
# Sourced by install.sh and test.sh: system packages on Debian/Ubuntu (apt-get) and on
# RHEL, Rocky, Alma and Fedora (dnf). Callers name Debian packages; `rpm_name` maps them.

# apt, dnf, or none.
pkg_manager() {
  if command -v apt-get >/dev/null 2>&1; then echo apt
  elif command -v dnf >/dev/null 2>&1; then echo dnf
  else echo none
  fi
}

# The RHEL-family package(s) holding what a Debian package holds. Chromium and promtool come
# from EPEL there (`dnf install epel-release` first).
rpm_name() {
  case "$1" in
    sqlite3) echo sqlite ;;
    passwd) echo shadow-utils ;;
    openmpi-bin) echo openmpi ;;
    libopenmpi-dev) echo openmpi-devel ;;
    libclang-dev) echo clang-devel ;;
    libssl-dev) echo openssl-devel ;;
    pkg-config) echo pkgconf-pkg-config ;;
    libcurl4-openssl-dev) echo libcurl-devel ;;
    build-essential) echo gcc gcc-c++ make ;;
    python3-venv) echo python3 ;;
    prometheus) echo golang-github-prometheus ;;
    shellcheck) echo ShellCheck ;;
    man-db) echo man-db groff-base ;;
    *) echo "$1" ;;
  esac
}

# Whether Debian package $1 (or its RHEL counterpart) is missing.
# shellcheck disable=SC2046 # one Debian name may map to several RPMs (no spaces in names)
pkg_missing() {
  case "$(pkg_manager)" in
    apt) ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" ;;
    dnf) ! rpm -q $(rpm_name "$1") >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

# Install Debian packages "$@" (or their RHEL counterparts).
pkg_install() {
  [ $# -gt 0 ] || return 0
  echo "installing: $*"
  case "$(pkg_manager)" in
    apt) apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" ;;
    dnf)
      local rpms=() p
      for p in "$@"; do
        # shellcheck disable=SC2207 # names without spaces
        rpms+=($(rpm_name "$p"))
      done
      dnf install -y -q "${rpms[@]}"
      # Open MPI's commands live under /usr/lib64/openmpi/bin on the RHEL family.
      if [ -d /usr/lib64/openmpi/bin ]; then export PATH="/usr/lib64/openmpi/bin:$PATH"; fi
      ;;
    *) echo "neither apt-get nor dnf here: install $* (or their equivalents) by hand" >&2; return 1 ;;
  esac
}

# A virtualenv at $1 with the Python packages "${@:2}" (Debian 12 refuses pip into the system
# Python: PEP 668's externally-managed environment). Prints nothing; fails loudly.
py_venv() {
  local dir="$1"; shift
  if [ ! -x "$dir/bin/python3" ]; then
    python3 -m venv "$dir" >/dev/null 2>&1 || { pkg_install python3-venv >/dev/null && python3 -m venv "$dir"; }
  fi
  local p missing=()
  for p in "$@"; do
    "$dir/bin/python3" -c "import ${p//-/_}" 2>/dev/null || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then "$dir/bin/python3" -m pip install --quiet "${missing[@]}"; fi
}
