// test_bfloat16.cpp — bfloat16.h: float -> bfloat16 rounds to nearest, ties to even; NaN stays
// a (quiet) NaN, infinities stay infinite; bfloat16 -> float is exact. Expected bits are
// written from the format (sign, 8 exponent bits, 7 mantissa bits), not from the code.
#include <cmath>
#include <cstring>
#include <limits>

#include "helpers.h"
#include "tensor/bfloat16.h"

using mini::bfloat16;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t bits_of(float f) { return bfloat16(f).bits; }
}  // namespace

TEST_CASE("bfloat16 keeps values it can represent exactly", "[tensor][bfloat16]") {
  CHECK(bits_of(1.0f) == 0x3F80);
  CHECK(bits_of(-2.0f) == 0xC000);
  CHECK(bits_of(0.0f) == 0x0000);
  CHECK(bits_of(-0.0f) == 0x8000);
  CHECK(bits_of(1.0f + 0x1p-7f) == 0x3F81);  // one ulp above 1
  for (uint32_t b : {0x0001u, 0x3F80u, 0x7F7Fu, 0x8080u, 0xC2F7u})  // a denormal, 1, max, ...
    CHECK(bits_of(bfloat16::to_float(static_cast<uint16_t>(b))) == b);
}

TEST_CASE("bfloat16 rounds to nearest, ties to even", "[tensor][bfloat16]") {
  CHECK(bits_of(1.0f + 0x1p-8f) == 0x3F80);                  // halfway, 1 is even: down
  CHECK(bits_of(1.0f + 3 * 0x1p-8f) == 0x3F82);              // halfway, 1+2^-6 is even: up
  CHECK(bits_of(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);       // past halfway: up
  CHECK(bits_of(1.0f + 0x1p-8f - 0x1p-20f) == 0x3F80);       // short of halfway: down
  CHECK(bits_of(-(1.0f + 3 * 0x1p-8f)) == 0xBF82);           // the sign does not matter
  CHECK(bits_of(from_bits(0x00008000u)) == 0x0000);          // denormal tie to even 0
  CHECK(bits_of(from_bits(0x00018000u)) == 0x0002);          // denormal tie to even 2
  CHECK(bits_of(std::numeric_limits<float>::max()) == 0x7F80);  // overflows to inf
  CHECK(bits_of(from_bits(0x7F7F7FFFu)) == 0x7F7F);          // just below: largest finite
}

TEST_CASE("bfloat16 keeps NaN and infinities", "[tensor][bfloat16]") {
  CHECK(bits_of(INFINITY) == 0x7F80);
  CHECK(bits_of(-INFINITY) == 0xFF80);
  CHECK(std::isnan(float(bfloat16(NAN))));
  // a NaN whose payload is only in the low 16 bits would round to inf without the NaN check
  CHECK(std::isnan(float(bfloat16(from_bits(0x7F800001u)))));
  CHECK(std::isnan(float(bfloat16(from_bits(0xFF80FFFFu)))));
  CHECK((bits_of(from_bits(0x7F800001u)) & 0x0040) == 0x0040);  // quiet
}

TEST_CASE("bfloat16 widens to float exactly", "[tensor][bfloat16]") {
  CHECK(float(bfloat16::from_bits(0x3F80)) == 1.0f);
  CHECK(float(bfloat16::from_bits(0x4049)) == 3.140625f);
  CHECK(float(bfloat16::from_bits(0x0001)) == 0x1p-133f);  // the smallest denormal
}
