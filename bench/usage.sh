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
