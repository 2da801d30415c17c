// bytecode.cpp: the version-independent decoder. See bytecode.h for the contract.
//
// Everything that depends on the CPython version comes from two constants defined by the
// per-version file compiled for this Python (bytecode_py311.cpp, ...): kRawOpcodes (what each
// opcode byte means, how many CACHE units follow it, which way it jumps) and
// kBytecodeDialect.
#include "bytecode.h"

#include <algorithm>
#include <string>

#include "opcode_table.h"

namespace mini::capture {

namespace {

const char* const kOpcodeNames[] = {
#define MINI_OPCODE(name, handler) #name,
#include "opcodes.def"
#undef MINI_OPCODE
    "Unknown",
};

const char* const kCompareSymbols[] = {"<", "<=", "==", "!=", ">", ">="};

int jump_target_of(JumpKind jump, int next_offset, int arg) {
  switch (jump) {
    case JumpKind::Forward:
      return next_offset + 2 * arg;
    case JumpKind::Backward:
      return next_offset - 2 * arg;
    case JumpKind::None:
      break;
  }
  return -1;
}

// co_exceptiontable stores numbers as big-endian groups of 6 bits; bit 6 (64) of a byte says
// "another group follows", bit 7 (128) marks the first byte of an entry.
int read_varint(const unsigned char* data, Py_ssize_t size, Py_ssize_t* pos) {
  int value = data[*pos] & 63;
  while ((data[*pos] & 64) && *pos + 1 < size) {
    *pos += 1;
    value = (value << 6) | (data[*pos] & 63);
  }
  *pos += 1;
  return value;
}

}  // namespace

const char* opcode_name(Opcode op) { return kOpcodeNames[static_cast<int>(op)]; }

const BytecodeDialect& bytecode_dialect() { return kBytecodeDialect; }

bool decode_instructions(PyCodeObject* code, std::vector<Instruction>* out) {
  out->clear();
  PyObject* bytes = PyCode_GetCode(code);  // New
  if (bytes == nullptr) {
    return false;
  }
  const auto* data = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(bytes));
  const int size = static_cast<int>(PyBytes_GET_SIZE(bytes));

  int position = 0;
  while (position + 1 < size) {
    const int start = position;
    // Fold EXTENDED_ARG prefixes: each one contributes 8 more high bits to the argument.
    int extended = 0;
    while (kRawOpcodes[data[position]].op == Opcode::EXTENDED_ARG && position + 3 < size) {
      extended = (extended | data[position + 1]) << 8;
      position += 2;
    }
    const RawOpcode& raw = kRawOpcodes[data[position]];

    Instruction instruction;
    instruction.offset = start;
    instruction.op = raw.op;
    instruction.raw_opcode = data[position];
    instruction.arg = extended | data[position + 1];
    instruction.next_offset = position + 2 + 2 * raw.cache_entries;
    instruction.jump_target = jump_target_of(raw.jump, instruction.next_offset, instruction.arg);
    instruction.line = PyCode_Addr2Line(code, position);
    instruction.name = raw.name;
    out->push_back(instruction);

    position = instruction.next_offset;
  }
  Py_DECREF(bytes);
  return true;
}

int instruction_index_at(const std::vector<Instruction>& instructions, int offset) {
  auto it = std::lower_bound(
      instructions.begin(), instructions.end(), offset,
      [](const Instruction& instruction, int value) { return instruction.offset < value; });
  if (it == instructions.end() || it->offset != offset) {
    return -1;
  }
  return static_cast<int>(it - instructions.begin());
}

// ---------------------------------------------------------------------------------------
// Per-version argument decoding, driven by the dialect.

int compare_op_richcompare(const Instruction& instruction) {
  return instruction.arg >> kBytecodeDialect.compare_op_shift;
}

const char* compare_op_symbol(const Instruction& instruction) {
  const int which = compare_op_richcompare(instruction);
  return (which >= 0 && which < 6) ? kCompareSymbols[which] : "?";
}

int load_global_name_index(const Instruction& instruction) { return instruction.arg >> 1; }

bool load_global_pushes_null(const Instruction& instruction) {
  return (instruction.arg & 1) != 0;
}

int load_attr_name_index(const Instruction& instruction) {
  if (instruction.op == Opcode::LOAD_METHOD) {
    return instruction.arg;
  }
  return instruction.arg >> kBytecodeDialect.load_attr_name_shift;
}

bool load_attr_is_method(const Instruction& instruction) {
  if (instruction.op == Opcode::LOAD_METHOD) {
    return true;
  }
  return kBytecodeDialect.load_attr_method_bit && (instruction.arg & 1) != 0;
}

// ---------------------------------------------------------------------------------------
// Exception table and stack depths.

bool parse_exception_table(PyCodeObject* code, std::vector<ExceptionTableEntry>* out) {
  out->clear();
  PyObject* table = code->co_exceptiontable;  // Borrowed (bytes)
  if (table == nullptr || !PyBytes_Check(table)) {
    return true;
  }
  const auto* data = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(table));
  const Py_ssize_t size = PyBytes_GET_SIZE(table);
  Py_ssize_t pos = 0;
  while (pos < size) {
    if ((data[pos] & 128) == 0) {
      PyErr_SetString(PyExc_SystemError, "co_exceptiontable: entry does not start at a mark");
      return false;
    }
    ExceptionTableEntry entry;
    entry.start = 2 * read_varint(data, size, &pos);
    const int length = 2 * read_varint(data, size, &pos);
    entry.end = entry.start + length;
    entry.target = 2 * read_varint(data, size, &pos);
    const int depth_and_lasti = read_varint(data, size, &pos);
    entry.depth = depth_and_lasti >> 1;
    entry.push_lasti = (depth_and_lasti & 1) != 0;
    out->push_back(entry);
  }
  return true;
}

const ExceptionTableEntry* find_exception_handler(
    const std::vector<ExceptionTableEntry>& table, int offset) {
  for (const ExceptionTableEntry& entry : table) {
    if (entry.start <= offset && offset < entry.end) {
      return &entry;
    }
  }
  return nullptr;
}

bool is_unconditional_exit(const Instruction& instruction) {
  switch (instruction.op) {
    case Opcode::JUMP_FORWARD:
    case Opcode::JUMP_BACKWARD:
    case Opcode::JUMP_BACKWARD_NO_INTERRUPT:
    case Opcode::RETURN_VALUE:
    case Opcode::RETURN_CONST:
    case Opcode::RAISE_VARARGS:
    case Opcode::RERAISE:
    case Opcode::INTERPRETER_EXIT:
      return true;
    default:
      return false;
  }
}

namespace {

// Records `depth` for the instruction at `offset` and queues it; false on a disagreement.
bool reach(const std::vector<Instruction>& instructions, int offset, int depth,
           std::vector<int>* depths, std::vector<int>* worklist) {
  const int index = instruction_index_at(instructions, offset);
  if (index < 0 || depth < 0) {
    PyErr_Format(PyExc_SystemError,
                 "stack depth: no instruction at offset %d, or negative depth %d", offset, depth);
    return false;
  }
  int& known = (*depths)[index];
  if (known == -1) {
    known = depth;
    worklist->push_back(index);
    return true;
  }
  if (known != depth) {
    PyErr_Format(PyExc_SystemError, "stack depth at offset %d is both %d and %d", offset, known,
                 depth);
    return false;
  }
  return true;
}

bool stack_effect(const Instruction& instruction, bool jump, int* effect) {
  if (instruction.op == Opcode::RETURN_GENERATOR) {
    // The generator's frame continues after RETURN_GENERATOR when it is first resumed, with
    // the sent value pushed (the next POP_TOP drops it). 3.13's compiler says +1; 3.11 and
    // 3.12 add this prologue after computing co_stacksize and say 0.
    *effect = 1;
    return true;
  }
  *effect = PyCompile_OpcodeStackEffectWithJump(instruction.raw_opcode, instruction.arg,
                                                jump ? 1 : 0);
  if (*effect == PY_INVALID_STACK_EFFECT) {
    PyErr_Format(PyExc_SystemError, "no stack effect known for %s (offset %d)",
                 instruction.name, instruction.offset);
    return false;
  }
  return true;
}

}  // namespace

bool compute_stack_depths(PyCodeObject* code, const std::vector<Instruction>& instructions,
                          const std::vector<ExceptionTableEntry>& exception_table,
                          std::vector<int>* depths) {
  depths->assign(instructions.size(), -1);
  if (instructions.empty()) {
    return true;
  }
  std::vector<int> worklist;
  if (!reach(instructions, instructions[0].offset, 0, depths, &worklist)) {
    return false;
  }
  while (!worklist.empty()) {
    const int index = worklist.back();
    worklist.pop_back();
    const Instruction& instruction = instructions[index];
    const int depth = (*depths)[index];

    // Edge 1: an exception raised here goes to the handler covering this offset.
    const ExceptionTableEntry* handler =
        find_exception_handler(exception_table, instruction.offset);
    if (handler != nullptr) {
      const int handler_depth = handler->depth + (handler->push_lasti ? 1 : 0) + 1;
      if (!reach(instructions, handler->target, handler_depth, depths, &worklist)) {
        return false;
      }
    }
    int effect = 0;
    // Edge 2: the jump.
    if (instruction.jump_target >= 0) {
      if (!stack_effect(instruction, true, &effect) ||
          !reach(instructions, instruction.jump_target, depth + effect, depths, &worklist)) {
        return false;
      }
    }
    // Edge 3: falling through to the next instruction.
    if (!is_unconditional_exit(instruction) &&
        instruction.next_offset < instructions.back().next_offset) {
      if (!stack_effect(instruction, false, &effect) ||
          !reach(instructions, instruction.next_offset, depth + effect, depths, &worklist)) {
        return false;
      }
    }
  }
  // The compiler sized the frame's value stack with the same walk: nothing may exceed it.
  for (size_t i = 0; i < depths->size(); ++i) {
    if ((*depths)[i] > code->co_stacksize) {
      PyErr_Format(PyExc_SystemError, "stack depth %d at offset %d exceeds co_stacksize %d",
                   (*depths)[i], instructions[i].offset, code->co_stacksize);
      return false;
    }
  }
  return true;
}

}  // namespace mini::capture
