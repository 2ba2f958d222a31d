/* What NCCL's plugins share, whatever their kind (the profiler's and the
 * tuner's): the search for the library, as NCCL searches, and the logger
 * they are given. */
#ifndef CHORUS_PLUGIN_OPEN_H
#define CHORUS_PLUGIN_OPEN_H
#include <stddef.h>

/* Opens the plugin library of a kind ("profiler", "tuner") as NCCL looks
 * for it: name as given (a path or a library name), then as
 * libnccl-<kind>-<name>.so when name is neither a path nor a lib*.so file;
 * name empty: libnccl-<kind>.so, whose absence is the usual case and is not
 * logged; STATIC_PLUGIN: the program itself. Failed tries are INFO lines of
 * subsys, tagged with tag ("PROFILER"). used: the last name tried. NULL
 * when nothing opened. */
void *pluginOpen(const char *kind, const char *tag, unsigned subsys, const char *name, char *used, size_t usedLen);

/* Loads a plugin as NCCL does: name is NCCL_<TAG>_PLUGIN's value ("none":
 * nothing), searched as pluginOpen does, and the newest table the library
 * exports, symbol_vN for N from newest down to oldest. The library, with
 * *version and *table set; NULL when there is none (INFO where name is
 * unset, else a WARN saying the job goes on as without, "without": "without
 * a profiler"), or its library exports no table (a WARN; closed). used: as
 * pluginOpen's. */
void *pluginLoadNewest(const char *kind, const char *tag, unsigned subsys, const char *name, const char *symbol,
                       int newest, int oldest, const char *without, int *version, const void **table, char *used,
                       size_t usedLen);

/* NCCL's ncclDebugLogger_t, which plugins get: their lines go where
 * chorus's go, at their level and subsystem. */
void pluginLog(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

#endif
