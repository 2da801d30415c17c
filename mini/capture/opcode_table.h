// opcode_table.h: the per-version data behind bytecode.cpp (internal to capture/).
//
// Exactly one of bytecode_py311.cpp, bytecode_py312.cpp, bytecode_py313.cpp defines these
// two constants: each file is wrapped in a single check of the Python version it is for, so
// a build may compile all three and the one matching Python.h takes effect.
#pragma once

#include "bytecode.h"

namespace mini::capture {

enum class JumpKind : unsigned char {
  None,      // does not jump
  Forward,   // target = next_offset + 2 * arg
  Backward,  // target = next_offset - 2 * arg
};

// What one raw opcode byte means on this version.
struct RawOpcode {
  const char* name;            // CPython's opname ("<123>" for unused bytes)
  Opcode op;                   // normalized
  unsigned char cache_entries; // inline CACHE code units after the instruction
  JumpKind jump;
};

extern const RawOpcode kRawOpcodes[256];
extern const BytecodeDialect kBytecodeDialect;

}  // namespace mini::capture
