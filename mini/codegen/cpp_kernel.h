// cpp_kernel.h — rendering a Schedule's fused kernels as C++ source.
//
// In:  a Schedule (mini/fusion).
// Out: one translation unit: a prelude (the vectorizable math of mini/tensor/scalar_math.h)
//      and one `extern "C"` function per kernel, named for what it fused, with a comment
//      naming the graph nodes it came from. Each kernel's loops are planned first (cpp_plan.h:
//      plan_cpp, statements of stmt.h: OpenMP splits the outer loop, the inner loop is one the
//      compiler vectorizes) and then spelled (cpp_kernel.cpp), statement by statement.
// Calling convention of every kernel:
//   void NAME(char* const* buffers, const int64_t* const* strides, const int64_t* symbols)
//   buffers: the kernel's loads (FusionGroup::loads order), then its stores (::stores order)
//   strides: for each load, its strides in elements (used where they are not compile-time
//            constants); stores are contiguous
//   symbols: the value of each size symbol s0, s1, ... for this call
#pragma once
#include <string>
#include <vector>

#include "fusion/schedule.h"

namespace mini::codegen {

// One kernel function per distinct body (codegen::kernel_body): a kernel whose body an earlier
// one has (a layer's copy of the layer before's) is only its comment, naming the function it
// runs, so the C++ compiler compiles each body once. `functions`, where given, gets the
// function each kernel runs (its own name, or the earlier kernel's).
std::string render_cpp(const fusion::Schedule& schedule, std::vector<std::string>* functions = nullptr);
// mini/tensor/scalar_math.h's text, embedded at configure time (its include guard taken out):
// the prelude of the C++ renderer's sources, and of the CUDA renderer's (it compiles as CUDA).
std::string scalar_math_prelude();

// The prelude sits between these two lines of every rendered source.
constexpr const char* kPreludeBegin = "// ---- prelude: mini/tensor/scalar_math.h ----";
constexpr const char* kPreludeEnd = "// ---- end of prelude ----";
// `source` with the prelude replaced by a one-line note: what MINI_LOGS=output_code prints.
std::string without_prelude(const std::string& source);

// `source` (render_cpp's, for `schedule`) cut into at most `n` translation units of about
// equal size, each the includes and prelude followed by a run of whole kernels, for
// compiling in parallel: kernels are independent functions, and everything the units
// share is inline or static. Fewer units when there are fewer kernels.
std::vector<std::string> split_source(const std::string& source, const fusion::Schedule& schedule, int n);

}  // namespace mini::codegen
