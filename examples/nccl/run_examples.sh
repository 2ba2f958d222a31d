#!/usr/bin/env bash
# Runs the one-process-per-rank NCCL examples (examples/nccl), or checks
# that the examples compile against a real CUDA toolkit:
#   run_examples.sh file N PROGRAM        N processes, the id through a file
#   run_examples.sh mpi N PROGRAM MPIEXEC  under mpirun -np N
#   run_examples.sh compile CC CUDA_INCLUDE EXAMPLES_DIR [-IMPI_INCLUDE...]
#   run_examples.sh cxx CXX INCLUDE_DIR EXAMPLES_DIR   as C++, with the shim
# A rank that fails fails the run at once (the others are stopped), and
# every rank must say Success.
set -u
mode=$1
case $mode in
file)
  n=$2 prog=$3
  dir=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
  pids=()
  for ((r = 0; r < n; r++)); do
    CHORUS_TIMEOUT=20 "$prog" "$r" "$n" "$dir/id" >"$dir/out.$r" 2>&1 &
    pids+=($!)
  done
  status=0
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || { echo "rank $r failed:"; status=1; }
    cat "$dir/out.$r"
    grep -q "Success" "$dir/out.$r" || status=1
  done
  exit $status
  ;;
mpi)
  n=$2 prog=$3 mpiexec=$4
  # Open MPI refuses root and more ranks than cores unless told.
  extra=()
  if "$mpiexec" --version 2>/dev/null | grep -qiE "open ?mpi|openrte"; then
    extra=(--oversubscribe --allow-run-as-root --mca btl self,tcp)
  fi
  out=$(CHORUS_TIMEOUT=20 timeout 60 "$mpiexec" "${extra[@]}" -np "$n" "$prog" 2>&1)
  status=$?
  echo "$out"
  [ $status -eq 0 ] || exit $status
  got=$(grep -c "Success" <<<"$out")
  [ "$got" -eq "$n" ] || { echo "$got of $n ranks said Success"; exit 1; }
  ;;
cxx)
  cxx=$2 include=$3 src=$4
  status=0
  for f in "$src"/single_process.c "$src"/sendrecv_group.c "$src"/file_one_device_per_process.c; do
    "$cxx" -x c++ -fsyntax-only -Wall -Werror -I"$include/chorus/host-cuda" -I"$include" "$f" || { echo "FAILED: $f"; status=1; }
  done
  printf '#include <cuda_runtime.h>\nint main() { float *p; double *h; return cudaMalloc(&p, 64) | cudaMallocHost(&h, 8); }\n' |
    "$cxx" -x c++ -fsyntax-only -Wall -Werror -I"$include/chorus/host-cuda" - || { echo "FAILED: typed cudaMalloc"; status=1; }
  exit $status
  ;;
compile)
  cc=$2 cuda=$3 src=$4
  shift 4
  status=0
  for f in "$src"/*.c; do
    flags=()
    case $(basename "$f") in mpi_*) [ $# -gt 0 ] || continue; flags=("$@") ;; esac
    "$cc" -fsyntax-only -Wall -Werror -I"$cuda" "${flags[@]}" "$f" || { echo "FAILED: $f"; status=1; }
  done
  exit $status
  ;;
esac
