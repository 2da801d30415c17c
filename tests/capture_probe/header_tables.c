/* header_tables.c: CPython's own inline-cache table, read from the internal headers of the
 * interpreter being built against, so the probe test can check mini's generated opcode
 * tables (mini/capture/opcode_table_py3XX.inc) against them. Test-only code.
 *
 * 3.11/3.12 keep the table in internal/pycore_opcode.h (behind NEED_OPCODE_TABLES), 3.13 in
 * internal/pycore_opcode_metadata.h (behind NEED_OPCODE_METADATA). */
#include <Python.h>

#define Py_BUILD_CORE
#if PY_MINOR_VERSION >= 13
#define NEED_OPCODE_METADATA
#include <internal/pycore_opcode_metadata.h>
#else
#define NEED_OPCODE_TABLES
#include <internal/pycore_opcode.h>
#endif
#undef Py_BUILD_CORE

/* Inline cache entries of raw opcode `op`, and whether `op` is a base (not specialized)
 * opcode, i.e. one that can appear in PyCode_GetCode()'s deoptimized bytes. */
int probe_header_cache_entries(int op) { return _PyOpcode_Caches[op]; }
int probe_header_is_base_opcode(int op) { return _PyOpcode_Deopt[op] == op; }
