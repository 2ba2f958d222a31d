# Sourced by the bench scripts first thing: with -h or --help as the first
# argument, prints the script's leading comment (its usage) and exits 0,
# before the script installs, builds or runs anything.
#   source "$(dirname "$0")/usage.sh" "$@"
case "${1:-}" in
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
esac

# bytes SIZE: SIZE in bytes, with the perf tools' K, M and G suffixes
# (powers of 1024) allowed: bytes 4M prints 4194304. A size it cannot read
# ends the script with a message naming it.
bytes() {
  local v=${1%[KkMmGg]} s=${1: -1} m=1
  case $s in K | k) m=1024 ;; M | m) m=1048576 ;; G | g) m=1073741824 ;; esac
  [[ $v =~ ^[0-9]+$ ]] || { echo "$(basename "$0"): '$1' is not a size (bytes, or with K, M or G)" >&2; exit 2; }
  echo $((v * m))
}
