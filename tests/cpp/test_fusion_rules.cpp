// test_fusion_rules.cpp — A3's rules and checks one at a time (mini/fusion/schedule.cpp,
// declared in schedule_internal.h), on kernels written down by hand: a student who has written
// some of them sees those pass before the greedy walk that asks them exists (test_fusion.cpp
// checks the walk). Each case is one rule, so a grade counts the rules written.
#include <catch2/catch.hpp>

#include <string>

#include "fusion/schedule_internal.h"

using namespace mini;
using namespace mini::fusion;
using namespace mini::fusion::rules;

namespace {

// A kernel over `space`, reducing `reduced` (empty: pointwise), holding `nodes` nodes.
FusionGroup kernel(Shape space, std::vector<int64_t> reduced = {}, size_t nodes = 1) {
  FusionGroup k;
  k.space = std::move(space);
  k.reduced = std::move(reduced);
  for (size_t i = 0; i < nodes; i++) k.nodes.push_back((int)i);
  return k;
}

Candidate pointwise(Shape shape) {
  Candidate c;
  c.what = "mul_1 (mul)";
  c.shape = std::move(shape);
  return c;
}

Candidate reduction(Shape in_shape, std::vector<int64_t> dims, int waits = 0) {
  Candidate c;
  c.what = "sum_1 (sum)";
  c.reduction = true;
  c.in_shape = std::move(in_shape);
  c.dims = std::move(dims);
  c.waits = waits;
  return c;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("rule same_space: a pointwise node over exactly the kernel's space", "[A3][fusion_rules]") {
  CHECK(same_space(kernel({4, 8}), {4, 8}));
  CHECK_FALSE(same_space(kernel({4, 8}), {8, 4}));   // as many elements, another space
  CHECK_FALSE(same_space(kernel({4, 8}), {4, 1}));   // a broadcast operand's shape is not the space
  CHECK(same_space(kernel({4, 8}, {1}), {4, 8}));    // a reduction kernel's full space
}

TEST_CASE("rule is_row_epilogue: a node over the rows of a reduction kernel, kept dims or not",
          "[A3][fusion_rules]") {
  CHECK(is_row_epilogue(kernel({4, 8}, {1}), {4, 1}));
  CHECK(is_row_epilogue(kernel({4, 8}, {1}), {4}));
  CHECK(is_row_epilogue(kernel({2, 3, 8}, {2}), {2, 3, 1}));
  CHECK_FALSE(is_row_epilogue(kernel({4, 8}), {4, 1}));     // a pointwise kernel has no rows
  CHECK_FALSE(is_row_epilogue(kernel({4, 8}, {1}), {4, 8})); // the full space is not a row's
  CHECK_FALSE(is_row_epilogue(kernel({4, 8}, {1}), {1, 8})); // the other dim's rows
}

TEST_CASE("rule reduction_absorbs_producers: the first reduction over the kernel's space",
          "[A3][fusion_rules]") {
  CHECK(reduction_absorbs_producers(kernel({4, 8}), {4, 8}));
  CHECK_FALSE(reduction_absorbs_producers(kernel({4, 8}, {1}), {4, 8}));  // it has one already
  CHECK_FALSE(reduction_absorbs_producers(kernel({4, 8}), {8, 4}));
}

TEST_CASE("rule same_rows: another reduction over the same space and dims", "[A3][fusion_rules]") {
  CHECK(same_rows(kernel({4, 8}, {1}), {4, 8}, {1}));
  CHECK_FALSE(same_rows(kernel({4, 8}, {1}), {4, 8}, {0}));  // other dims: other rows
  CHECK_FALSE(same_rows(kernel({4, 8}), {4, 8}, {1}));       // no reduction to share rows with
  CHECK_FALSE(same_rows(kernel({4, 8}, {1}), {4, 9}, {1}));
}

TEST_CASE("check fits_size: a kernel holds at most kMaxFusionSize nodes", "[A3][fusion_rules]") {
  CHECK(fits_size(kernel({4}, {}, kMaxFusionSize - 1)).fuse);
  Verdict full = fits_size(kernel({4}, {}, kMaxFusionSize));
  CHECK_FALSE(full.fuse);
  CHECK(has(full.why, std::to_string(kMaxFusionSize)));
  CHECK(has(full.why, "max_fusion_size"));
}

TEST_CASE("check fits_passes: a reduction waits for at most four passes", "[A3][fusion_rules]") {
  CHECK(fits_passes(reduction({4, 8}, {1}, 3)).fuse);
  CHECK(fits_passes(pointwise({4, 8})).fuse);  // a pointwise node is no pass
  Verdict fifth = fits_passes(reduction({4, 8}, {1}, 4));
  CHECK_FALSE(fifth.fuse);
  CHECK(has(fifth.why, "pass 5"));
}

TEST_CASE("check fits_loads: the kernel's loads, counted once, at most max_loads", "[A3][fusion_rules]") {
  Candidate c = pointwise({4, 8});
  c.loads = {3, 4};
  CHECK(fits_loads(c, {1, 2}, 4).fuse);
  CHECK(fits_loads(c, {1, 3}, 3).fuse);  // tensor 3 is read already: three in all
  Verdict over = fits_loads(c, {1, 2}, 3);
  CHECK_FALSE(over.fuse);
  CHECK(has(over.why, "4 tensors"));
  CHECK(fits_loads(c, {1, 2, 5, 6, 7}, 0).fuse);  // 0: no limit
}

TEST_CASE("check fits_shape: the first rule that applies, named; else why not", "[A3][fusion_rules]") {
  Verdict same = fits_shape(kernel({4, 8}), pointwise({4, 8}));
  CHECK(same.fuse);
  CHECK(has(same.why, "same iteration space"));
  Verdict epilogue = fits_shape(kernel({4, 8}, {1}), pointwise({4, 1}));
  CHECK(epilogue.fuse);
  CHECK(has(epilogue.why, "per-row epilogue"));
  Verdict absorbs = fits_shape(kernel({4, 8}), reduction({4, 8}, {1}));
  CHECK(absorbs.fuse);
  CHECK(has(absorbs.why, "absorbs its pointwise producers"));
  Verdict rows = fits_shape(kernel({4, 8}, {1}), reduction({4, 8}, {1}));
  CHECK(rows.fuse);
  CHECK(has(rows.why, "same rows"));
  Verdict other_dims = fits_shape(kernel({4, 8}, {1}), reduction({4, 8}, {0}));
  CHECK_FALSE(other_dims.fuse);
  CHECK(has(other_dims.why, "other dims"));
  Verdict other_space = fits_shape(kernel({4, 8}), pointwise({8, 4}));
  CHECK_FALSE(other_space.fuse);
  CHECK(has(other_space.why, "differs from the kernel's"));
}
