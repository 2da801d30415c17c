// bytecode_py312.cpp: CPython 3.12's opcode table and bytecode dialect.
//
// Compiled for every version but empty unless Python.h is 3.12's (the one #if below).
// The table rows are generated (opcode_table_py312.inc, from gen_opcode_tables.py); the
// dialect is written by hand from CPython 3.12's Python/bytecodes.c.
#include "opcode_table.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 12

namespace mini::capture {

const RawOpcode kRawOpcodes[256] = {
#include "opcode_table_py312.inc"
};

const BytecodeDialect kBytecodeDialect = {
    /* python_minor */ 12,
    /* compare_op_shift */ 4,  // the low 4 bits hold the specialization mask
    /* compare_op_bool_bit */ 0,
    /* load_attr_name_shift */ 1,
    /* load_attr_method_bit */ true,  // LOAD_METHOD became LOAD_ATTR with bit 0 set
    /* call_null_position */ NullPosition::BeforeCallable,
    /* has_precall */ false,
    /* has_kw_names */ true,
    /* has_call_kw */ false,
    /* has_set_function_attribute */ false,
    /* jumps_need_exact_bool */ false,
    /* for_iter_exit_skip */ 2,  // the target is END_FOR (pops 2); CPython jumps past it
    /* has_return_const */ true,
    /* load_closure_is_load_fast */ false,
    /* has_fast_pairs */ false,
};

}  // namespace mini::capture

#endif
