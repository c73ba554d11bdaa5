#!/bin/sh
# Builds and runs the runtime/CUPTI smoke test against a build folder's simgpu.
# Usage: tests/simgpu/runtime/smoke/build.sh [build-dir]   (default: build)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
lib="$build/tests/simgpu"
out="$build/simgpu_smoke_runtime"
g++ -std=c++20 -O1 -g -isystem /usr/local/cuda/include -I"$root/tests/simgpu/include" \
  "$here/smoke_runtime.cc" "$here/smoke_kernels.cc" -o "$out" -L"$lib" -lcudart -lcupti -Wl,-rpath,"$lib"
SIMGPU_DEVICE_DIR="$lib/devices" LD_LIBRARY_PATH="$lib" "$out"
