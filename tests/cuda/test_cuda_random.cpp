// test_cuda_random.cpp — random.cu: Philox-4x32-10 against its published test vectors (a host
// reference written here) and the layout of counters to elements, reproducibility from
// (seed, offset), independence from the launch size, and the moments of the distributions.
#include <array>
#include <cstdint>

#include "cuda_helpers.h"

using namespace mini_cuda_test;
namespace cuda = mini::cuda;

namespace {

// Philox-4x32-10 on the host, from Salmon et al. (SC 2011), as the reference.
std::array<uint32_t, 4> philox_ref(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
    k = {k[0] + 0x9E3779B9u, k[1] + 0xBB67AE85u};
  }
  return c;
}

std::vector<double> draw(int64_t n, DType d, bool normal, uint64_t seed, uint64_t offset) {
  Tensor t = empty_device({n}, d);
  cuda::random(t, normal, seed, offset);
  return values(t);
}

}  // namespace

TEST_CASE("the host Philox reference matches the published test vectors", "[cuda][random]") {
  // Random123's kat_vectors for philox4x32_10 (no GPU needed)
  CHECK(philox_ref({0, 0, 0, 0}, {0, 0}) ==
        std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox_ref({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) ==
        std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox_ref({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  CHECK(cuda::random_offset_increment(0) == 0);
  CHECK(cuda::random_offset_increment(1) == 4);
  CHECK(cuda::random_offset_increment(16) == 4);
  CHECK(cuda::random_offset_increment(17) == 8);
}

TEST_CASE("uniform values are Philox words laid out by element", "[cuda][random]") {
  MINI_REQUIRE_GPU();
  uint64_t seed = 0x123456789abcdefULL, offset = (uint64_t(1) << 32) + 12;
  std::vector<double> f = draw(37, DType::Float32, false, seed, offset);
  std::vector<double> d = draw(37, DType::Float64, false, seed, offset);
  std::array<uint32_t, 2> key{uint32_t(seed), uint32_t(seed >> 32)};
  for (int64_t i = 0; i < 37; i++) {
    INFO("element " << i);
    uint64_t ctr = offset + uint64_t(i / 4);
    auto w = philox_ref({uint32_t(ctr), uint32_t(ctr >> 32), 0, 0}, key);
    CHECK(f[size_t(i)] == double(w[size_t(i % 4)] >> 8) * 0x1.0p-24);
    int j = int(i % 4);
    auto wd = philox_ref({uint32_t(ctr), uint32_t(ctr >> 32), uint32_t(j / 2), 0}, key);
    uint32_t hi = wd[size_t(2 * (j % 2))], lo = wd[size_t(2 * (j % 2) + 1)];
    CHECK(d[size_t(i)] == double(((uint64_t(hi) << 32) | lo) >> 11) * 0x1.0p-53);
  }
}

TEST_CASE("random values depend only on seed, offset and index", "[cuda][random]") {
  MINI_REQUIRE_GPU();
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (bool normal : {false, true}) {
      INFO(mini::dtype_name(d) << (normal ? " normal" : " uniform"));
      std::vector<double> a = draw(1000, d, normal, 42, 8);
      CHECK(a == draw(1000, d, normal, 42, 8));
      std::vector<double> first = draw(100, d, normal, 42, 8);  // a smaller launch
      CHECK(first == std::vector<double>(a.begin(), a.begin() + 100));
      std::vector<double> shifted = draw(1000, d, normal, 42, 8 + cuda::random_offset_increment(1000));
      int same = 0;
      for (size_t i = 0; i < a.size(); i++) same += a[i] == shifted[i];
      CHECK(same < (d == DType::BFloat16 ? 100 : 5));  // another offset: other numbers
      std::vector<double> other_seed = draw(1000, d, normal, 43, 8);
      CHECK(other_seed != a);
      if (!normal)
        for (double v : a) CHECK((v >= 0 && v < 1));
    }
  }
}

TEST_CASE("uniform and normal moments", "[cuda][random]") {
  MINI_REQUIRE_GPU();
  const int64_t n = 1000000;
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    INFO(mini::dtype_name(d));
    std::vector<double> z = draw(n, d, true, 7, 0);
    double mean = 0, sq = 0;
    for (double v : z) mean += v, sq += v * v;
    mean /= double(n);
    double var = sq / double(n) - mean * mean;
    CHECK(std::fabs(mean) < 0.005);  // 5 standard errors (1 / sqrt(n) = 0.001)
    CHECK(std::fabs(var - 1) < 0.01);
    std::vector<double> u = draw(n, d, false, 7, 0);
    mean = 0, sq = 0;
    for (double v : u) mean += v, sq += v * v;
    mean /= double(n);
    var = sq / double(n) - mean * mean;
    CHECK(std::fabs(mean - 0.5) < 0.005);
    CHECK(std::fabs(var - 1.0 / 12) < 0.005);
  }
}
