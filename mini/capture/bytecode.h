// bytecode.h: CPython bytecode, decoded the same way on 3.11, 3.12 and 3.13.
//
// What comes in: a code object. What goes out: its instructions as a
// std::vector<Instruction>, each with a normalized, version-independent Opcode, its argument
// with EXTENDED_ARG folded in, its absolute jump target and its source line; plus the
// exception table and the stack depth before each instruction.
//
// Guarantees:
// - Decodes PyCode_GetCode(code): the deoptimized bytes, never co_code_adaptive (which holds
//   specialized and instrumented opcodes that change while the program runs).
// - One Instruction per real instruction. An EXTENDED_ARG prefix is folded into the
//   instruction it extends, and that instruction's `offset` is the prefix's offset (the byte
//   CPython jumps to). Inline CACHE entries are skipped: `next_offset` is past them.
// - All offsets are in bytes from the start of the code (2 bytes per code unit).
// - Everything that differs between versions is in one constant, `bytecode_dialect()`, and in
//   the per-version opcode tables (bytecode_py311.cpp, bytecode_py312.cpp, bytecode_py313.cpp,
//   each compiled only for its own version). Nothing here needs CPython's internal headers.
//
// References: every function here takes a Borrowed `PyCodeObject*`, keeps no reference, and
// returns no Python object. Functions returning bool return false with a Python exception set
// on failure, and true otherwise.
#pragma once

#include <Python.h>

#include <vector>

namespace mini::capture {

// The normalized opcode: CPython's name, the same on every version. 3.11's
// POP_JUMP_{FORWARD,BACKWARD}_IF_X are normalized to POP_JUMP_IF_X. See opcodes.def.
enum class Opcode : unsigned char {
#define MINI_OPCODE(name, handler) name,
#include "opcodes.def"
#undef MINI_OPCODE
  Unknown,  // anything else: report it by Instruction::name and raw_opcode
};

// "LOAD_FAST", ..., "Unknown".
const char* opcode_name(Opcode op);

struct Instruction {
  int offset;         // bytes; the first EXTENDED_ARG prefix's offset when there is one
  Opcode op;          // normalized, version-independent
  int raw_opcode;     // the byte in this version's bytecode
  int arg;            // with EXTENDED_ARG folded in; 0 for opcodes without an argument
  int next_offset;    // bytes; the instruction after this one, past its inline caches
  int jump_target;    // absolute byte offset, or -1 if this instruction does not jump
  int line;           // source line (PyCode_Addr2Line), or -1 where CPython records none
  const char* name;   // CPython's opname on this version, e.g. "POP_JUMP_FORWARD_IF_FALSE"
};

// Decodes every instruction of `code` (Borrowed) into `out` (cleared first).
bool decode_instructions(PyCodeObject* code, std::vector<Instruction>* out);

// The index in `instructions` of the instruction starting at byte `offset`, or -1.
int instruction_index_at(const std::vector<Instruction>& instructions, int offset);

// ---------------------------------------------------------------------------------------
// The per-version details a symbolic interpreter needs, as data.

// Where CALL expects the NULL that LOAD_GLOBAL / LOAD_ATTR (method form) / PUSH_NULL push.
enum class NullPosition {
  BeforeCallable,  // 3.11, 3.12: [NULL | method, callable | self, args...]
  AfterCallable,   // 3.13:       [callable, NULL | self, args...]
};

struct BytecodeDialect {
  int python_minor;  // 11, 12 or 13

  // COMPARE_OP: the comparison is "<", "<=", "==", "!=", ">", ">=" indexed by
  // oparg >> compare_op_shift (0 on 3.11, 4 on 3.12, 5 on 3.13). On 3.13 the bit
  // compare_op_bool_bit (16) asks for the result to be coerced to bool; 0 elsewhere.
  int compare_op_shift;
  int compare_op_bool_bit;

  // LOAD_GLOBAL: name = co_names[oparg >> 1]; bit 0 also pushes a NULL (all three versions).
  // LOAD_ATTR: name = co_names[oparg >> load_attr_name_shift]; when load_attr_method_bit,
  // bit 0 selects the method form (pushes two values, like 3.11's LOAD_METHOD).
  int load_attr_name_shift;    // 0 on 3.11, 1 on 3.12+
  bool load_attr_method_bit;   // false on 3.11 (it has LOAD_METHOD), true on 3.12+
  // LOAD_SUPER_ATTR (3.12+): name = co_names[oparg >> 2]; bit 0 method form, bit 1 two-arg.

  // Calls.
  NullPosition call_null_position;
  bool has_precall;    // 3.11: PRECALL n before CALL n
  bool has_kw_names;   // 3.11, 3.12: KW_NAMES c (a tuple const) before CALL
  bool has_call_kw;    // 3.13: CALL_KW n with the names tuple on top of the stack
  // 3.13: MAKE_FUNCTION takes only the code; SET_FUNCTION_ATTRIBUTE adds the rest.
  bool has_set_function_attribute;

  // Truth tests. 3.13 emits TO_BOOL before a conditional jump, and POP_JUMP_IF_TRUE/FALSE
  // require an exact bool on top of the stack. Before 3.13 the jump itself tests truth.
  bool jumps_need_exact_bool;

  // FOR_ITER when the iterator is exhausted. Instruction::jump_target is the offset CPython's
  // own dis reports: the first instruction after the loop on 3.11, the END_FOR there on
  // 3.12 and 3.13. CPython pops the iterator and continues at
  // jump_target + for_iter_exit_skip bytes: 0 on 3.11; 2 on 3.12 (skipping END_FOR, which
  // pops 2); 4 on 3.13 (skipping END_FOR, which pops 1, and the POP_TOP after it).
  // An interpreter may equally push a dummy value and execute END_FOR (Dynamo does).
  int for_iter_exit_skip;

  bool has_return_const;  // 3.12+: RETURN_CONST c
  // 3.13: there is no LOAD_CLOSURE in the bytecode; closures are built from LOAD_FAST of the
  // cell slot (the slot holds the cell object itself).
  bool load_closure_is_load_fast;
  // 3.13: LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST, STORE_FAST_STORE_FAST carry two local
  // indices in one oparg: see first_of_pair / second_of_pair.
  bool has_fast_pairs;
};

// The dialect of the CPython this was compiled for.
const BytecodeDialect& bytecode_dialect();

// COMPARE_OP's comparison, as Py_LT..Py_GE (the PyObject_RichCompare op), and its symbol.
int compare_op_richcompare(const Instruction& instruction);
const char* compare_op_symbol(const Instruction& instruction);

// LOAD_GLOBAL: index into co_names, and whether it also pushes a NULL.
int load_global_name_index(const Instruction& instruction);
bool load_global_pushes_null(const Instruction& instruction);

// LOAD_ATTR (and 3.11's LOAD_METHOD): index into co_names, and whether it is the method form
// (pushes [method, self] or [NULL, value] in dialect order instead of one value).
int load_attr_name_index(const Instruction& instruction);
bool load_attr_is_method(const Instruction& instruction);

// LOAD_FAST_LOAD_FAST & co. (3.13): the two local indices of the pair. For
// STORE_FAST_STORE_FAST the first is stored from the top of the stack.
inline int first_of_pair(const Instruction& instruction) { return instruction.arg >> 4; }
inline int second_of_pair(const Instruction& instruction) { return instruction.arg & 15; }

// CALL_INTRINSIC_1 operands (3.12+), the ones ordinary functions use.
enum class Intrinsic1 {
  Print = 1,
  ImportStar = 2,
  StopIterationError = 3,
  AsyncGenWrap = 4,
  UnaryPositive = 5,
  ListToTuple = 6,
};

// ---------------------------------------------------------------------------------------
// Control flow that the decoder does not see by itself.

// One row of co_exceptiontable. An exception raised by an instruction whose offset is in
// [start, end) pops the value stack down to `depth` items, pushes the offset of the raising
// instruction as an int if `push_lasti`, pushes the exception, and jumps to `target`.
// There are no SETUP_*/POP_BLOCK opcodes in the bytecode: this table is the only record of
// try blocks, with blocks and cleanup handlers.
struct ExceptionTableEntry {
  int start;   // bytes
  int end;     // bytes, exclusive
  int target;  // bytes
  int depth;   // stack items that stay below the handler's pushes
  bool push_lasti;
};

// Parses co_exceptiontable of `code` (Borrowed) into `out` (cleared first).
bool parse_exception_table(PyCodeObject* code, std::vector<ExceptionTableEntry>* out);

// The innermost handler covering `offset`, or nullptr (the entries never overlap).
const ExceptionTableEntry* find_exception_handler(
    const std::vector<ExceptionTableEntry>& table, int offset);

// The stack depth before each instruction (same indexing as `instructions`), or -1 for an
// instruction no path reaches. Computed like the compiler computes co_stacksize: walk every
// edge (fall-through, jump, exception handler) with PyCompile_OpcodeStackEffectWithJump.
// This is the depth a resume at that offset must rebuild; the depth counts the NULLs that
// calls expect. Fails (false, SystemError) if two paths disagree.
bool compute_stack_depths(PyCodeObject* code, const std::vector<Instruction>& instructions,
                          const std::vector<ExceptionTableEntry>& exception_table,
                          std::vector<int>* depths);

// True for instructions after which control never falls through to next_offset.
bool is_unconditional_exit(const Instruction& instruction);

}  // namespace mini::capture
