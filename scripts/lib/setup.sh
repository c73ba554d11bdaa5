# Shared set-up for scripts/test and scripts/demo: install what is missing from
# Debian's packages, check the CUDA toolkit headers, configure and build.
# Sourced, not run. Sets OVERSUB_ROOT and OVERSUB_BUILD.

OVERSUB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OVERSUB_BUILD=${OVERSUB_BUILD:-$OVERSUB_ROOT/build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

say() { printf '==> %s\n' "$*"; }

# Debian packages the build and tests need, as "check-command:package".
_oversub_need() {
  local missing=()
  command -v meson >/dev/null 2>&1 || missing+=(meson)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v readelf >/dev/null 2>&1 || missing+=(binutils)
  /usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1 || missing+=(python3-torch python3-torchvision)  # trace-torch
  if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists fmt || missing+=(libfmt-dev)
    pkg-config --exists libunwind || missing+=(libunwind-dev)
    pkg-config --exists gtest || missing+=(libgtest-dev libgmock-dev)
    pkg-config --exists benchmark || missing+=(libbenchmark-dev)
  else
    missing+=(libfmt-dev libunwind-dev libgtest-dev libgmock-dev libbenchmark-dev)
  fi
  printf '%s\n' "${missing[@]}"
}

oversub_install_deps() {
  local missing
  mapfile -t missing < <(_oversub_need | sed '/^$/d')
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing missing packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
    echo "oversub: the CUDA 13 toolkit headers were not found under $CUDA_HOME/include." >&2
    echo "         Install the CUDA Toolkit 13 (headers, CUPTI) or set CUDA_HOME." >&2
    exit 1
  fi
}

oversub_build() {
  if [ ! -f "$OVERSUB_BUILD/build.ninja" ]; then
    say "configuring $OVERSUB_BUILD"
    meson setup "$OVERSUB_BUILD" "$OVERSUB_ROOT" -Dcudatoolkit="$CUDA_HOME" >/dev/null
  fi
  say "building"
  ninja -C "$OVERSUB_BUILD" -j "$(nproc)" >/dev/null || ninja -C "$OVERSUB_BUILD" -j 1
}
