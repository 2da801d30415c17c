// bytecode_py313.cpp: CPython 3.13's opcode table and bytecode dialect.
//
// Compiled for every version but empty unless Python.h is 3.13's (the one #if below).
// The table rows are generated (opcode_table_py313.inc, from gen_opcode_tables.py); the
// dialect is written by hand from CPython 3.13's Python/bytecodes.c.
#include "opcode_table.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 13

namespace mini::capture {

const RawOpcode kRawOpcodes[256] = {
#include "opcode_table_py313.inc"
};

const BytecodeDialect kBytecodeDialect = {
    /* python_minor */ 13,
    /* compare_op_shift */ 5,  // bit 4 is compare_op_bool_bit, bits 0-3 the specialization
    /* compare_op_bool_bit */ 16,
    /* load_attr_name_shift */ 1,
    /* load_attr_method_bit */ true,
    /* call_null_position */ NullPosition::AfterCallable,
    /* has_precall */ false,
    /* has_kw_names */ false,
    /* has_call_kw */ true,
    /* has_set_function_attribute */ true,
    /* jumps_need_exact_bool */ true,  // TO_BOOL precedes POP_JUMP_IF_TRUE/FALSE
    /* for_iter_exit_skip */ 4,  // the target is END_FOR (pops 1) + POP_TOP; CPython skips both
    /* has_return_const */ true,
    /* load_closure_is_load_fast */ true,
    /* has_fast_pairs */ true,
};

}  // namespace mini::capture

#endif
