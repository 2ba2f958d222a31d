#include "core/pathfmt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void pathExpand(const char *pattern, int rank, char *out, size_t len) {
  size_t o = 0;
  if (len == 0) return;
  for (const char *p = pattern; *p && o + 1 < len; p++) {
    int w = -1;
    if (p[0] == '%' && p[1] == 'h') {
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      char *dot = strchr(host, '.');
      if (dot) *dot = 0;
      w = snprintf(out + o, len - o, "%s", host);
    } else if (p[0] == '%' && p[1] == 'p') {
      w = snprintf(out + o, len - o, "%d", (int)getpid());
    } else if (p[0] == '%' && p[1] == '%') {
      w = snprintf(out + o, len - o, "%%");
    } else if (p[0] == '%' && p[1] == 'r' && rank >= 0) {
      w = snprintf(out + o, len - o, "%d", rank);
    }
    if (w < 0) {
      out[o++] = *p;
      continue;
    }
    o += (size_t)w;
    if (o >= len) o = len - 1;
    p++;
  }
  out[o] = 0;
}
