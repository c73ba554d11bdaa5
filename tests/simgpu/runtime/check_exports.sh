#!/bin/sh
# Checks the exports of simgpu's libcudart.so.13 and libcupti.so.13 against the
# real CUDA 13 libraries: every symbol simgpu exports must be exported by the real
# library under the same name and version node (simgpu's private
# __simgpuRegisterKernel@@SIMGPU_PRIVATE excepted), so a program linked against
# the real runtime binds to simgpu unchanged, and neither library may have a
# NEEDED entry on another CUDA library.
# Usage: check_exports.sh <simgpu build folder> [real CUDA lib folder]
set -eu
simgpu=$1
real=${2:-/usr/local/cuda/lib64}
status=0
exports() {
  readelf --dyn-syms -W "$1" | awk '$5 != "LOCAL" && $7 != "UND" && $8 != "" {print $8}' |
    grep '@' | sort -u
}
for lib in libcudart.so.13 libcupti.so.13; do
  ours=$(exports "$simgpu/$lib" | grep -v '@@SIMGPU_PRIVATE$' | grep -v "^$lib@@$lib\$" || true)
  theirs=$(exports "$real/$lib")
  extra=$(printf '%s\n' "$ours" | while read -r s; do
    printf '%s\n' "$theirs" | grep -qxF "$s" || printf '%s\n' "$s"
  done)
  if [ -n "$extra" ]; then
    echo "$lib exports symbols the real library does not:" >&2
    printf '  %s\n' $extra >&2
    status=1
  fi
  if readelf -d "$simgpu/$lib" | grep NEEDED | grep -E 'libcuda|libcudart|libcupti' >&2; then
    echo "$lib has a NEEDED entry on a CUDA library" >&2
    status=1
  fi
  echo "$lib: $(printf '%s\n' "$ours" | wc -l) exports checked"
done
exit $status
