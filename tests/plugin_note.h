/* What a test plugin was told, a line at a time, appended to the file that
 * the environment variable logVar names (nothing where it is unset), each
 * line headed "pid P vV" so that a test can tell processes and versions
 * apart. Header-only: each plugin is a library of its own. */
#ifndef CHORUS_TESTS_PLUGIN_NOTE_H
#define CHORUS_TESTS_PLUGIN_NOTE_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static void pluginNote(const char *logVar, int version, const char *fmt, ...) {
  const char *path = getenv(logVar);
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(f, "pid %d v%d ", (int)getpid(), version);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
  fclose(f);
}

#endif
