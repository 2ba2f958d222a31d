#!/usr/bin/env bash
# Compiles the README's example exactly as shown and runs it on 2 ranks with
# NCCL_COMM_ID (every rank derives the same id; rank 0 hosts the root).
set -euo pipefail
src=$1; build=$2; sanitize=${3:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -n '/<!-- example -->/,/<!-- \/example -->/p' "$src/README.md" | sed '1,2d;$d' | sed '$d' > "$dir/example.c"
cc "$dir/example.c" -I "$src/include" -L "$build/lib" -lchorus ${sanitize:+-fsanitize=$sanitize} -o "$dir/example"
export LD_LIBRARY_PATH=$build/lib NCCL_COMM_ID=127.0.0.1:$((20000 + RANDOM % 20000))
timeout 60 "$dir/example" 0 2 > "$dir/r0" & p0=$!
timeout 60 "$dir/example" 1 2 > "$dir/r1"
wait $p0
cat "$dir/r0" "$dir/r1"
grep -qx "rank 0: 2 4 6 8" "$dir/r0" && grep -qx "rank 1: 2 4 6 8" "$dir/r1"
