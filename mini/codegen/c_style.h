// c_style.h — how a C-like target spells a LoopKernel's expressions (loop_ir.h): one table of
// ops for every target, and per target only what differs (types, non-finite constants, the
// library function behind each math op, the kernel name's prefix).
//
// A new op is one case in CStyle::op (c_style.cpp), plus its library function in each
// target's `math` where it calls one. Names in the spelled text: in<b> is buffer b's pointer,
// t<id> / r<id> a full / row value computed earlier, x<d> the index along dim d, i a flat
// loop's index, strides[b][a] a stride passed at run time; a Local (loop_ir.h) is its name.
// A renderer that holds a load or a value in a local of its own (a vector's lane, a register)
// substitutes a Local for it in the expression first (loop_ir.h substitute): the spelling
// follows from the data, and nothing here is consulted while spelling.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "codegen/loop_ir.h"

namespace mini::codegen {

struct Target {
  const char* name;      // "cpp", "cuda": the prefix of kernel names (cpp_poi_fused_add_0)
  std::string (*type)(DType);
  const char* nan;       // a double NaN and +infinity, as an expression
  const char* inf;
  // The library function op calls for compute type T ("std::log", "mini::exp_of<float>").
  std::string (*math)(OpKind op, const std::string& T);
  // A bool buffer holds bytes and an element is read as `(in[i] != 0)` (C++: GCC vectorizes a
  // byte compare where a bool load kept a masked softmax's loops 3x slower), not as a bool.
  bool bool_as_byte;
};

extern const Target kCppTarget;
extern const Target kCudaTarget;

class CStyle {
 public:
  explicit CStyle(const Target& target) : t_(target) {}

  const Target& target() const { return t_; }
  std::string type(DType d) const { return t_.type(d); }
  std::string expr(const ExprPtr& e) const;
  // `<pad>const T <prefix><id> = <node id's expression>;` (prefix t: a full value, r: a row value)
  std::string define(const LoopKernel& k, const std::string& pad, char prefix, int id, bool flat_ok) const;
  std::string index(const Expr& load) const;
  // The element a load reads, `in<buffer>[<index>]` (without a padded load's mask or a byte's
  // compare): what a vector read takes the address of.
  std::string element(const Expr& load) const;
  // Whether op() spells `e` as a call of a math function (exp, sin, pow(x, 2.5), ...; not
  // pow(x, 2), a product): what an unrolled loop inlines again in every copy.
  static bool calls_math(const Expr& e);
  // Float32 ops spelled as a call of the function named here instead of the table's spelling:
  // the C++ renderer's out-of-line vector math, in a source with many transcendental ops
  // (cpp_plan.h, cpp_outlines_math). Empty for every other source.
  std::map<OpKind, std::string> outlined;

 private:
  std::string constant(const Expr& c) const;
  std::string op(const Expr& e, const std::vector<std::string>& a) const;
  const Target& t_;
};

// Names each kernel of `s` for target t (poi_fused_add_0 -> cpp_poi_fused_add_0), in the
// kernels and in the fusion decisions that name them. Kernel names are the renderer's: fusion
// names what a kernel fuses, not what it becomes; `shape`, where given, says what it becomes
// ("poi", "per": the row held by the kernel, "red": the row looped over), replacing fusion's
// guess from the row's length (per_fused_amax_0 -> cuda_red_fused_amax_0).
void name_kernels(fusion::Schedule& s, const Target& t,
                  const std::function<std::string(const fusion::FusionGroup&)>& shape = nullptr);

// The index arithmetic both renderers print over a kernel's space (symbols[k] is a size
// symbol's value at run time, x<d> the index along dim d):
// an extent, "64LL" or "symbols[0]"
std::string size_expr(int64_t s);
// the product of the extents of `dims` ("1LL" for none)
std::string product(const Shape& space, const std::vector<int64_t>& dims);
// lines that split the flat index `flat` into the x<d> of `dims` (row-major)
std::string unflatten(const Shape& space, const std::string& flat, const std::vector<int64_t>& dims,
                      const std::string& pad, const std::string& index_type = "int64_t");
// the row-major linear index of the x<d> of `dims` in a contiguous tensor of those extents
std::string linear_index(const Shape& space, const std::vector<int64_t>& dims);
// ... of every dim of `space`
std::string linear_full(const Shape& space);

// A rendered kernel's body: `text` (one kernel as a renderer wrote it, named `name`) with its
// comments taken out, its name replaced by KERNEL, and each identifier that carries a number
// (v183, s183, acc183, w183v, in0, x1: values named by their graph node, buffers, dims) renamed
// by first appearance (_0, _1, ...). Two kernels of one body compute the same thing from the
// same arguments: layer 1's and layer 12's copies of a kernel, named and numbered by their
// nodes, have one body. The key the kernel caches use (cuda_program.h).
std::string kernel_body(const std::string& text, const std::string& name);

// Every line of `text` with `pad` in front.
std::string indent(const std::string& text, const std::string& pad);

}  // namespace mini::codegen
