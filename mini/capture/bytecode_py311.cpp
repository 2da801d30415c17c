// bytecode_py311.cpp: CPython 3.11's opcode table and bytecode dialect.
//
// Compiled for every version but empty unless Python.h is 3.11's (the one #if below).
// The table rows are generated (opcode_table_py311.inc, from gen_opcode_tables.py); the
// dialect is written by hand from CPython 3.11's Python/ceval.c.
#include "opcode_table.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 11

namespace mini::capture {

const RawOpcode kRawOpcodes[256] = {
#include "opcode_table_py311.inc"
};

const BytecodeDialect kBytecodeDialect = {
    /* python_minor */ 11,
    /* compare_op_shift */ 0,
    /* compare_op_bool_bit */ 0,
    /* load_attr_name_shift */ 0,
    /* load_attr_method_bit */ false,  // the method form is LOAD_METHOD
    /* call_null_position */ NullPosition::BeforeCallable,
    /* has_precall */ true,
    /* has_kw_names */ true,
    /* has_call_kw */ false,
    /* has_set_function_attribute */ false,
    /* jumps_need_exact_bool */ false,
    /* for_iter_exit_skip */ 0,  // FOR_ITER pops the iterator and jumps past the loop
    /* has_return_const */ false,
    /* load_closure_is_load_fast */ false,
    /* has_fast_pairs */ false,
};

}  // namespace mini::capture

#endif
